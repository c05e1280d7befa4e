"""Reading runs and measuring each level: warm-up and interrupted requests excluded, exact percentiles."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from locust_spec.analysis import levels
from locust_spec.analysis.runs import LostWorkerRecord, discover, leave_out_lost, read_run

from locust_spec.metrics.exposition import Sample, Snapshot
from locust_spec.recording.histograms import LatencyHistograms
from locust_spec.recording.records import COLUMNS

T0 = 1_800_000_000.0


def row(start, users, *, tokens=100, chunks=50, ttft=40.0, tpot=10.0, e2e=1000.0, error="", warmup=0,
        cls="json", drafted=""):
    return {"start_unix_s": T0 + start, "level_users": users, "prompt_class": cls, "prompt_id": "p",
            "prompt_tokens": 10, "output_tokens": tokens, "tokens_estimated": 0, "chunks": chunks,
            "max_tokens_per_chunk": 3, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "itl_p50_ms": tpot,
            "itl_p99_ms": tpot * 2, "chunk_gap_p50_ms": tpot * 2, "finish_reason": "length",
            "spec_accepted_tokens": "", "spec_draft_tokens": drafted, "error": error, "warmup": warmup}


def write(prefix: Path, rows, hist_values=None) -> Path:
    with open(f"{prefix}_requests.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    if hist_values is not None:
        hists = LatencyHistograms()
        for users, values in hist_values.items():
            hists.record("itl", "json", users, values, warmup=False)
        Path(f"{prefix}_latency.json").write_bytes(orjson.dumps(hists.to_dict()))
    return prefix


ROWS = [
    row(0.0, 2, warmup=1, ttft=999),  # warm-up: excluded
    row(1.0, 2, ttft=40, e2e=2000),
    row(1.5, 2, ttft=60, e2e=1500),
    row(2.0, 2, ttft=50, e2e=500, error="http_500: boom", tokens=0, chunks=0),
    row(2.5, 2, error="interrupted: stop", e2e=9000),  # cut at stop: neither ok nor failed
    row(5.0, 4, ttft=80, e2e=1000, drafted=40),
]


def test_level_metrics_exclude_warmup_and_interrupted(tmp_path):
    run = read_run(write(tmp_path / "r", ROWS, {2: [10.0] * 90 + [30.0] * 10, 4: [5.0] * 10}))
    by = levels.run_levels(run)
    assert sorted(by) == [2, 4]
    two = by[2]
    assert (two.metrics.requests, two.metrics.failures) == (3, 1)
    assert two.metrics.ttft_p50_ms == 50.0  # median of the two ok requests (40, 60)
    assert two.start_unix_s == T0 + 1.0 and two.end_unix_s == pytest.approx(T0 + 3.0)
    # the tokens that arrived in the 2 s window, each request's spread from its first token to its end: both
    # ok ones whole, and 0.46 s of the interrupted one's 8.96 s (the warm-up one ended as the window opened)
    assert two.metrics.output_tok_s == pytest.approx((200 + 100 * 0.46 / 8.96) / 2.0)
    assert two.metrics.tokens_per_chunk == 2.0
    assert two.metrics.itl_source == "hdr"
    assert two.metrics.itl_p50_ms == pytest.approx(10.0, rel=1e-3)
    assert two.metrics.itl_p95_ms == pytest.approx(30.0, rel=1e-3)
    assert not two.rows_show_speculation and by[4].rows_show_speculation


def test_itl_falls_back_to_request_rows_without_latency_json(tmp_path):
    by = levels.run_levels(read_run(write(tmp_path / "r", ROWS)))
    assert by[2].metrics.itl_source == "rows"
    assert by[2].metrics.itl_p50_ms == 10.0 and by[2].metrics.itl_p95_ms is None


def _snap(t, drafts, draft_tokens, accepted, started=1.0):
    labels = (("engine", "0"), ("model_name", "m"))
    return Snapshot(T0 + t, "http://s/metrics", (
        Sample("process_start_time_seconds", (), started),
        Sample("vllm:spec_decode_num_drafts_total", labels, drafts),
        Sample("vllm:spec_decode_num_draft_tokens_total", labels, draft_tokens),
        Sample("vllm:spec_decode_num_accepted_tokens_total", labels, accepted),
        Sample("vllm:generation_tokens_total", labels, accepted + drafts),
    ))


def test_acceptance_comes_from_the_counters_inside_the_level_window(tmp_path):
    run = read_run(write(tmp_path / "r", ROWS))
    scrapes = [_snap(0.5, 0, 0, 0), _snap(1.0, 10, 40, 10), _snap(3.0, 30, 120, 70),
               _snap(6.0, 99, 999, 0, started=2.0)]
    run = replace(run, snapshots=scrapes)
    stats = levels.spec_stats(run, levels.run_levels(run)[2])
    assert stats.acceptance == pytest.approx(60 / 80)
    assert stats.draft_tokens == 80
    # level 4's one request runs 5.0-6.0 s: bracketed by the scrapes at 3.0 s and 6.0 s, where the server's
    # process had started again: the increase counts from zero again
    four = levels.spec_stats(run, levels.run_levels(run)[4])
    assert four.draft_tokens == 999 and any("reset" in n for n in four.notes)


def _level(start, end, next_level=None):
    metrics = levels.ArmMetrics(1, 0, None, None, None, None, None, None, None)
    return levels.RunLevel(1, metrics, T0 + start, T0 + end, False, None,
                           None if next_level is None else T0 + next_level)


def test_a_level_is_bracketed_by_the_scrapes_at_its_boundaries():
    scrapes = [_snap(t, 0, 0, 0) for t in (0.0, 1.0, 5.0, 6.5, 9.0)]
    times = lambda lv: [round(s.timestamp_unix_s - T0, 1) for s in levels.bracket(scrapes, lv)]  # noqa: E731
    # measured 1.2-6.0 s: from the last scrape at or before its first request to the first after its end
    assert times(_level(1.2, 6.0)) == [1.0, 5.0, 6.5]
    # the next level started at 6.2 s, before that scrape: the level change's scrape (5.0 s) closes it
    assert times(_level(1.2, 6.0, next_level=6.2)) == [1.0, 5.0]
    # a scrape exactly at the boundary belongs to the bracket
    assert times(_level(1.0, 5.0)) == [1.0, 5.0]


def test_counters_that_move_only_in_the_first_seconds_are_measured(tmp_path):
    """A 6 s level at 1 user, scraped every 5 s: the draft counters moved before the first interval scrape.
    The scrape at the level change (before its first measured request) opens its window."""
    rows = [row(0.2, 1, warmup=1)] + [row(1.0 + i, 1, drafted=40) for i in range(6)]
    run = read_run(write(tmp_path / "r", rows))
    scrapes = [_snap(0.1, 0, 0, 0), _snap(0.9, 5, 20, 15), _snap(5.1, 60, 240, 180),
               _snap(5.9, 60, 240, 180), _snap(7.2, 60, 240, 180)]
    run = replace(run, snapshots=scrapes)
    spec = levels.spec_stats(run, levels.run_levels(run)[1])
    assert spec is not None and spec.draft_tokens == 220 and spec.acceptance == pytest.approx(165 / 220)


def test_acceptance_units_are_the_scrape_intervals_and_add_up_to_the_window(tmp_path):
    scrapes = [_snap(0.0, 0, 0, 0), _snap(1.0, 10, 40, 30), _snap(2.0, 20, 80, 30), _snap(3.0, 30, 120, 70)]
    accepted, drafted = levels.interval_units(scrapes)
    assert list(accepted) == [30, 0, 40] and list(drafted) == [40, 40, 40]
    run = replace(read_run(write(tmp_path / "r", [row(0.5, 1), row(1.0, 1, e2e=1500)])), snapshots=scrapes)
    level = levels.run_levels(run)[1]
    level = replace(level, samples=replace(level.samples, drafted=level.samples.drafted * np.nan))
    ci = levels.acceptance_ci([run], [level], 70 / 120)
    assert ci.unit == "scrape intervals" and ci.units == 3
    assert ci.lo < 70 / 120 < ci.hi


def test_batch_is_time_weighted_over_the_bracket():
    def snap(t, running, waiting):
        return Snapshot(T0 + t, "http://s/metrics", (
            Sample("vllm:num_requests_running", (("engine", "0"),), running),
            Sample("vllm:num_requests_waiting", (("engine", "0"),), waiting)))

    # 8 running for 9 s, 30 running (12 waiting) for 1 s: the p50 is the level's batch, the max its peak
    batch = levels.server_batch([snap(0, 8, 0), snap(9, 30, 12), snap(10, 30, 12)])
    assert (batch.running_p50, batch.running_max, batch.waiting_p50, batch.waiting_max) == (8, 30, 0, 12)
    assert levels.server_batch([_snap(0, 1, 1, 1), _snap(1, 2, 2, 2)]) is None  # no gauges exposed
    assert batch.running_mean == pytest.approx((8 * 9 + 30 * 1) / 10)  # no running-time counter: the gauge
    assert batch.size == batch.running_mean


def test_batch_mean_comes_from_the_running_time_counter_where_a_gauge_scrape_aliases():
    def snap(t, running, busy_s):
        return Snapshot(T0 + t, "http://s/metrics", (
            Sample("vllm:num_requests_running", (("engine", "0"),), running),
            Sample("vllm:num_requests_waiting", (("engine", "0"),), 0),
            Sample("vllm:request_inference_time_seconds_sum", (("engine", "0"),), busy_s)))

    # 64 synchronized requests run 10 s; two of four scrapes land in the instant they all finish together
    batch = levels.server_batch([snap(0, 64, 0.0), snap(4, 2, 256.0), snap(8, 2, 512.0), snap(10, 64, 640.0)])
    assert batch.running_p50 == 2 and batch.running_max == 64
    assert batch.running_mean == pytest.approx(64.0) and batch.size == pytest.approx(64.0)


def test_repeats_combine_to_medians_with_spread_and_summed_counts():
    def lv(itl, requests):
        m = levels.ArmMetrics(requests, 1, 50.0, itl, itl * 2, itl, itl, 100.0 / itl, 1.0, output_tokens=1000)
        return levels.RunLevel(1, m, 0.0, 1.0, False)

    combined = levels.combine([lv(10.0, 20), lv(12.0, 30), lv(20.0, 25)])
    assert combined.itl_p50_ms == 12.0 and combined.spread["itl_p50_ms"] == (10.0, 20.0)
    assert (combined.requests, combined.failures, combined.output_tokens, combined.runs) == (75, 3, 3000, 3)


def test_discover_accepts_prefix_file_or_folder(tmp_path):
    a = write(tmp_path / "a", ROWS)
    write(tmp_path / "b", ROWS)
    assert discover(a) == [a]
    assert discover(Path(f"{a}_latency.json")) == [a]
    assert discover(tmp_path) == [tmp_path / "a", tmp_path / "b"]


def test_rows_measured_short_of_users_after_a_worker_was_lost_are_left_out(tmp_path):
    # levels 1 (0-10 s), 2 (10-20 s), 4 (20-30 s); the worker last heard at 8 s, found lost at 12 s: level 1
    # from 8 s on and level 2 (handed users for the dead worker at its start) ran short; level 4 did not
    frame = pd.DataFrame({"level_users": [1.0] * 10 + [2.0] * 10 + [4.0] * 10,
                          "start_unix_s": [T0 + t for t in range(30)]})
    lost = [LostWorkerRecord("w1", T0 + 8, T0 + 12)]
    kept, notes = leave_out_lost(tmp_path / "run_requests.csv", frame, lost)
    assert [t - T0 for t in kept["start_unix_s"]] == [*range(8), *range(20, 30)]
    [note] = notes
    assert "worker w1 was lost at" in note and "12 rows at 1, 2 users from then on are left out" in note
