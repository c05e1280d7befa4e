"""Opt-in memory trace (env LOCUST_SPEC_MEMTRACE=FILE): what grows in a long run, by allocation site.

tracemalloc runs from the test's start; every LOCUST_SPEC_MEMTRACE_EVERY seconds (default 60) a snapshot is
compared with the first one and the sites that grew most are appended to FILE as one JSON line (with the
process id: a master and its workers may share FILE)
(`benchmarks/soak.py --tracemalloc` reads them). Tracing slows every allocation and a snapshot blocks the
event loop: a diagnosis mode, never for measuring.
"""

from __future__ import annotations

import os
import time
import tracemalloc

import gevent
import orjson

ENV = "LOCUST_SPEC_MEMTRACE"
EVERY_ENV = "LOCUST_SPEC_MEMTRACE_EVERY"
TOP = 15


def growth(baseline: tracemalloc.Snapshot, now: tracemalloc.Snapshot, top: int = TOP) -> list[dict]:
    """The allocation sites that grew most between two snapshots, largest growth first."""
    stats = now.compare_to(baseline, "lineno")
    stats.sort(key=lambda s: s.size_diff, reverse=True)
    return [{"site": str(s.traceback[0]), "size_kib": round(s.size / 1024, 1),
             "growth_kib": round(s.size_diff / 1024, 1), "count_growth": s.count_diff}
            for s in stats[:top] if s.size_diff > 0]


class MemTrace:
    def __init__(self, path: str, every_s: float) -> None:
        self.path = path
        self.every_s = every_s
        self._greenlet: gevent.Greenlet | None = None

    @classmethod
    def from_env(cls) -> MemTrace | None:
        path = os.environ.get(ENV)
        return cls(path, float(os.environ.get(EVERY_ENV) or 60.0)) if path else None

    def start(self) -> None:
        if self._greenlet is None:
            tracemalloc.start()
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _snapshot(self) -> tracemalloc.Snapshot:
        return tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))

    def _run(self) -> None:
        started = time.monotonic()
        baseline = None
        with open(self.path, "ab") as out:
            while True:
                gevent.sleep(self.every_s)
                snapshot = self._snapshot()
                if baseline is None:
                    baseline = snapshot
                    continue
                traced, _ = tracemalloc.get_traced_memory()
                record = {"pid": os.getpid(), "t_s": round(time.monotonic() - started, 1),
                          "traced_mib": round(traced / 2**20, 2), "top": growth(baseline, snapshot)}
                out.write(orjson.dumps(record) + b"\n")
                out.flush()
