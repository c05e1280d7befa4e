"""PREFIX_summary.json: from client totals, the real vLLM n-gram capture's counters, and process health."""

from __future__ import annotations

import dataclasses
import json

import pytest
from locust_spec.analysis.model import ClientLag
from locust_spec.analysis.runs import read_summary

from locust_spec.metrics.crosscheck import ClientTotals
from locust_spec.recording.summary import (
    build_summary,
    combine_clients,
    concurrency,
    generator_warnings,
    write,
)
from locust_spec.wiring.lag import LagMonitor
from tests.support import ngram_capture_window


@pytest.fixture(scope="module")
def window():
    """The capture's load: 24 requests finished, 4608 generation tokens, server mean TPOT ~1 ms."""
    return ngram_capture_window()


def matching_totals(window) -> ClientTotals:
    return ClientTotals(requests=24, ok=24, output_tokens=int(window.generation_tokens),
                        tpot_sum_ms=24 * window.mean_tpot_ms, tpot_count=24)


def process(requests: int, lag_ms: float = 1.0, late: int = 0) -> dict:
    """A `client_summary()` as one load-generating process reports it."""
    return {"requests": requests, "failures": 0, "max_loop_lag_ms": lag_ms, "loop_lag_samples": 100,
            "loop_lag_late_samples": late, "loop_lag_warnings": int(late > 0)}


def test_a_run_where_client_and_server_agree_has_no_warnings(window):
    summary = build_summary(matching_totals(window), window, [(4, window)], {"local": process(24)})
    assert summary["schema"] == 2
    assert summary["warnings"] == []
    assert set(summary["crosscheck"]) == {"output tokens", "finished requests", "mean TPOT"}
    assert all(c["warning"] is None for c in summary["crosscheck"].values())
    assert summary["client"]["ok"] == 24 and summary["client"]["generators"]["processes"] == 1
    assert summary["server"]["acceptance_rate"] == pytest.approx(window.acceptance_rate)
    assert list(summary["server"]["per_position"]) == list(window.per_position)


def test_each_disagreement_with_the_server_is_one_warning_line(window):
    totals = dataclasses.replace(matching_totals(window), output_tokens=int(window.generation_tokens * 0.9))
    summary = build_summary(totals, window, [], {"local": process(24)})
    assert len(summary["warnings"]) == 1
    assert summary["warnings"][0].startswith("cross-check output tokens:")
    assert "\n" not in summary["warnings"][0]
    assert summary["crosscheck"]["output tokens"]["warning"] == summary["warnings"][0]


def test_other_warnings_come_first_each_on_one_line(window):
    scrape = "metrics scrape of http://h/metrics failed 2 time(s), first: HTTP 500"
    summary = build_summary(matching_totals(window), window, [], {}, [scrape + "\n  oops"])
    assert summary["warnings"] == [scrape + " oops"]


def test_without_server_counters_there_is_no_cross_check_but_client_totals_remain():
    summary = build_summary(ClientTotals(requests=3, ok=3, output_tokens=30), None, [], {"local": process(3)})
    assert summary["crosscheck"] == {} and summary["server"] is None
    assert summary["client"]["output_tokens"] == 30 and summary["warnings"] == []


def test_server_running_fewer_requests_than_users_is_under_delivered_concurrency(window):
    def level(running: float | None, waiting: float | None, scrapes: int = 5):
        return dataclasses.replace(window, max_requests_running=running, max_requests_waiting=waiting,
                                   scrapes=scrapes)

    entries, warnings = concurrency([(8, level(8.0, 0.0)), (64, level(40.0, 0.0)), (64, level(48.0, 16.0)),
                                     (1, level(None, None)), (32, level(4.0, 0.0, scrapes=2))])
    assert [e["delivered"] for e in entries] == [1.0, 0.625, 1.0, None, 0.125]
    assert len(warnings) == 1
    assert warnings[0].startswith("concurrency at 64 users: the server had at most 40 requests running")
    assert "under-delivered" in warnings[0]


