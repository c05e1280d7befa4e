"""The objective's 95% intervals, from the verdict's statistics (analysis/stats.py: percentile bootstrap
over requests, runs as clusters when repeated), so spec-tune and spec-verdict judge noise the same way.

A rate (throughput, goodput) is the amount over the level's measured window; its interval is the spread
of the per-request rate sum(amount) / sum(request seconds) under resampling of requests, centred on the
window's rate (as the verdict does for throughput). Resampling the window's amounts alone would hold the
number of requests fixed, and with equal-length answers show no spread at all. TPOT is the per-request
median.
"""

from __future__ import annotations

import numpy as np

from locust_spec.analysis import stats
from locust_spec.analysis.stats import Interval

__all__ = ["Interval", "as_dict", "change", "contains", "level"]


Parts = tuple[np.ndarray, np.ndarray, float, np.ndarray | None]
"""(per-request values, per-request seconds, the measured window's seconds, run labels or None)."""


def _rate(parts: Parts) -> float:
    values, _, wall_s, _ = parts
    return float(values.sum() / wall_s)


def level(objective: str, parts: Parts) -> Interval:
    """One arm's objective at one level with its interval."""
    values, seconds, _, groups = parts
    if objective == "tpot":
        return stats.quantile_ci(values, 0.5, groups=groups)
    per_request = stats.ratio_ci(values, seconds, groups=groups)
    point = _rate(parts)
    if not per_request.measured or not per_request.estimate:
        return Interval(point, None, None, method=per_request.method, units=per_request.units)
    scale = point / per_request.estimate
    return Interval(point, per_request.lo * scale, per_request.hi * scale, per_request.confidence,
                    per_request.method + ", centred on the window's rate", per_request.units)


def change(objective: str, reference: Parts, other: Parts) -> Interval:
    """The % change of `other`'s objective from `reference`'s."""
    (rv, rs, _, rg), (ov, os_, _, og) = reference, other
    if objective == "tpot":
        return stats.change_ci(rv, ov, 0.5, baseline_groups=rg, candidate_groups=og)
    base = _rate(reference)
    point = (_rate(other) / base - 1.0) * 100.0 if base else None
    return stats.rate_change_ci(rv, rs, ov, os_, baseline_groups=rg, candidate_groups=og, point_change=point)


def contains(interval: Interval, value: float) -> bool:
    return interval.measured and interval.lo <= value <= interval.hi


def as_dict(interval: Interval | None) -> dict | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "lo": interval.lo, "hi": interval.hi}
