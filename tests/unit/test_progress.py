"""spec-ab's progress: the line, the readers of the child's growing files, the display's cadence."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from locust_spec.ab import progress
from locust_spec.core.design import INTERLEAVED, Design
from locust_spec.core.runfiles import SERVER_METRICS_COLUMNS
from locust_spec.metrics.exposition import Sample, Snapshot, rows_from_snapshot
from locust_spec.wiring.shape import LadderSettings

SWEEP = progress.Sweep(1, 2, ("candidate",), 0, LadderSettings((1, 64), 20.0, 2.0))


def test_the_line_names_the_arm_level_phase_time_and_what_was_delivered():
    assert progress.stage_text(SWEEP, 1.0).startswith("[2/2] candidate r0 1 user (level 1/2, warm-up)")
    later = progress.stage_text(SWEEP, 25.0)
    assert "64 users (level 2/2, measuring)" in later and "5s/20s" in later and "total  25s/40s" in later
    assert "ladder done" in progress.stage_text(SWEEP, 41.0)
    line = progress.line(SWEEP, 25.0, [progress.Live(120, 3, 4567.8, 0.6789)])
    assert line.endswith("| 120 req, 3 failed, 4568 tok/s, acceptance 0.68")
    assert progress.live_text(progress.Live()) == "0 req, 0 failed, - tok/s, acceptance -"


def test_an_interleaved_session_names_the_block_and_whose_turn_it_is_and_both_arms():
    design = Design.planned(INTERLEAVED, (1, 64), 40.0, 2.0, 2, 5.0).for_slot(0, 1000.0)
    ladder = LadderSettings((1, 64), 40.0, 2.0, design=design)
    sweep = progress.Sweep(0, 1, ("baseline", "candidate"), 0, ladder)
    assert "starting in 3s" in progress.stage_text(sweep, -3.0)
    assert "(level 1/2, block 1/8 baseline, warm-up)" in progress.stage_text(sweep, 1.0)
    assert "(level 1/2, block 1/8 baseline, measuring)" in progress.stage_text(sweep, 3.0)
    # the candidate's first block at a level is its warm-up too; its second one (ABBA) is not
    assert "(level 1/2, block 2/8 candidate, warm-up)" in progress.stage_text(sweep, 6.0)
    assert "(level 1/2, block 3/8 candidate, measuring)" in progress.stage_text(sweep, 11.0)
    line = progress.line(sweep, 11.0, [progress.Live(5), progress.Live(9)])
    assert line.endswith("| baseline: 5 req, 0 failed, - tok/s, acceptance - | candidate: 9 req, 0 failed, "
                         "- tok/s, acceptance -")


def test_a_phase_says_how_far_it_got_every_interval_until_it_ends():
    out = io.StringIO()
    display = progress.Display(out, tty=False)
    seen = []
    with progress.phase(display, lambda s: f"priming {len(seen)} ({s:.0f}s)", interval_s=0.05):
        while len(out.getvalue().splitlines()) < 3:
            seen.append(1)
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("priming ") for line in lines)
    time.sleep(0.15)
    assert len(out.getvalue().splitlines()) == len(lines), "silent once the phase ended"


def _stats_csv(requests: list[tuple[str, str, int, bool]]) -> str:
    """Locust's own PREFIX_stats.csv text after these (type, class, tokens, failed) requests."""
    env = Environment()
    for kind, name, tokens, failed in requests:
        env.stats.log_request(kind, name, 10, tokens)
        if failed:
            env.stats.log_error(kind, name, "boom")
    out = io.StringIO()
    StatsCSV(env, PERCENTILES_TO_REPORT).requests_csv(csv.writer(out))
    return out.getvalue()


