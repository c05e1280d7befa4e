"""The objective's 95% intervals, from the verdict's statistics (analysis/stats.py), so spec-tune and
spec-verdict judge noise the same way: over independent blocks of time, paired by block group when two
arms ran on one clock (the interleaved design), runs as an outer cluster when repeated.

A rate (throughput, goodput) is the amount over the seconds of the arm's measured block windows; TPOT is
the pooled per-request median.
"""

from __future__ import annotations

import numpy as np

from locust_spec.analysis import stats
from locust_spec.analysis.stats import Interval
from locust_spec.tune.sample import ArmSample

__all__ = ["Interval", "to_dict", "change", "contains", "level"]


def level(objective: str, sample: ArmSample) -> Interval:
    """One arm's objective at one level with its interval."""
    units = stats.Units(sample.runs, "blocks")
    if objective == "tpot":
        return stats.quantile_interval(sample.values, sample.unit_of, 0.5, units)
    return stats.ratio_interval(sample.values, sample.seconds, units)


def _paired(reference: ArmSample, other: ArmSample) -> tuple[stats.Units, np.ndarray, np.ndarray] | None:
    """Units shared by both arms (each unit's run and each arm's unit -> shared unit) when every unit of
    both carries a clock and they name the same block groups; None otherwise."""
    if set(reference.keys) != set(other.keys) or any(k[0] is None for k in reference.keys):
        return None
    order = sorted(set(reference.keys))
    code = {k: i for i, k in enumerate(order)}
    clocks = sorted({k[0] for k in order})
    runs = np.array([clocks.index(k[0]) for k in order], dtype=np.int64)
    return (stats.Units(runs, "block groups"), np.array([code[k] for k in reference.keys], dtype=np.int64),
            np.array([code[k] for k in other.keys], dtype=np.int64))


def change(objective: str, reference: ArmSample, other: ArmSample) -> Interval:
    """The % change of `other`'s objective from `reference`'s."""
    shared = _paired(reference, other)
    if shared is not None:
        units, ref_map, other_map = shared
        ref_units, other_units = units, None
    else:
        ref_units, other_units = stats.Units(reference.runs, "blocks"), stats.Units(other.runs, "blocks")
        ref_map, other_map = np.arange(ref_units.count), np.arange(other_units.count)
    if objective == "tpot":
        return stats.quantile_changes(reference.values, ref_map[reference.unit_of], other.values,
                                      other_map[other.unit_of], (0.5,), ref_units, other_units)[0]
    count = ref_units.count

    def sums(sample: ArmSample, mapping: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.bincount(mapping, sample.values, n), np.bincount(mapping, sample.seconds, n))

    ref_sums = sums(reference, ref_map, count)
    other_sums = sums(other, other_map, count if other_units is None else other_units.count)
    return stats.ratio_change(*ref_sums, *other_sums, ref_units, other_units)


def contains(interval: Interval, value: float) -> bool:
    return interval.measured and interval.lo <= value <= interval.hi


def to_dict(interval: Interval | None) -> dict | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "lo": interval.lo, "hi": interval.hi}
