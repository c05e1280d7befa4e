"""The lag monitor warns on sustained lag (a share of the measured time), not on one spike."""

from __future__ import annotations

import logging

import gevent

from locust_spec.wiring.lag import MAX_LEVELS, LagMonitor


def feed(monitor: LagMonitor, lags_ms: list[float], users: int = 0) -> None:
    now = 0.0
    for lag in lags_ms:
        now += monitor.interval_s + lag / 1000.0
        monitor.observe(lag, now, users)


def test_one_long_spike_in_a_steady_run_is_recorded_but_not_warned(caplog):
    monitor = LagMonitor(interval_s=0.05, window_s=10.0)
    with caplog.at_level(logging.WARNING):
        feed(monitor, [0.2] * 1000 + [80.0] + [0.2] * 1000)
        monitor.stop()
    assert monitor.max_lag_ms == 80.0
    assert (monitor.late_samples, monitor.warnings) == (1, 0)
    assert not caplog.records


def test_lag_for_more_than_one_percent_of_a_window_warns_with_the_advice(caplog):
    monitor = LagMonitor(interval_s=0.05, window_s=10.0)
    with caplog.at_level(logging.WARNING):
        feed(monitor, ([0.5] * 9 + [12.0]) * 40)
    assert monitor.warnings == 1
    assert "--processes" in caplog.records[0].getMessage()
    assert monitor.summary()["loop_late_share"] > 0.01


def test_a_run_shorter_than_a_window_is_judged_at_stop():
    monitor = LagMonitor(interval_s=0.05, window_s=10.0)
    feed(monitor, [20.0, 0.1, 0.1, 0.1] * 10)
    assert monitor.warnings == 0
    monitor.start()
    monitor.stop()
    assert monitor.warnings == 1


def test_summary_keeps_the_fields_the_run_summary_reads():
    summary = LagMonitor().summary()
    assert set(summary) >= {"max_loop_lag_ms", "loop_lag_samples", "loop_lag_late_samples",
                            "loop_lag_warnings", "loop_late_share"}


def test_lag_is_accounted_per_ladder_level():
    monitor = LagMonitor(interval_s=0.05, warn_ms=5.0)
    feed(monitor, [0.5] * 100, users=1)
    feed(monitor, [0.5] * 80 + [30.0] * 20, users=64)
    by_level = monitor.summary()["by_level"]
    assert set(by_level) == {"1", "64"}
    assert by_level["1"] == {"samples": 100, "late_samples": 0, "late_share": 0.0, "max_lag_ms": 0.5}
    assert (by_level["64"]["samples"], by_level["64"]["late_samples"], by_level["64"]["max_lag_ms"]) == (
        100, 20, 30.0)
    # 20 wake-ups 30 ms late of 80 x 50.5 ms + 20 x 80 ms measured
    assert by_level["64"]["late_share"] == round(0.6 / (80 * 0.0505 + 20 * 0.08), 5)
    assert monitor.samples == 200 and monitor.max_lag_ms == 30.0  # the run's totals hold every level


def test_a_wake_up_exactly_at_the_warn_threshold_is_late_at_its_level():
    monitor = LagMonitor(interval_s=0.05, warn_ms=5.0)
    feed(monitor, [4.999, 5.0], users=8)
    assert monitor.summary()["by_level"]["8"]["late_samples"] == 1


def test_the_monitor_asks_the_level_callable_at_each_wake_up():
    levels = iter([1, 1, 64])
    monitor = LagMonitor(interval_s=0.001, level=lambda: next(levels, 64))
    monitor.start()
    while monitor.samples < 5:
        gevent.sleep(0.001)
    monitor.stop()
    by_level = monitor.summary()["by_level"]
    assert by_level["1"]["samples"] == 2
    assert by_level["64"]["samples"] == monitor.samples - 2


def test_levels_past_the_bound_count_only_in_the_totals():
    monitor = LagMonitor(interval_s=0.05)
    for users in range(MAX_LEVELS + 10):
        feed(monitor, [1.0], users=users)
    assert len(monitor.summary()["by_level"]) == MAX_LEVELS
    assert monitor.samples == MAX_LEVELS + 10