def test_requests_failures_and_tokens_come_from_the_e2e_rows_of_locusts_stats():
    text = _stats_csv([("E2E", "code", 100, False), ("TTFT", "code", 0, False), ("E2E", "quote", 50, False),
                       ("E2E", "quote", 0, True), ("TPOT", "quote", 0, False)])
    assert progress.e2e_totals(text) == (3, 1, 150.0)
    assert progress.e2e_totals(text[: len(text) // 2]) is None, "a half-rewritten table is not read"
    assert progress.e2e_totals("") is None


def test_tok_s_is_taken_over_the_recent_window():
    rate = progress.TokenRate(window_s=10.0)
    assert rate.add(0.0, 0.0) is None
    assert rate.add(5.0, 500.0) == 100.0
    assert rate.add(10.0, 1000.0) == 100.0
    assert rate.add(20.0, 1500.0) == 50.0, "samples older than the window are dropped"
    assert rate.add(30.0, 1500.0) == 0.0


def _scrape(t: float, drafts: float, draft_tokens: float, accepted: float) -> list[list[str]]:
    labels = (("engine", "0"),)
    samples = (Sample("vllm:spec_decode_num_drafts_total", labels, drafts),
               Sample("vllm:spec_decode_num_draft_tokens_total", labels, draft_tokens),
               Sample("vllm:spec_decode_num_accepted_tokens_total", labels, accepted),
               Sample("vllm:generation_tokens_total", labels, accepted * 2))
    return [list(row) for row in rows_from_snapshot(Snapshot(t, "http://s/metrics", samples))]


def _append(path: Path, rows: list[list[str]], cut: int | None = None) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    text = buf.getvalue()
    with path.open("a") as fh:
        fh.write(text[:cut] if cut is not None else text)
    return text[cut:] if cut is not None else ""


def test_acceptance_is_read_from_the_last_two_complete_scrapes_as_the_csv_grows(tmp_path):
    path = tmp_path / "r0_server_metrics.csv"
    tail = progress.MetricsTail(path)
    assert tail.poll() is None, "no file yet"
    _append(path, [list(SERVER_METRICS_COLUMNS), *_scrape(1.0, 0, 0, 0)])
    assert tail.poll() is None, "one scrape, and not known complete"
    rest = _append(path, _scrape(2.0, 10, 40, 20), cut=30)  # the writer is mid-row
    assert tail.poll() is None
    with path.open("a") as fh:
        fh.write(rest)
    _append(path, _scrape(3.0, 20, 80, 50))
    assert tail.poll() == 0.5, "scrapes 1 and 2 complete: 20 of 40"
    _append(path, _scrape(4.0, 30, 120, 50))
    assert tail.poll() == 30 / 40, "scrapes 2 and 3: the latest pair only"
    path.write_text(",".join(SERVER_METRICS_COLUMNS) + "\n")  # a new run rewrote the file
    assert tail.poll() is None


def test_a_backlog_beyond_the_read_limit_is_skipped_to_the_latest_scrapes(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "MAX_READ_BYTES", 2000)
    path = tmp_path / "r0_server_metrics.csv"
    _append(path, [list(SERVER_METRICS_COLUMNS)] + [row for t in range(50)
                                          for row in _scrape(t, t, 2 * t * t + 100 * t, t * t)])
    assert path.stat().st_size > 5 * 2000
    tail = progress.MetricsTail(path)
    # scrape 49 is not known complete: 47 -> 48
    assert tail.poll() == (48 * 48 - 47 * 47) / (2 * (48 * 48 - 47 * 47) + 100)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_comes_every_interval_whatever_the_poll_rate():
    out, clock = io.StringIO(), _Clock()
    display = progress.Display(out, clock=clock, interval_s=4.0, tty=False)
    display.start(40.0)
    for tick in range(27):  # polled every 0.5 s for 13 s
        clock.now = tick * 0.5
        display.update(clock.now, f"at {clock.now:g}")
    display.say("done")
    assert out.getvalue().splitlines() == ["at 0", "at 4", "at 8", "at 12", "done"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_carries_the_line_and_said_lines_stay():
    out = _Tty()
    assert not progress.is_terminal(out), "a terminal without a width draws no bar"
    display = progress.Display(out, tty=True)
    display.start(20.0)
    display.update(5.0, "[1/2] baseline r0 1 user | 7 req")
    display.say("a warning")
    display.update(10.0, "[1/2] baseline r0 1 user | 9 req")
    display.finish()
    text = out.getvalue()
    assert "[1/2] baseline r0 1 user | 9 req" in text and "\r" in text and "|" in text
    assert "a warning\n" in text
