"""95% confidence intervals for what the verdict compares (pure numpy, fast at a million rows).

Public API (spec-tune imports it; keep it stable):

- `Interval(estimate, lo, hi, confidence, method, units)`: a point estimate and its interval.
- `quantile_ci(values, q)`: one arm's quantile (q in (0, 1)).
- `change_ci(baseline_values, candidate_values, statistic)`: the % change of a per-request statistic
  (a quantile q in (0, 1), or "mean") from baseline to candidate.
- `ratio_ci(numerators, denominators)`: a ratio of sums over independent units (acceptance =
  accepted / drafted over requests or scrape intervals; a rate = amount / duration).
- `rate_change_ci(base_amounts, base_durations, cand_amounts, cand_durations)`: the % change of a rate
  sum(amount) / sum(duration) (throughput: output tokens over request time).
- `classify(interval, band_pct, lower_is_better)`: better / worse / same / inconclusive / unknown.
- `crossing(xs, intervals, threshold)`: where a changing quantity crosses a threshold, interpolated.

Every function takes `groups` (one label per value) when values come from several runs (repeats): the
bootstrap then resamples runs and, inside each chosen run, its units (a two-stage cluster bootstrap).

Why these methods, not a textbook loop over resamples: a percentile bootstrap of a quantile over n values
costs n per resample; here the k-th order statistic of a resample is drawn directly (the k-th smallest of
n uniform indices is floor(n * Beta(k, n - k + 1))), so it costs one sort plus O(resamples), exact at any n.
Sums of a resample (means, ratios of sums) are drawn exactly up to EXACT_MAX_UNITS units and from the
normal limit of the resampled sum above it, where the central limit theorem makes them indistinguishable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
# Above this many units, a resample's sums come from their normal limit (n * covariance) instead of
# drawing n indices per resample; below it the draw is exact and costs at most EXACT_MAX_UNITS * RESAMPLES.
EXACT_MAX_UNITS = 2000
MEAN = "mean"
POINT = "point"
Statistic = float | str

__all__ = [
    "BETTER", "CONFIDENCE", "INCONCLUSIVE", "MEAN", "POINT", "RESAMPLES", "SAME", "UNKNOWN",
    "UNKNOWN_DIRECTION", "WORSE", "Crossing", "Interval", "change_ci", "change_pct", "classify", "crossing",
    "quantile", "quantile_ci", "rate_change_ci", "ratio_ci",
]


def change_pct(base: float | None, cand: float | None) -> float | None:
    """The candidate relative to the baseline in percent; None when either is missing or base <= 0."""
    if base is None or cand is None or base <= 0:
        return None
    return (cand - base) / base * 100.0


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval; lo/hi are None when it cannot be computed.

    For a change the unit is percent (candidate vs baseline); `units` counts what was resampled.
    """

    estimate: float | None
    lo: float | None
    hi: float | None
    confidence: float = CONFIDENCE
    method: str = ""
    units: int = 0

    @property
    def measured(self) -> bool:
        return self.lo is not None and self.hi is not None

    def as_list(self) -> list[float] | None:
        return [self.lo, self.hi] if self.measured else None

    @staticmethod
    def point(estimate: float | None) -> Interval:
        """An estimate without spread (a hand-built comparison): the interval is the point itself."""
        return Interval(estimate, estimate, estimate, method=POINT)


UNKNOWN = Interval(None, None, None, method="not measured")


def _clean(values: ArrayLike, groups: ArrayLike | None) -> tuple[np.ndarray, np.ndarray | None]:
    x = np.asarray(values, dtype=np.float64).ravel()
    keep = np.isfinite(x)
    g = None
    if groups is not None:
        g = np.asarray(groups).ravel()
        if len(g) != len(x):
            raise ValueError(f"groups has {len(g)} labels for {len(x)} values")
        g = g[keep]
    return x[keep], g


def _split(x: np.ndarray, groups: np.ndarray | None) -> list[np.ndarray]:
    if groups is None:
        return [x]
    _, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    return [part for part in np.split(x[order], bounds) if len(part)]