def test_processes_add_their_counts_and_the_worst_lag_stands_for_all():
    combined = combine_clients({"w2": process(70, lag_ms=2.5), "w1": process(30, lag_ms=12.0, late=3)})
    assert combined["processes"] == 2
    assert (combined["requests"], combined["loop_lag_late_samples"]) == (100, 3)
    assert combined["max_loop_lag_ms"] == 12.0
    assert list(combined["by_process"]) == ["w1", "w2"]
    assert combine_clients({})["max_loop_lag_ms"] == 0.0


def test_lag_and_requests_without_rows_are_warned():
    combined = combine_clients({"w1": process(50, lag_ms=12.0, late=3), "w2": process(50)})
    warnings = generator_warnings(combined, rows=90)
    assert warnings[0].startswith("load generator event loop lagged up to 12.0 ms (3 late samples)")
    assert warnings[1].startswith("10 of 100 requests measured by the load generators have no row")
    assert generator_warnings(combine_clients({"local": process(90)}), rows=90) == []


def test_the_written_summary_reads_back_as_json(tmp_path, window):
    summary = build_summary(matching_totals(window), window, [(4, window)], {"local": process(24)})
    path = tmp_path / "run_summary.json"
    write(path, summary)
    assert json.loads(path.read_text()) == json.loads(json.dumps(summary))
    assert [p.name for p in tmp_path.iterdir()] == ["run_summary.json"]


def monitor_summary(requests: int, levels: dict[int, list[float]]) -> dict:
    """A process's `client_summary()` with a real lag monitor fed these wake-up lags per level."""
    monitor = LagMonitor(interval_s=0.05, warn_ms=5.0)
    for users, lags in levels.items():
        for lag in lags:
            monitor.observe(lag, 0.0, users)
    return {"requests": requests, "failures": 0, **monitor.summary()}


def test_lag_per_level_adds_samples_and_keeps_the_worst_process():
    steady = monitor_summary(50, {1: [0.5] * 100, 64: [0.5] * 100})
    behind = monitor_summary(50, {1: [0.5] * 100, 64: [0.5] * 50 + [40.0] * 50})
    by_level = combine_clients({"w1": steady, "w2": behind})["by_level"]
    assert list(by_level) == ["1", "64"]
    assert by_level["1"] == {"samples": 200, "late_samples": 0, "late_share": 0.0, "max_lag_ms": 0.5}
    assert (by_level["64"]["samples"], by_level["64"]["late_samples"]) == (200, 50)
    assert by_level["64"]["max_lag_ms"] == 40.0
    assert by_level["64"]["late_share"] == behind["by_level"]["64"]["late_share"] > 0.2


def test_levels_only_some_processes_saw_and_processes_without_levels_still_merge():
    early = monitor_summary(10, {1: [0.5] * 10})
    later = monitor_summary(10, {8: [6.0] * 10, 64: [0.5] * 10})
    by_level = combine_clients({"a": early, "b": later, "old": process(5)})["by_level"]
    assert list(by_level) == ["1", "8", "64"]  # numeric order, not text order
    assert by_level["8"]["late_samples"] == 10 and by_level["1"]["samples"] == 10
    assert combine_clients({})["by_level"] == {}


def test_the_written_lag_per_level_is_what_spec_verdict_reads(tmp_path, window):
    clients = {"w1": monitor_summary(12, {1: [0.5] * 20, 64: [30.0] * 20}),
               "w2": monitor_summary(12, {64: [0.5] * 20})}
    path = tmp_path / "run_summary.json"
    write(path, build_summary(matching_totals(window), window, [(1, window)], clients))
    lag = read_summary(path).client_lag
    assert set(lag) == {1, 64}
    assert lag[64] == ClientLag(samples=40, late_samples=20, late_share=round(0.6 / (20 * 0.08), 5),
                                max_lag_ms=30.0)
