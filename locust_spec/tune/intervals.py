"""Bootstrap confidence intervals of a per-request statistic, and of a difference between two arms (pure).

One function each, so a shared statistics module can replace them in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
CHUNK = 100
"""Resamples drawn at once: memory stays CHUNK x n values whatever RESAMPLES is."""

Statistic = Callable[[np.ndarray], np.ndarray]
"""Row-wise over a 2-D array of resampled values -> one number per row."""


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def as_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def _resampled(values: np.ndarray, statistic: Statistic, rng: np.random.Generator) -> np.ndarray:
    out = []
    for start in range(0, RESAMPLES, CHUNK):
        rows = min(CHUNK, RESAMPLES - start)
        out.append(statistic(values[rng.integers(0, len(values), (rows, len(values)))]))
    return np.concatenate(out)


def bootstrap(values: np.ndarray, statistic: Statistic, level: float = 0.95, seed: int = 0) -> Interval:
    """Percentile bootstrap of `statistic` over independent per-request values."""
    if len(values) == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(seed)
    draws = _resampled(values, statistic, rng)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(float(statistic(values[None, :])[0]), float(low), float(high))


def difference(a: np.ndarray, stat_a: Statistic, b: np.ndarray, stat_b: Statistic, level: float = 0.95,
               seed: int = 0) -> Interval:
    """Percentile bootstrap of stat_a(a) - stat_b(b), the two arms resampled independently (each arm's
    statistic may carry its own window, e.g. tokens over that arm's seconds)."""
    if len(a) == 0 or len(b) == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(seed)
    draws = _resampled(a, stat_a, rng) - _resampled(b, stat_b, rng)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    point = float(stat_a(a[None, :])[0] - stat_b(b[None, :])[0])
    return Interval(point, float(low), float(high))
