"""The live page's per-task table: the current level's numbers per prompt class with 95% intervals that
hold what they promise, in bounded memory."""

from __future__ import annotations

import math
import random

from locust_spec.core.runfiles import RequestRow
from locust_spec.recording.task_board import MAX_TASKS, OTHER, Ratio, TaskBoard, TaskStats, median_interval
from locust_spec.recording.timeline import Timeline


def row(cls: str, users: int = 4, start: float = 100.0, accepted: int = 30, drafted: int = 40,
        tokens: int = 100, e2e_ms: float = 2000.0, tpot_ms: float = 10.0, **extra) -> RequestRow:
    return RequestRow(start, users, cls, f"{cls}-1", output_tokens=tokens, ttft_ms=50.0, tpot_ms=tpot_ms,
                      e2e_ms=e2e_ms, spec_accepted_tokens=accepted, spec_draft_tokens=drafted, **extra)


def by_task(board: TaskBoard) -> dict[str, dict]:
    table = board.to_dict()
    return {r[0]: dict(zip(table["fields"], r, strict=True)) for r in table["rows"]}


def coverage(trials: int, interval, truth: float) -> float:
    """The share of `trials` intervals (each from a fresh sample) that hold the true value."""
    hits = 0
    for trial in range(trials):
        _, lo, hi = interval(random.Random(trial))
        hits += lo <= truth <= hi
    return hits / trials


def test_a_ratio_over_requests_covers_the_true_value_about_95_percent_of_the_time():
    def acceptance(rng: random.Random):
        ratio = Ratio()
        for _ in range(40):
            drafted = rng.randint(10, 80)
            ratio.add(sum(rng.random() < 0.6 for _ in range(drafted)), drafted)
        return ratio.interval()

    assert 0.91 <= coverage(400, acceptance, 0.6) <= 0.99


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    def tpot(rng: random.Random):
        stats = TaskStats()
        for _ in range(60):
            stats.add(row("t", tpot_ms=rng.expovariate(1 / 20.0)))
        return median_interval(stats.tpot)

    assert 0.90 <= coverage(300, tpot, 20.0 * math.log(2)) <= 0.995


def test_each_task_of_the_current_level_gets_its_row_and_warm_up_and_failures_count_as_the_verdict_does():
    board = TaskBoard()
    for i in range(10):
        board.request(row("rag", accepted=36, drafted=40, tpot_ms=8.0 + i % 3))
        board.request(row("translation", accepted=6, drafted=40, tpot_ms=20.0 + i % 3))
    board.request(row("rag", warmup=1, accepted=0))
    board.request(row("rag", error="http_500: boom", accepted=0))
    board.request(row("rag", error="interrupted: test stopped", accepted=0))
    tasks = by_task(board)
    assert board.to_dict()["level"] == 4
    assert (tasks["rag"]["requests"], tasks["rag"]["errors"]) == (11, 1)
    assert tasks["rag"]["acceptance"] == 0.9 and tasks["translation"]["acceptance"] == 0.15
    assert tasks["rag"]["tpot_p50"] < tasks["translation"]["tpot_p50_lo"]
    assert tasks["rag"]["tok_s"] == 50.0  # 100 tokens over 2 s, per stream


def test_a_new_level_takes_the_table_and_a_straggler_of_the_last_still_counts_there():
    board = TaskBoard()
    board.request(row("qa", users=1, start=10.0))
    board.request(row("qa", users=16, start=20.0))
    board.request(row("qa", users=1, start=19.0))  # started before the change, finished after it
    assert board.to_dict()["level"] == 16 and by_task(board)["qa"]["requests"] == 1
    assert sum(s.requests for s in board.levels[1].values()) == 2
    board.request(row("qa", users=64, start=30.0))
    board.request(row("qa", users=1, start=18.0))  # two levels back: no longer kept, not counted anywhere
    assert set(board.levels) == {16, 64}


def test_classes_past_the_bound_share_one_row():
    board = TaskBoard()
    for i in range(MAX_TASKS + 5):
        board.request(row(f"category-{i:02d}"))
    tasks = by_task(board)
    assert len(tasks) == MAX_TASKS + 1 and tasks[OTHER]["requests"] == 5


def test_the_live_page_data_carries_the_table_and_a_new_test_starts_it_afresh():
    timeline = Timeline()
    timeline.start(100.0)
    timeline.tasks.request(row("summarization"))
    assert timeline.to_dict()["tasks"]["rows"][0][0] == "summarization"
    timeline.start(200.0)
    fresh = timeline.to_dict()["tasks"]
    assert fresh["level"] is None and fresh["rows"] == []
