"""The memory trace names the allocation site that grew between two snapshots."""

from __future__ import annotations

import tracemalloc

from locust_spec.recording.memtrace import growth


def test_the_site_that_grew_most_comes_first():
    tracemalloc.start()
    try:
        baseline = tracemalloc.take_snapshot()
        kept = [bytearray(4096) for _ in range(256)]  # ~1 MiB from this line
        now = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    top = growth(baseline, now)
    assert kept and top[0]["site"].endswith(f"test_memtrace.py:{_line_of('bytearray(4096)')}")
    assert top[0]["growth_kib"] >= 1024 and top[0]["count_growth"] >= 256
    assert all(a["growth_kib"] >= b["growth_kib"] for a, b in zip(top, top[1:], strict=False))


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, 1) if text in line and "kept" in line)
