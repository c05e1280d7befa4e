"""The Speculation tabs' tables: exact percentiles per class, token rate, live totals from Locust's stats."""

from __future__ import annotations

import pytest
from locust.stats import RequestStats

from locust_spec.metrics.crosscheck import cross_check
from locust_spec.recording.histograms import LatencyHistograms, new_histogram, percentiles_us, record_ms
from locust_spec.recording.processor import StreamError
from locust_spec.web.webui import (
    lag_row,
    latency_rows,
    live_totals,
    run_token_rate,
    speculation_rows,
    token_rate,
)
from tests.support import ngram_capture_window


@pytest.fixture(scope="module")
def window():
    return ngram_capture_window()


def test_latency_rows_hold_exact_p50_p99_per_class_and_over_all_classes():
    hists = LatencyHistograms()
    code_ttft = [10.0 + i * 0.731 for i in range(200)]
    chat_ttft = [50.0 + i * 1.913 for i in range(50)]
    hists.record("ttft", "code", 4, code_ttft, False)
    hists.record("ttft", "chat", 4, chat_ttft, False)
    hists.record("itl", "code", 4, [1.5, 2.5, 3.5], False)
    rows = latency_rows(hists)
    assert [r["cls"] for r in rows] == ["chat", "code", "all"]

    def expected(values: list[float]) -> tuple[str, str]:
        h = new_histogram()
        record_ms(h, values)
        return tuple(f"{v / 1000.0:.3f}" for v in percentiles_us(h, (50.0, 99.0)))

    by_class = {r["cls"]: r for r in rows}
    assert (by_class["code"]["ttft50"], by_class["code"]["ttft99"]) == expected(code_ttft)
    assert (by_class["all"]["ttft50"], by_class["all"]["ttft99"]) == expected(code_ttft + chat_ttft)
    assert (by_class["all"]["n"], by_class["code"]["n"]) == (250, 200)
    assert by_class["chat"]["itl50"] == "" and by_class["code"]["itl50"] == expected([1.5, 2.5, 3.5])[0]
    empty = {"cls": "all", "n": 0, "ttft50": "", "ttft99": "", "itl50": "", "itl99": "", "tpot50": "",
             "tpot99": ""}
    assert latency_rows(LatencyHistograms()) == [empty]


def test_token_rate_is_the_slope_between_oldest_and_newest_sample():
    assert token_rate([(10.0, 0.0), (12.0, 500.0), (15.0, 2000.0)]) == 400.0
    assert token_rate([(10.0, 0.0)]) is None
    assert token_rate([(10.0, 5.0), (10.0, 9.0)]) is None
    assert token_rate([(10.0, 900.0), (11.0, 0.0)]) == 0.0  # stats were reset


def test_live_totals_read_locust_stats_where_e2e_carries_output_tokens_and_interrupted_apart():
    stats = RequestStats()
    for tokens, tpot in ((100, 1.25), (300, 2.75)):
        stats.log_request("E2E", "code", 400, tokens)
        stats.log_request("TPOT", "code", tpot, 0)
        stats.log_request("TTFT", "code", 30, 0)
    stats.log_request("Interrupted", "code", 10, 0)  # cut off at stop: counted, not a failure
    for error in ("http_500: boom", "reset: peer"):
        stats.log_request("E2E", "code", 10, 0)
        stats.log_error("E2E", "code", StreamError(error))
    totals = live_totals(stats.entries.values(), stats.errors.values())
    assert (totals.requests, totals.ok, totals.output_tokens) == (5, 2, 400)
    assert totals.mean_tpot_ms == pytest.approx(2.0)
    assert (totals.interrupted, totals.unknown_outcome) == (1, 1)


def test_speculation_rows_show_server_counters_and_judge_the_cross_check_only_after_the_test(window):
    totals = live_totals([], [])
    checks = cross_check(totals, window)
    running = speculation_rows(window, [(4, window)], 4, 812.5, checks, True, ["a warning"])
    values = {r["measure"]: r["value"] for r in running}
    assert [r["measure"] for r in running][:3] == ["server", "acceptance rate", "mean acceptance length"]
    assert values["acceptance rate"] == f"{window.acceptance_rate:.4f}"
    assert values["acceptance per position"] == " ".join(f"{p:.3f}" for p in window.per_position)
    assert values["acceptance at 4 users"] == f"{window.acceptance_rate:.4f}"
    assert values["output tokens/s (client)"] == "812.5"
    assert values["cross-check output tokens"].startswith("running: client 0, server ")
    assert values["warning"] == "a warning"
    stopped = {r["measure"]: r["value"] for r in speculation_rows(window, [], 4, None, checks, False, [])}
    assert stopped["cross-check output tokens"].startswith("disagree: client 0")
    assert stopped["output tokens/s (client)"] == ""


def test_without_a_scraper_the_tab_says_so():
    rows = speculation_rows(None, [], 8, None, [], True, [])
    assert rows[0] == {"measure": "server counters", "value": "not scraped (--metrics-url off, or no host)",
                       "source": ""}


def test_after_stop_the_client_rate_is_over_the_run_like_the_servers_not_the_emptying_window():
    stats = RequestStats()
    for tokens in (100, 300):
        stats.log_request("E2E", "code", 400, tokens)
    stats.log_request("E2E", "chat", 400, 200)
    stats.log_request("TTFT", "code", 30, 0)
    # from the test's start (the Aggregated entry's), not from a row's first request
    stats.total.start_time, stats.total.last_request_timestamp = 1000.0, 1012.0
    assert run_token_rate(stats.entries.values(), stats.total) == 600 / 12.0
    assert run_token_rate([], RequestStats().total) is None
    running = {r["measure"]: r for r in speculation_rows(None, [], 4, 50.0, [], True, [])}
    stopped = {r["measure"]: r for r in speculation_rows(None, [], 4, 50.0, [], True, [], over_run=True)}
    assert running["output tokens/s (client)"]["source"] == "last 15 s of Locust's stats"
    assert stopped["output tokens/s (client)"]["source"] == "over the run, as the server's (Locust's stats)"


def test_the_lag_row_says_how_late_the_worst_load_generator_was_as_the_live_charts_and_the_verdict_do():
    clients = {"w1": {"loop_lag_samples": 1000, "loop_lag_late_samples": 160, "loop_late_share": 0.065,
                      "by_level": {"6": {"samples": 400, "late_samples": 86, "late_share": 0.0812}}},
               "w2": {"loop_lag_samples": 900, "loop_lag_late_samples": 9, "loop_late_share": 0.001,
                      "by_level": {"6": {"samples": 300, "late_samples": 3, "late_share": 0.0005}}}}
    row = lag_row(clients, 6)
    assert row["measure"] == "load generator lag"
    assert row["value"] == ("21.5% of wake-ups late at 6 users (16.0% over the run); "
                            "8.1% of the time behind at 6 users (6.5% over the run)")
    assert "late by >= 5 ms" in row["source"] and "add --processes or workers" in row["source"]
    assert lag_row(clients, 1)["value"] == ("16.0% of wake-ups late over the run; "
                                            "6.5% of the time behind over the run")
    assert lag_row({}, 1)["value"] == ""
