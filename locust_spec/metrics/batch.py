"""The batch a level really ran at: the time-weighted mean of the server's running requests (pure). One
function for spec-tune's schedule and spec-verdict's levels, so both speak of the same batch.

vLLM switches k by the number of requests scheduled in a step, so a schedule is indexed by what the
server ran, not by how many users the client had: with think time, queueing or a slow client the two
differ. The exact time integral of the running requests is the increase of the sum of
`vllm:request_inference_time_seconds` (each request's time in the RUNNING phase, prefill included): over
a window, that increase divided by its length is the mean number running (Little's law). The gauge
`vllm:num_requests_running` is the fallback: sampled once per scrape it aliases under synchronized load
(64 users with equal answers finish together, and a scrape in that gap read 2 running; its time-weighted
mean over the level was 30.7).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from locust_spec.metrics.counters import RUNNING, Snapshot

INFERENCE_SUM = "vllm:request_inference_time_seconds_sum"


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


def counter_rate(points: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Increase per second of a counter between its first and last sample inside [start, end]; None
    with fewer than two samples there or when it fell (the server restarted)."""
    inside = sorted(p for p in points if start <= p[0] <= end)
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, v0), (t1, v1) = inside[0], inside[-1]
    if any(b[1] < a[1] for a, b in zip(inside, inside[1:], strict=False)):
        return None
    return (v1 - v0) / (t1 - t0)


def mean_running(snapshots: Iterable[Snapshot], start: float, end: float) -> float | None:
    """Mean running requests over the window, summed over the URLs scraped (replicas): from the RUNNING
    time counter where a URL exposes it, else the time-weighted gauge."""
    snapshots = list(snapshots)
    busy = _series(snapshots, INFERENCE_SUM)
    gauge = _series(snapshots, RUNNING)
    means = []
    for url in set(busy) | set(gauge):
        rate = counter_rate(busy[url], start, end) if url in busy else None
        means.append(rate if rate is not None else
                     time_weighted(gauge[url], start, end) if url in gauge else None)
    present = [m for m in means if m is not None]
    return sum(present) if present else None
