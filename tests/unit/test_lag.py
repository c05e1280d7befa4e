"""The lag monitor warns on sustained lag (a share of the measured time), not on one spike."""

from __future__ import annotations

import logging

from locust_spec.lag import LagMonitor


def feed(monitor: LagMonitor, lags_ms: list[float]) -> None:
    now = 0.0
    for lag in lags_ms:
        now += monitor.interval_s + lag / 1000.0
        monitor.observe(lag, now)


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
