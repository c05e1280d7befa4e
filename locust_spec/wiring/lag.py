"""Event-loop lag monitor: a greenlet that measures how late its own wake-ups are while the test runs, and
warns when the client is behind for a sustained share of the time (a chunk that arrives while the loop is
behind is stamped late by as much)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gevent

from locust_spec.core.level import LevelKey, in_level_order

log = logging.getLogger(__name__)

LATE_MS = 5.0
# Warn when the loop spent more than this share of the measured time behind by LATE_MS or more. Arrivals
# are spread over time, so this share is about the share of timestamps taken late: above 1 % the run's
# p99 latencies carry the client's own delay. A single stall (a GC pause, the OS running another process
# on a shared machine) stays under it, so the warning does not fire on every run and stays worth reading.
LATE_SHARE = 0.01
# Sustained lag is also judged per window while the run goes on, so a long run's bad minute is not
# averaged away and is reported when it happens.
WINDOW_S = 10.0
ADVICE = "use more load-generating processes (--processes N or workers) or fewer users per process"
# Lag is also kept per ladder level (a client fine at 1 user may fall behind at 64); a ladder has a handful
# of levels, so past this many the further ones are counted only in the run's totals.
MAX_LEVELS = 64


class LevelLag:
    """Lag at one ladder level: wake-ups, late ones, the worst, and the time measured vs spent behind."""

    __slots__ = ("samples", "late_samples", "max_lag_ms", "measured_s", "late_s")

    def __init__(self) -> None:
        self.samples = 0
        self.late_samples = 0
        self.max_lag_ms = 0.0
        self.measured_s = 0.0
        self.late_s = 0.0

    def add(self, lag_ms: float, span_s: float, late: bool) -> None:
        self.samples += 1
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        self.measured_s += span_s
        if late:
            self.late_samples += 1
            self.late_s += lag_ms / 1000.0

    def share(self) -> float:
        """Share of the measured time the loop was behind (as the run's loop_late_share)."""
        return self.late_s / self.measured_s if self.measured_s else 0.0

    def summary(self) -> dict:
        return {"samples": self.samples, "late_samples": self.late_samples,
                "late_share": round(self.share(), 5), "max_lag_ms": round(self.max_lag_ms, 3)}


class LagMonitor:
    """Sleeps `interval_s` in a loop and records the oversleep, only while `active()` holds before and
    after the sleep (the plugin passes "the test is running": spawn bursts and the stop are left out).

    Each wake-up is also counted under `level()` at that moment (the plugin passes the ladder level's
    users), so a level the client could not keep up with can be told from the others."""

    def __init__(self, interval_s: float = 0.05, warn_ms: float = LATE_MS, late_share: float = LATE_SHARE,
                 window_s: float = WINDOW_S, warn_every_s: float = 30.0,
                 active: Callable[[], bool] = lambda: True,
                 level: Callable[[], LevelKey] = lambda: 0) -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.late_share = late_share
        self.window_s = window_s
        self.warn_every_s = warn_every_s
        self.active = active
        self.level = level
        self.by_level: dict[LevelKey, LevelLag] = {}
        self.max_lag_ms = 0.0
        self.samples = 0
        self.late_samples = 0
        self.warnings = 0
        self.measured_s = 0.0
        self.late_s = 0.0
        self._window_measured = 0.0
        self._window_late = 0.0
        self._last_warn = -float("inf")
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """Stop sampling and judge the run as a whole (a run shorter than one window is judged here)."""
        if self._greenlet is None:
            return
        self._greenlet.kill(block=False)
        self._greenlet = None
        if self.warnings == 0 and self.share() > self.late_share:
            self._warn(self.share(), "during the run")

    def share(self) -> float:
        """Share of the measured time the loop was behind by warn_ms or more."""
        return self.late_s / self.measured_s if self.measured_s else 0.0

    def observe(self, lag_ms: float, now: float, users: LevelKey = 0) -> None:
        """One wake-up `lag_ms` late, after `interval_s` of sleep, at perf_counter `now`, at level `users`."""
        self.samples += 1
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        span = self.interval_s + lag_ms / 1000.0
        late = lag_ms >= self.warn_ms
        at_level = self.by_level.get(users)
        if at_level is None and len(self.by_level) < MAX_LEVELS:
            at_level = self.by_level[users] = LevelLag()
        if at_level is not None:
            at_level.add(lag_ms, span, late)
        self.measured_s += span
        self._window_measured += span
        if late:
            self.late_samples += 1
            self.late_s += lag_ms / 1000.0
            self._window_late += lag_ms / 1000.0
        if self._window_measured < self.window_s:
            return
        share = self._window_late / self._window_measured
        self._window_measured = self._window_late = 0.0
        if share > self.late_share and now - self._last_warn >= self.warn_every_s:
            self._last_warn = now
            self._warn(share, f"over the last {self.window_s:g} s")

    def _warn(self, share: float, when: str) -> None:
        self.warnings += 1
        log.warning("locust-spec: this load generator's event loop was behind by %g ms or more for %.1f %% "
                    "of the time %s (worst %.1f ms): timestamps taken then are late by as much; %s.",
                    self.warn_ms, share * 100.0, when, self.max_lag_ms, ADVICE)

    def _run(self) -> None:
        clock = time.perf_counter
        while True:
            was_active = self.active()
            before = clock()
            gevent.sleep(self.interval_s)
            now = clock()
            if was_active and self.active():
                self.observe(max((now - before - self.interval_s) * 1000.0, 0.0), now, self.level())

    def summary(self) -> dict:
        return {"max_loop_lag_ms": round(self.max_lag_ms, 3), "loop_lag_samples": self.samples,
                "loop_lag_late_samples": self.late_samples, "loop_lag_warnings": self.warnings,
                "loop_late_share": round(self.share(), 5),
                "by_level": {str(users): lag.summary() for users, lag in in_level_order(self.by_level)}}
