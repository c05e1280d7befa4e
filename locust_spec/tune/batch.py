"""The batch a level really ran at: the time-weighted mean of the server's running requests (pure).

vLLM switches k by the number of requests scheduled in a step, so a schedule is indexed by what the
server ran, not by how many users the client had: with think time, queueing or a slow client the two
differ. `vllm:num_requests_running` counts scheduled requests, prefills included.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from locust_spec.counters import RUNNING, Snapshot


def _series(snapshots: Iterable[Snapshot], metric: str) -> dict[str, list[tuple[float, float]]]:
    by_url: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for snap in snapshots:
        total = [s.value for s in snap.samples if s.metric == metric]
        if total:
            by_url[snap.url].append((snap.timestamp_unix_s, sum(total)))
    return by_url


def time_weighted(points: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Mean of a gauge over [start, end], each sample holding until the next (the one before `start`
    covers the window's beginning); None without a sample at or before some part of the window."""
    points = sorted(points)
    inside = [p for p in points if start < p[0] < end]
    before = [p for p in points if p[0] <= start]
    if before:
        inside.insert(0, (start, before[-1][1]))
    if not inside or end <= start:
        return None
    total = 0.0
    for (t, value), (t_next, _) in zip(inside, [*inside[1:], (end, 0.0)], strict=True):
        total += value * (t_next - t)
    return total / (end - inside[0][0])


def mean_running(snapshots: Iterable[Snapshot], start: float, end: float,
                 metric: str = RUNNING) -> float | None:
    """Time-weighted running requests over the window, summed over the URLs scraped (replicas)."""
    means = [time_weighted(points, start, end) for points in _series(snapshots, metric).values()]
    present = [m for m in means if m is not None]
    return sum(present) if present else None
