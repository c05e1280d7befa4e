"""The objective's 95% intervals, from the verdict's statistics (analysis/stats.py: percentile bootstrap
over requests, runs as clusters when repeated), so spec-tune and spec-verdict judge noise the same way.

A rate (throughput, goodput) is sum(value) / sum(share): each request carries an equal share of its run's
measured window, so the ratio of sums is exactly the amount over the window, and the bootstrap resamples
requests, never tokens. TPOT is the per-request median.
"""

from __future__ import annotations

import numpy as np

from locust_spec.analysis import stats
from locust_spec.analysis.stats import Interval

__all__ = ["Interval", "as_dict", "change", "contains", "level"]


def level(objective: str, values: np.ndarray, shares: np.ndarray, groups: np.ndarray | None) -> Interval:
    """One arm's objective at one level with its interval."""
    if objective == "tpot":
        return stats.quantile_ci(values, 0.5, groups=groups)
    return stats.ratio_ci(values, shares, groups=groups)


def change(objective: str, reference: tuple[np.ndarray, np.ndarray, np.ndarray | None],
           other: tuple[np.ndarray, np.ndarray, np.ndarray | None]) -> Interval:
    """The % change of `other`'s objective from `reference`'s, each (values, shares, groups)."""
    (rv, rs, rg), (ov, os_, og) = reference, other
    if objective == "tpot":
        return stats.change_ci(rv, ov, 0.5, baseline_groups=rg, candidate_groups=og)
    return stats.rate_change_ci(rv, rs, ov, os_, baseline_groups=rg, candidate_groups=og)


def contains(interval: Interval, value: float) -> bool:
    return interval.measured and interval.lo <= value <= interval.hi


def as_dict(interval: Interval | None) -> dict | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "lo": interval.lo, "hi": interval.hi}
