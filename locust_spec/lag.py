"""Event-loop lag monitor: a greenlet that measures how late its own wake-ups are, and warns when the
client cannot keep up (every timestamp taken while the loop is late is late by as much)."""

from __future__ import annotations

import logging
import time

import gevent

log = logging.getLogger(__name__)


class LagMonitor:
    """Sleeps `interval_s` in a loop and records the oversleep; warns at most every `warn_every_s`."""

    def __init__(self, interval_s: float = 0.05, warn_ms: float = 5.0, warn_every_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.warn_every_s = warn_every_s
        self.max_lag_ms = 0.0
        self.samples = 0
        self.late_samples = 0
        self.warnings = 0
        self._last_warn = -float("inf")
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def observe(self, lag_ms: float, now: float) -> None:
        self.samples += 1
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        if lag_ms < self.warn_ms:
            return
        self.late_samples += 1
        if now - self._last_warn >= self.warn_every_s:
            self._last_warn = now
            self.warnings += 1
            log.warning(
                "locust-spec: this load generator is %.1f ms behind (event loop lag); timestamps are late "
                "by as much. Use more processes (--processes N or workers) or fewer users per process.",
                lag_ms,
            )

    def _run(self) -> None:
        while True:
            before = time.perf_counter()
            gevent.sleep(self.interval_s)
            now = time.perf_counter()
            self.observe(max((now - before - self.interval_s) * 1000.0, 0.0), now)

    def summary(self) -> dict:
        return {"max_loop_lag_ms": round(self.max_lag_ms, 3), "loop_lag_samples": self.samples,
                "loop_lag_late_samples": self.late_samples, "loop_lag_warnings": self.warnings}
