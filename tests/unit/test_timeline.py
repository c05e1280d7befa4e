"""The live page's series: bounded whatever the run's length, exact per interval, level marks, lag deltas."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_spec.metrics.counters import Sample, Snapshot, parse_exposition
from locust_spec.recording.timeline import (
    CLIENT_FIELDS,
    MIN_SPAN_S,
    SERVER_FIELDS,
    Series,
    Timeline,
    WorstShare,
    cpu_counts,
    lag_counts,
)
from tests.support import REFERENCE

CPU = REFERENCE / "vllm-0.32-cpu"
URL = "http://a/metrics"


def snap(t: float, name: str, url: str = URL) -> Snapshot:
    return Snapshot(t, url, tuple(parse_exposition((CPU / name).read_text())))


def column(tl: Timeline, series: str, key: str) -> list:
    data = tl.to_json()[series]
    i = data["fields"].index(key)
    return [p[i] for p in data["points"]]


@given(st.integers(1, 20), st.integers(2, 20), st.integers(0, 2000))
@settings(max_examples=200, deadline=None)
def test_a_series_never_holds_more_than_its_capacity_and_keeps_order_and_the_newest(recent, older, n):
    s = Series(recent, older)
    for i in range(n):
        s.append((i,))
        assert len(s) <= recent + older
    points = [p[0] for p in s.points()]
    assert points == sorted(points) and len(set(points)) == len(points)
    assert points[-min(n, recent):] == list(range(max(0, n - recent), n))
    if n:
        assert points[0] == 0  # the run's beginning stays in the picture


def test_a_long_series_keeps_its_older_part_spread_over_the_run():
    s = Series(recent=10, older=20)
    for i in range(100_000):
        s.append((i,))
    older = [p[0] for p in s.points()[:-10]]
    gaps = np.diff(older)
    assert len(older) > 10 and gaps.max() <= 2 * gaps.min()


def test_client_points_are_the_last_window_of_requests_with_exact_percentiles():
    tl = Timeline(tick_s=2.0, window_s=4.0)
    tl.start(1000.0)
    for tpot in (10.0, 20.0, 30.0):
        tl.request(ttft_ms=100.0, tpot_ms=tpot, output_tokens=50, ok=True)
    tl.request(ttft_ms=None, tpot_ms=None, output_tokens=None, ok=False)
    tl.tick(1002.0, users=4, lag_summaries={})
    tl.request(ttft_ms=300.0, tpot_ms=40.0, output_tokens=50, ok=True)
    tl.tick(1004.0, users=4, lag_summaries={})
    tl.tick(1006.0, users=4, lag_summaries={})  # the first tick has left the 4 s window
    tl.tick(1008.0, users=4, lag_summaries={})  # and now the second
    assert column(tl, "client", "requests") == [4, 5, 1, 0]
    assert column(tl, "client", "errors") == [1, 1, 0, 0]
    assert column(tl, "client", "tok_s") == [75.0, 50.0, 12.5, 0.0]
    def within_1pct(*values: float) -> list:  # two significant figures: a value reads back within 1 %
        return [pytest.approx(v, rel=0.01) for v in values] + [None]

    assert column(tl, "client", "tpot_p50") == within_1pct(20.0, 20.0, 40.0)
    assert column(tl, "client", "tpot_p99") == within_1pct(30.0, 40.0, 40.0)
    assert column(tl, "client", "ttft_p50") == within_1pct(100.0, 100.0, 300.0)
    assert column(tl, "client", "users") == [4, 4, 4, 4]


def test_itl_points_are_the_median_of_the_requests_own_p50_and_the_p99_of_their_p99():
    tl = Timeline(tick_s=2.0, window_s=2.0)
    tl.start(0.0)
    for p50, p99 in ((4.0, 9.0), (5.0, 30.0), (6.0, 11.0)):
        tl.request(ttft_ms=50.0, tpot_ms=p50, output_tokens=20, ok=True, itl_ms=(p50, p99))
    tl.request(ttft_ms=50.0, tpot_ms=None, output_tokens=1, ok=True)  # one token: no gap, no ITL
    tl.tick(2.0, users=2, lag_summaries={})
    assert column(tl, "client", "itl_p50") == [pytest.approx(5.0, rel=0.01)]
    assert column(tl, "client", "itl_p99") == [pytest.approx(30.0, rel=0.01)]


def test_window_percentiles_match_numpy_within_the_histograms_precision():
    rng = random.Random(7)
    values = [rng.lognormvariate(3, 0.6) for _ in range(3000)]
    tl = Timeline(tick_s=2.0, window_s=2.0)
    tl.start(0.0)
    for v in values:
        tl.request(ttft_ms=v, tpot_ms=v, output_tokens=1, ok=True)
    tl.tick(2.0, users=1, lag_summaries={})
    p50, p99 = column(tl, "client", "tpot_p50")[0], column(tl, "client", "tpot_p99")[0]
    assert p50 == pytest.approx(np.percentile(values, 50), rel=0.02)
    assert p99 == pytest.approx(np.percentile(values, 99), rel=0.02)


def test_server_points_are_the_counters_increase_between_scrapes():
    tl = Timeline()
    tl.start(0.0)
    tl.scrape([snap(100.0, "metrics_ngram_before.txt")])
    tl.scrape([snap(200.0, "metrics_ngram_after.txt")])
    acceptance = column(tl, "server", "acceptance")
    assert acceptance[0] is None  # nothing to compare the first scrape with
    assert acceptance[1] == pytest.approx(2619 / 4128)
    assert column(tl, "server", "mean_len")[1] == pytest.approx(1 + 2619 / 1244)
    assert column(tl, "server", "per_position")[1] == pytest.approx([988 / 1244, 708 / 1244, 528 / 1244,
                                                                     395 / 1244])
    assert column(tl, "server", "gen_tok_s")[1] == pytest.approx(4608 / 100.0)
    assert column(tl, "server", "t") == [100.0, 200.0]


def test_the_live_page_gets_the_gpus_power_from_a_dcgm_exporter_beside_the_server():
    energy, gauge = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
    dcgm = "http://gpu:9400/metrics"
    tl = Timeline()
    tl.start(0.0)
    for t, mj in ((100.0, 5e6), (102.0, 5e6 + 700_000)):  # 700 J in 2 s on GPU 0
        gpus = (Sample(energy, (("gpu", "0"),), mj), Sample(gauge, (("gpu", "1"),), 90.0))
        tl.scrape([snap(t, "metrics_ngram_before.txt"), Snapshot(t, dcgm, gpus)])
    # GPU 0 from its energy counter, GPU 1 from its gauge: 350 + 90 W
    assert column(tl, "server", "power_w") == [None, pytest.approx(440.0)]
    assert column(tl, "server", "running")[1] == 0.0  # the exporter adds no server gauge


def test_a_scrape_right_after_another_keeps_the_older_baseline():
    gauge = "vllm:num_requests_running"
    tl = Timeline()
    tl.start(0.0)
    tl.scrape([snap(100.0, "metrics_ngram_before.txt")])
    soon = snap(200.0, "metrics_ngram_after.txt")
    tl.scrape([Snapshot(100.0 + MIN_SPAN_S / 2, URL, (Sample(gauge, (), 3.0),))])  # a level's quick scrape
    tl.scrape([soon])
    assert column(tl, "server", "running") == [0.0, 3.0, 0.0]
    assert column(tl, "server", "acceptance")[1] is None
    assert column(tl, "server", "acceptance")[2] == pytest.approx(2619 / 4128)  # measured from t=100


def test_running_and_waiting_are_summed_over_replicas():
    def gauges(url: str, running: float, waiting: float) -> Snapshot:
        return Snapshot(5.0, url, (Sample("vllm:num_requests_running", (("engine", "0"),), running),
                                   Sample("vllm:num_requests_waiting", (("engine", "0"),), waiting)))

    tl = Timeline()
    tl.start(0.0)
    tl.scrape([gauges("http://a/metrics", 3, 1), gauges("http://b/metrics", 4, 0)])
    assert (column(tl, "server", "running"), column(tl, "server", "waiting")) == ([7.0], [1.0])


def test_levels_are_marked_when_they_change_and_nothing_is_recorded_before_start_or_after_stop():
    tl = Timeline()
    tl.request(1.0, 1.0, 1, True)
    tl.tick(1.0, users=1, lag_summaries={})
    tl.level(1.0, 1)
    assert tl.to_json()["levels"] == [] and column(tl, "client", "t") == []
    tl.start(10.0)
    for t, users in ((9.0, 0), (10.0, 1), (11.0, 1), (20.0, 8), (21.0, 8), (30.0, 1)):
        tl.level(t, users)
    assert tl.to_json()["levels"] == [[10.0, 1], [20.0, 8], [30.0, 1]]
    tl.request(5.0, 1.0, 10, True)
    tl.stop(32.0, users=1, lag_summaries={})
    tl.request(5.0, 1.0, 10, True)
    tl.tick(34.0, users=1, lag_summaries={})
    assert column(tl, "client", "t") == [32.0] and column(tl, "client", "requests") == [1]
    data = tl.to_json()
    assert (data["started"], data["stopped"]) == (10.0, 32.0)
    assert tuple(data["client"]["fields"]) == CLIENT_FIELDS
    assert tuple(data["server"]["fields"]) == SERVER_FIELDS
    tl.start(40.0)  # a new test starts from nothing
    assert column(tl, "client", "t") == [] and tl.to_json()["levels"] == []


def test_lag_is_the_worst_generators_share_of_late_wake_ups_since_the_last_tick():
    lag = WorstShare(lag_counts)
    lag.reset({"w1": {"loop_lag_samples": 100, "loop_lag_late_samples": 50}})
    assert lag.share({"w1": {"loop_lag_samples": 200, "loop_lag_late_samples": 60},
                      "w2": {"loop_lag_samples": 40, "loop_lag_late_samples": 2}}) == pytest.approx(0.1)
    assert lag.share({"w1": {"loop_lag_samples": 200, "loop_lag_late_samples": 60},
                      "w2": {"loop_lag_samples": 80, "loop_lag_late_samples": 22}}) == pytest.approx(0.5)
    assert lag.share({"w1": {"loop_lag_samples": 200, "loop_lag_late_samples": 60}}) is None  # no new samples
    # a restarted generator counts from zero
    assert lag.share({"w1": {"loop_lag_samples": 10, "loop_lag_late_samples": 1}}) == pytest.approx(0.1)


def test_the_cpu_series_is_the_busiest_generators_share_of_a_core_since_the_last_tick():
    def spent(*levels):
        return {"budget_by_level": {str(i): {"wall_s": w, "cpu_share": c} for i, (w, c) in enumerate(levels)}}

    cpu = WorstShare(cpu_counts)
    cpu.reset({"w1": spent((10.0, 0.2)), "w2": spent((10.0, 0.3))})
    # w1: 2 s more at 0.2 and a new level's 2 s at 0.6: 1.6 s of CPU in 4 s (0.4); w2: 0.9 s in 2 s (0.45)
    got = cpu.share({"w1": spent((12.0, 0.2), (2.0, 0.6)), "w2": spent((12.0, 3.9 / 12))})
    assert got == pytest.approx(0.45)


def test_memory_stays_bounded_over_a_long_run():
    tl = Timeline(tick_s=2.0, window_s=10.0, recent=50, older=40)
    tl.start(0.0)
    for i in range(1, 6000):  # over three hours at one tick per 2 s, 600 level changes
        t = i * 2.0
        tl.request(100.0, 10.0 + i % 7, 64, True)
        tl.level(t, 1 + (i // 10) % 4)
        spent = {"budget_by_level": {"4": {"wall_s": t, "cpu_share": 0.3}}}
        tl.tick(t, users=4, lag_summaries={"local": {"loop_lag_samples": i * 40, "loop_lag_late_samples": i,
                                                     **spent}})
    data = tl.to_json()
    assert len(data["client"]["points"]) <= 90 and len(data["levels"]) <= 256
    assert data["client"]["points"][-1][0] == 5999 * 2.0
    assert column(tl, "client", "lag_pct")[-1] == pytest.approx(2.5)
    assert column(tl, "client", "cpu_pct")[-1] == pytest.approx(30.0)