def _quantile_sorted(xs: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of sorted values."""
    h = (len(xs) - 1) * q
    j = int(np.floor(h))
    if j + 1 >= len(xs):
        return float(xs[-1])
    return float(xs[j] + (h - j) * (xs[j + 1] - xs[j]))


def _quantile_replicates(xs: np.ndarray, q: float, rng: np.random.Generator, b: int) -> np.ndarray:
    """Bootstrap replicates of the linear quantile of sorted xs: the two order statistics it interpolates
    are drawn from their exact resampling distribution (uniform order statistics via Beta)."""
    n = len(xs)
    if n == 1:
        return np.full(b, xs[0])
    h = (n - 1) * q
    j = int(np.floor(h))
    frac = h - j
    k = j + 1  # 1-based rank of the lower order statistic
    u_k = rng.beta(k, n - k + 1, b)
    lower = xs[np.minimum((u_k * n).astype(np.int64), n - 1)]
    if frac == 0 or k >= n:
        return lower
    u_next = u_k + (1.0 - u_k) * rng.beta(1, n - k, b)
    upper = xs[np.minimum((u_next * n).astype(np.int64), n - 1)]
    return lower + frac * (upper - lower)


def _sum_replicates(columns: np.ndarray, rng: np.random.Generator, b: int) -> np.ndarray:
    """(b, k) bootstrap replicates of the column sums of an (n, k) array of units."""
    n = len(columns)
    if n <= EXACT_MAX_UNITS:
        out = np.empty((b, columns.shape[1]))
        step = max(1, 2_000_000 // max(n, 1))
        for start in range(0, b, step):
            stop = min(b, start + step)
            idx = rng.integers(0, n, (stop - start, n))
            out[start:stop] = columns[idx].sum(axis=1)
        return out
    mean = columns.sum(axis=0)
    cov = np.atleast_2d(np.cov(columns, rowvar=False)) * n
    return rng.multivariate_normal(mean, cov, b, method="cholesky" if np.all(np.diag(cov) > 0) else "svd")


def _parse_statistic(statistic: Statistic) -> float | None:
    """A quantile in (0, 1), or None for the mean."""
    if statistic == MEAN:
        return None
    q = float(statistic)
    if not 0 < q < 1:
        raise ValueError(f"statistic must be a quantile in (0, 1) or {MEAN!r}, not {statistic!r}")
    return q


def _stat_point_and_replicates(parts: list[np.ndarray], statistic: Statistic, rng: np.random.Generator,
                               b: int) -> tuple[float, np.ndarray]:
    """The statistic's estimate and b bootstrap replicates, clusters (runs) resampled when several.

    With several runs the estimate is the mean of the runs' statistics weighted by their sizes, and a
    replicate draws runs with replacement and, for each, one replicate of its own statistic.
    """
    q = _parse_statistic(statistic)
    points, reps = [], []
    for part in parts:
        if q is None:
            points.append(float(part.mean()))
            reps.append(_sum_replicates(part[:, None], rng, b)[:, 0] / len(part))
        else:
            xs = np.sort(part)
            points.append(_quantile_sorted(xs, q))
            reps.append(_quantile_replicates(xs, q, rng, b))
    sizes = np.array([len(p) for p in parts], dtype=np.float64)
    if len(parts) == 1:
        return points[0], reps[0]
    point = float(np.dot(sizes, points) / sizes.sum())
    picks = rng.integers(0, len(parts), (b, len(parts)))
    columns = rng.integers(0, b, (b, len(parts)))
    table = np.stack(reps)  # (runs, b)
    w = sizes[picks]
    return point, (w * table[picks, columns]).sum(axis=1) / w.sum(axis=1)


def _bounds(replicates: np.ndarray, confidence: float) -> tuple[float, float] | None:
    finite = replicates[np.isfinite(replicates)]
    if len(finite) < len(replicates) * 0.9:
        return None
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return float(lo), float(hi)


def quantile(values: ArrayLike, q: float) -> float | None:
    """numpy's linear quantile of the finite values; None when there are none."""
    x, _ = _clean(values, None)
    return _quantile_sorted(np.sort(x), q) if len(x) else None


def quantile_ci(values: ArrayLike, q: float, *, groups: ArrayLike | None = None,
                confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """One arm's quantile q in (0, 1) with its percentile-bootstrap interval (needs 2 values)."""
    x, g = _clean(values, groups)
    if len(x) < 2:
        return Interval(float(x[0]) if len(x) else None, None, None, confidence, "too few values", len(x))
    rng = np.random.default_rng(seed)
    point, reps = _stat_point_and_replicates(_split(x, g), q, rng, resamples)
    bounds = _bounds(reps, confidence)
    return Interval(point, *(bounds or (None, None)), confidence, "bootstrap, requests", len(x))


def change_ci(baseline_values: ArrayLike, candidate_values: ArrayLike, statistic: Statistic = 0.5, *,
              baseline_groups: ArrayLike | None = None, candidate_groups: ArrayLike | None = None,
              confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The % change of a per-request statistic (quantile q or "mean") from baseline to candidate.

    Percentile bootstrap over requests, each arm resampled independently (and over runs when `*_groups`
    label several). The interval is None-bounded with fewer than 2 values in an arm or a zero baseline.
    """
    xb, gb = _clean(baseline_values, baseline_groups)
    xc, gc = _clean(candidate_values, candidate_groups)
    units = len(xb) + len(xc)
    if len(xb) < 2 or len(xc) < 2:
        return Interval(None, None, None, confidence, "too few requests", units)
    rng = np.random.default_rng(seed)
    pb, rb = _stat_point_and_replicates(_split(xb, gb), statistic, rng, resamples)
    pc, rc = _stat_point_and_replicates(_split(xc, gc), statistic, rng, resamples)
    if pb <= 0:
        return Interval(None, None, None, confidence, "baseline is zero", units)
    with np.errstate(divide="ignore", invalid="ignore"):
        bounds = _bounds((rc / rb - 1.0) * 100.0, confidence)
    return Interval((pc / pb - 1.0) * 100.0, *(bounds or (None, None)), confidence, "bootstrap, requests",
                    units)


def _ratio_point_and_replicates(num: np.ndarray, den: np.ndarray, groups: np.ndarray | None,
                                rng: np.random.Generator, b: int) -> tuple[float, np.ndarray]:
    """sum(num) / sum(den) and b replicates; with runs, runs are drawn first, then units inside each."""
    pairs = np.column_stack([num, den])
    parts = _split(np.arange(len(num)), groups)
    sums = [_sum_replicates(pairs[idx], rng, b) for idx in parts]  # each (b, 2)
    point = float(num.sum() / den.sum()) if den.sum() else float("nan")
    if len(parts) == 1:
        s = sums[0]
    else:
        table = np.stack(sums)  # (runs, b, 2)
        picks = rng.integers(0, len(parts), (b, len(parts)))
        columns = rng.integers(0, b, (b, len(parts)))
        s = table[picks, columns].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return point, s[:, 0] / s[:, 1]


def _pairs(num: ArrayLike, den: ArrayLike, groups: ArrayLike | None):
    n = np.asarray(num, dtype=np.float64).ravel()
    d = np.asarray(den, dtype=np.float64).ravel()
    if len(n) != len(d):
        raise ValueError(f"{len(n)} numerators for {len(d)} denominators")
    keep = np.isfinite(n) & np.isfinite(d)
    g = None if groups is None else np.asarray(groups).ravel()[keep]
    return n[keep], d[keep], g


def ratio_ci(numerators: ArrayLike, denominators: ArrayLike, *, groups: ArrayLike | None = None,
             confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """sum(numerators) / sum(denominators) with a bootstrap over the units (rows), not over what they count.

    Acceptance: per request (accepted, drafted) or per scrape interval (counter increases). Tokens within
    a request or an interval are not independent, so they are never resampled one by one. Needs 2 units.
    """
    n, d, g = _pairs(numerators, denominators, groups)
    if len(n) == 0 or d.sum() <= 0:
        return Interval(None, None, None, confidence, "no denominator", len(n))
    if len(n) < 2:
        return Interval(float(n.sum() / d.sum()), None, None, confidence, "one unit", 1)
    point, reps = _ratio_point_and_replicates(n, d, g, np.random.default_rng(seed), resamples)
    bounds = _bounds(reps, confidence)
    return Interval(point, *(bounds or (None, None)), confidence, "bootstrap, units", len(n))


def rate_change_ci(baseline_amounts: ArrayLike, baseline_durations: ArrayLike,
                   candidate_amounts: ArrayLike, candidate_durations: ArrayLike, *,
                   baseline_groups: ArrayLike | None = None, candidate_groups: ArrayLike | None = None,
                   point_change: float | None = None, confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The % change of a rate sum(amount) / sum(duration) (throughput: tokens over request seconds).

    The bootstrap resamples units (requests) of each arm. `point_change` is the change the caller measured
    another way (tokens over a level's wall window): the interval is then the bootstrap's spread around it,
    in log space (the estimator's error taken from the per-request rate), so it always contains it.
    """
    nb, db, gb = _pairs(baseline_amounts, baseline_durations, baseline_groups)
    nc, dc, gc = _pairs(candidate_amounts, candidate_durations, candidate_groups)
    units = len(nb) + len(nc)
    if len(nb) < 2 or len(nc) < 2 or db.sum() <= 0 or dc.sum() <= 0 or nb.sum() <= 0:
        return Interval(point_change, None, None, confidence, "too few requests", units)
    rng = np.random.default_rng(seed)
    pb, rb = _ratio_point_and_replicates(nb, db, gb, rng, resamples)
    pc, rc = _ratio_point_and_replicates(nc, dc, gc, rng, resamples)
    own = pc / pb
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rc / rb
        if point_change is not None:
            ratios = ratios / own * (1.0 + point_change / 100.0)
        bounds = _bounds((ratios - 1.0) * 100.0, confidence)
    estimate = point_change if point_change is not None else (own - 1.0) * 100.0
    return Interval(estimate, *(bounds or (None, None)), confidence, "bootstrap, requests", units)


BETTER, WORSE, SAME, INCONCLUSIVE, UNKNOWN_DIRECTION = "better", "worse", "same", "inconclusive", "unknown"


def classify(interval: Interval, band_pct: float, *, lower_is_better: bool) -> str:
    """Where a change's interval lies against the noise band +-band_pct.

    better / worse: the whole interval is beyond the band on that side; same: the whole interval is
    inside the band (no change that matters); inconclusive: it straddles a band edge; unknown: no interval.
    """
    if not interval.measured:
        return UNKNOWN_DIRECTION
    lo, hi = interval.lo, interval.hi
    if lo > band_pct or hi < -band_pct:
        up = lo > band_pct
        return WORSE if up == lower_is_better else BETTER
    if lo >= -band_pct and hi <= band_pct:
        return SAME
    return INCONCLUSIVE


@dataclass(frozen=True)
class Crossing:
    """Where a quantity measured at ordered x crosses a threshold: x interpolated between the two levels
    around it, with the x range where its interval's bounds cross (None where they never do)."""

    x: float | None
    lo: float | None
    hi: float | None
    between: tuple[float, float] | None


def _first_crossing(xs: Sequence[float], ys: Sequence[float | None], threshold: float,
                    log_x: bool) -> tuple[float | None, tuple[float, float] | None]:
    """x where ys first falls from >= threshold to below it, linear in y and (optionally) log x."""
    for i in range(len(xs) - 1):
        y0, y1 = ys[i], ys[i + 1]
        if y0 is None or y1 is None or not (y0 >= threshold > y1):
            continue
        x0, x1 = (np.log(xs[i]), np.log(xs[i + 1])) if log_x else (xs[i], xs[i + 1])
        x = x0 + (y0 - threshold) / (y0 - y1) * (x1 - x0)
        return float(np.exp(x) if log_x else x), (float(xs[i]), float(xs[i + 1]))
    return None, None


def crossing(xs: Sequence[float], intervals: Sequence[Interval], threshold: float = 0.0, *,
             log_x: bool = True) -> Crossing:
    """Where a gain (higher is better, e.g. a throughput change %) stops clearing `threshold`.

    The point crossing uses the estimates; the interval's low bound crosses first (the earliest the gain
    may stop paying) and its high bound last. x is interpolated in log x by default (concurrency ladders
    double). None where the quantity never crosses within the measured levels.
    """
    def col(attr: str) -> list[float | None]:
        return [getattr(i, attr) for i in intervals]

    x, between = _first_crossing(xs, col("estimate"), threshold, log_x)
    lo, _ = _first_crossing(xs, col("lo"), threshold, log_x)
    hi, _ = _first_crossing(xs, col("hi"), threshold, log_x)
    return Crossing(x, lo, hi, between)
