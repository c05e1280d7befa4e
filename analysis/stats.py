"""95% confidence intervals over independent units (pure numpy, fast at a million rows).

Requests that run in the same stretch of time share the server's state (its batch, a stall, a busy
neighbour), so they are not independent: the units resampled here are stretches of time (blocks of a
level; block *groups* that hold every arm once when the design pairs the arms), or prompts for acceptance,
with repeats (runs) as a further, outer level of clustering. docs/verdict-method.md explains the method.

Public API (spec-verdict and spec-tune use it):

- `Interval(estimate, lo, hi, confidence, method, units, unit, df)`; `Interval.mde_pct(band)`: the smallest
  true change the interval's spread lets a comparison claim with 80% power.
- `Units(runs, name)`: the units of one arm or of a paired comparison: each unit's run (outer cluster).
- `quantile_changes` / `ratio_change`: the % change of a per-request quantile (values with their unit) or
  of a ratio of per-unit sums (tokens over seconds) from baseline to candidate, paired when both arms
  share one `Units`, else each arm resampled on its own.
- `quantile_interval` / `ratio_interval`: one arm's quantile or ratio of sums with its interval.
- `classify(interval, band_pct, lower_is_better)`, `crossing(xs, intervals, threshold)`.

How: a replicate draws runs with replacement and, inside each drawn run, its units with replacement
(a two-stage cluster bootstrap; one run: its units), as a weight per unit. A ratio's replicate is then
(weights @ per-unit sums); a quantile's is read from (weights @ per-unit histograms) over at most
MAX_BINS equal-count bins of the arm's sorted values (exact at or below that many values, within
1/MAX_BINS of the mass above it). A run with more than MAX_UNITS_PER_RUN units has neighbouring units
merged (longer blocks are still independent). The percentile interval of a change is taken on the log of
the ratio, moved onto the reported change, and widened for few units to Student's t with units - 1
degrees of freedom: the bootstrap alone is too narrow when there are a handful of units.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

CONFIDENCE = 0.95
POWER = 0.80
RESAMPLES = 2000
SEED = 0
MAX_UNITS_PER_RUN = 100
MAX_BINS = 1024
MIN_UNITS = 3
"""Fewer independent units give no interval: with two, Student's t widens it thirteen-fold."""
POINT = "point"
MIN_BEYOND = 1
"""A quantile's interval needs at least this many whole requests of each arm beyond its position (a p90
eleven requests): read off the extreme request, resampled over a few units, its interval is too narrow (a
task's p90 over 8 requests, about one per arm and block pair, excluded 0 in 8.9% of simulated A/A
levels)."""

__all__ = [
    "BETTER", "CONFIDENCE", "INCONCLUSIVE", "POINT", "POWER", "RESAMPLES", "SAME", "UNKNOWN",
    "UNKNOWN_DIRECTION", "WORSE", "Crossing", "Interval", "Units", "around", "change_pct", "classify",
    "crossing", "quantile", "quantile_changes", "quantile_interval", "ratio_change", "ratio_interval",
    "p_beyond", "t_cdf", "t_quantile", "PAIRED_T", "BOOTSTRAP",
]


def change_pct(base: float | None, cand: float | None) -> float | None:
    """The candidate relative to the baseline in percent; None when either is missing or base <= 0."""
    if base is None or cand is None or base <= 0:
        return None
    return (cand - base) / base * 100.0


def t_cdf(x: float, df: int) -> float:
    """Student's t CDF (numpy has none; scipy is not a dependency): the density's integral by Simpson's
    rule; the normal's beyond 1000 degrees of freedom."""
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")
    if df > 1000:
        return statistics.NormalDist().cdf(x)
    if not math.isfinite(x):
        return 1.0 if x > 0 else 0.0
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    # x = sqrt(df) tan(theta) turns the density into norm cos^(df - 1) theta on a finite range, so the far
    # tail (a p-value of a change many standard errors out) integrates as accurately as the middle
    end = math.atan(abs(x) / math.sqrt(df))
    grid = np.linspace(0.0, end, 4001)
    dens = norm * np.cos(grid) ** (df - 1)
    simpson = (dens[0] + dens[-1] + 4 * dens[1:-1:2].sum() + 2 * dens[2:-1:2].sum()) * (end / 4000) / 3
    return 0.5 + simpson if x >= 0 else 0.5 - simpson


@functools.lru_cache(maxsize=512)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: t_cdf inverted by bisection; the normal's beyond 1000 degrees of freedom."""
    if df > 1000:
        return statistics.NormalDist().inv_cdf(p)
    if df < 1:
        raise ValueError("t needs at least one degree of freedom")

    def cdf(x: float) -> float:
        return t_cdf(x, df)

    target = max(p, 1 - p)
    lo, hi = 0.0, 1.0
    while cdf(hi) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < target else (lo, mid)
    x = (lo + hi) / 2
    return x if p >= 0.5 else -x


def _z(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def widening(df: int, confidence: float = CONFIDENCE) -> float:
    """How much wider than the bootstrap's percentile interval the interval is made with `df` degrees of
    freedom: Student's t over the normal's quantile. (The bootstrap's own shrinkage, sqrt(n / (n - 1)) for
    a mean, is left out: on simulated block data the percentile interval of a pooled quantile already
    covered 95% from ten units on, and 80% at three; t / z brings three to 97%.)"""
    tail = (1 + confidence) / 2
    return t_quantile(tail, df) / _z(tail)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval; lo/hi are None when it cannot be computed.

    For a change the unit is percent (candidate vs baseline); `units` counts the independent units it
    was resampled over, `unit` names them, `df` is units - 1 (what the interval was widened for)."""

    estimate: float | None
    lo: float | None
    hi: float | None
    confidence: float = CONFIDENCE
    method: str = ""
    units: int = 0
    unit: str = ""
    df: int | None = None

    @property
    def measured(self) -> bool:
        return self.lo is not None and self.hi is not None

    def as_list(self) -> list[float] | None:
        return [self.lo, self.hi] if self.measured else None

    @staticmethod
    def point(estimate: float | None) -> Interval:
        """An estimate without spread (a hand-built comparison): the interval is the point itself."""
        return Interval(estimate, estimate, estimate, method=POINT)

    def mde_pct(self, band_pct: float, power: float = POWER) -> float | None:
        """The smallest true change (in %, either way) whose interval would clear the noise band with
        `power`: the band plus d standard errors, the standard error read off this interval's width
        (half-width = t x SE, in log ratio). d solves the noncentral t's power, P(T'(d) > t) = power, by
        its normal approximation: d = t + z_power sqrt(1 + t^2 / (2 df)). (t + t_power, used before, left
        the standard error's own uncertainty out: at 6 block pairs it gave 65-76% power, not 80%.) None
        without an interval over units."""
        if not self.measured or self.df is None or self.method == POINT:
            return None
        if self.lo <= -100 or self.hi <= -100:
            return None
        t_conf = t_quantile((1 + self.confidence) / 2, self.df)
        se = (math.log1p(self.hi / 100) - math.log1p(self.lo / 100)) / 2 / t_conf
        d = t_conf + _z(power) * math.sqrt(1 + t_conf ** 2 / (2 * self.df))
        return math.expm1(math.log1p(band_pct / 100) + d * se) * 100


UNKNOWN = Interval(None, None, None, method="not measured")


def p_beyond(ci: Interval, bound_pct: float, *, above: bool) -> float | None:
    """The p-value of the claim that the true change lies beyond `bound_pct` (above it, or below), by
    inverting the interval: its estimate and the half-width on the bound's side, in log ratio, read as
    Student's t with the interval's degrees of freedom. Two-sided scale: the claim's p is at or below
    1 - confidence exactly when that end of the interval clears the bound, so a p-value and the
    interval never disagree. A point (no spread): 0 beyond the bound, else 1; None without an estimate."""
    if ci.estimate is None or not ci.measured or ci.estimate <= -100 or bound_pct <= -100:
        return None
    center, bound = math.log1p(ci.estimate / 100), math.log1p(bound_pct / 100)
    beyond = center > bound if above else center < bound
    if ci.method == POINT or ci.df is None or ci.lo <= -100:
        return 0.0 if beyond else 1.0
    near, far = (ci.lo, ci.hi) if above else (ci.hi, ci.lo)
    # a bootstrap of a quantile over a few values per unit can pile every replicate on one side of the
    # estimate: an end at the estimate is no certainty, so the other side's width stands in for it
    half = abs(center - math.log1p(near / 100)) or abs(center - math.log1p(far / 100))
    if half == 0:
        return 0.0 if beyond else 1.0
    t = (center - bound if above else bound - center) / (half / t_quantile((1 + ci.confidence) / 2, ci.df))
    return float(min(1.0, 2 * (1 - t_cdf(t, ci.df))))


@dataclass(frozen=True, eq=False)
class Units:
    """The independent units of one arm, or of both arms when paired: each unit's run (its outer
    cluster; all 0 without repeats), in time order within each run; `name` says what a unit is."""

    runs: np.ndarray
    name: str = "units"

    @staticmethod
    def single(count: int, name: str = "units") -> Units:
        return Units(np.zeros(count, dtype=np.int64), name)

    @property
    def count(self) -> int:
        return len(self.runs)

    def capped(self) -> tuple[Units, np.ndarray]:
        """At most MAX_UNITS_PER_RUN units per run (neighbours merged) and the old -> new unit map."""
        runs = np.asarray(self.runs)
        new = np.empty(len(runs), dtype=np.int64)
        out_runs: list[int] = []
        for run in dict.fromkeys(runs.tolist()):
            idx = np.flatnonzero(runs == run)
            n = len(idx)
            k = min(n, MAX_UNITS_PER_RUN)
            new[idx] = len(out_runs) + (np.arange(n) * k) // n
            out_runs += [run] * k
        return Units(np.array(out_runs, dtype=np.int64), self.name), new

    def weights(self, rng: np.random.Generator, b: int) -> np.ndarray:
        """(b, units) bootstrap weights: runs drawn with replacement, then units within each drawn run."""
        _, run_of = np.unique(self.runs, return_inverse=True)
        members = [np.flatnonzero(run_of == r) for r in range(run_of.max() + 1)]
        if len(members) == 1:
            n = len(members[0])
            return rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64)
        picks = rng.multinomial(len(members), np.full(len(members), 1.0 / len(members)), size=b)
        out = np.zeros((b, len(self.runs)))
        for r, idx in enumerate(members):
            out[:, idx] = rng.multinomial(picks[:, r] * len(idx), np.full(len(idx), 1.0 / len(idx)))
        return out


def _clean(values: ArrayLike, codes: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(values, dtype=np.float64).ravel()
    c = np.asarray(codes, dtype=np.int64).ravel()
    if len(c) != len(x):
        raise ValueError(f"{len(c)} unit labels for {len(x)} values")
    keep = np.isfinite(x)
    return x[keep], c[keep]


def _quantile_sorted(xs: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of sorted values."""
    h = (len(xs) - 1) * q
    j = int(np.floor(h))
    if j + 1 >= len(xs):
        return float(xs[-1])
    return float(xs[j] + (h - j) * (xs[j + 1] - xs[j]))


def quantile(values: ArrayLike, q: float) -> float | None:
    """numpy's linear quantile of the finite values; None when there are none."""
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    return _quantile_sorted(np.sort(x), q) if len(x) else None


def _from_histogram(counts: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: float) -> np.ndarray:
    """Per row of (replicates, bins) weighted counts: the q quantile, linear within the bin it falls in."""
    cum = np.cumsum(counts, axis=1)
    total = cum[:, -1]
    target = q * total
    k = np.minimum((cum < target[:, None]).sum(axis=1), counts.shape[1] - 1)
    rows = np.arange(len(counts))
    inside = counts[rows, k]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(inside > 0, (target - (cum[rows, k] - inside)) / inside, 0.0)
        out = lo[k] + np.clip(frac, 0.0, 1.0) * (hi[k] - lo[k])
    return np.where(total > 0, out, np.nan)


def _quantile_replicates(values: np.ndarray, codes: np.ndarray, weights: np.ndarray,
                         qs: Sequence[float]) -> tuple[np.ndarray, list[float], np.ndarray]:
    """Per quantile q: the pooled linear quantile, the statistic the replicates compute on the data as it
    is, and (b, len(qs)) replicates. One sort and one (weights @ histograms) serve every q."""
    order = np.argsort(values)
    xs, us = values[order], codes[order]
    n, units = len(xs), weights.shape[1]
    bins = min(n, MAX_BINS)
    bin_of = (np.arange(n) * bins) // n
    edges = np.searchsorted(bin_of, np.arange(bins + 1), side="left")
    hist = np.bincount(us * bins + bin_of, minlength=units * bins).reshape(units, bins).astype(np.float64)
    lo, hi = xs[edges[:-1]], xs[edges[1:] - 1]
    counts = weights @ hist
    whole = hist.sum(axis=0)[None, :]
    points = np.array([_quantile_sorted(xs, q) for q in qs])
    own = [float(_from_histogram(whole, lo, hi, q)[0]) for q in qs]
    return points, own, np.column_stack([_from_histogram(counts, lo, hi, q) for q in qs])


def _ratio_replicates(num: np.ndarray, den: np.ndarray, codes: np.ndarray,
                      weights: np.ndarray) -> tuple[float, np.ndarray]:
    units = weights.shape[1]
    sn = np.bincount(codes, num, minlength=units)
    sd = np.bincount(codes, den, minlength=units)
    with np.errstate(divide="ignore", invalid="ignore"):
        own = sn.sum() / sd.sum() if sd.sum() > 0 else float("nan")
        return float(own), (weights @ sn) / (weights @ sd)


def _bounds(replicates: np.ndarray, confidence: float) -> tuple[float, float] | None:
    finite = replicates[np.isfinite(replicates)]
    if len(finite) < len(replicates) * 0.9:
        return None
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _widened(point: float, bounds: tuple[float, float], shift: float, df: int,
             confidence: float) -> tuple[float, float]:
    """The percentile bounds moved by `shift` (onto the reported point) and widened around it."""
    f = widening(df, confidence)
    lo, hi = bounds[0] + shift, bounds[1] + shift
    return point - f * max(point - lo, 0.0), point + f * max(hi - point, 0.0)


def _capped(base: Units, cand: Units, paired: bool) -> tuple[Units, np.ndarray, Units, np.ndarray]:
    """Both arms' units capped, with each arm's old -> new unit map (one map when paired)."""
    base_c, remap_b = base.capped()
    cand_c, remap_c = (base_c, remap_b) if paired else cand.capped()
    return base_c, remap_b, cand_c, remap_c


def around(estimate: float | None, lo: float, hi: float) -> tuple[float, float]:
    """Bounds that hold their estimate: moved onto and off the log scale, a bound the width of the
    estimate's float error away can land on its wrong side (2e-14 past it), which an error bar refuses."""
    if estimate is None or not math.isfinite(estimate):
        return lo, hi
    return min(lo, estimate), max(hi, estimate)


def _change_interval(pb: float, pc: float, rb: np.ndarray, rc: np.ndarray, point_change: float | None,
                     units: int, df: int, name: str, method: str, confidence: float) -> Interval:
    own = math.log(pc / pb) if pb > 0 and pc > 0 else None
    point = (math.log1p(point_change / 100) if point_change is not None and point_change > -100 else own)
    estimate = point_change if point_change is not None else (None if own is None else math.expm1(own) * 100)
    if own is None or point is None or df < MIN_UNITS - 1:
        return Interval(estimate, None, None, confidence,
                        "too few units" if df < MIN_UNITS - 1 else "baseline is zero", units, name, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(rc / rb)
    logs[~np.isfinite(logs)] = np.nan
    bounds = _bounds(logs, confidence)
    if bounds is None:
        return Interval(estimate, None, None, confidence, "unstable", units, name, df)
    lo, hi = _widened(point, bounds, point - own, df, confidence)
    return Interval(estimate, *around(estimate, math.expm1(lo) * 100, math.expm1(hi) * 100), confidence,
                    method, units, name, df)


def _draws(base: Units, cand: Units, paired: bool, seed: int, b: int):
    rng = np.random.default_rng(seed)
    wb = base.weights(rng, b)
    return wb, (wb if paired else cand.weights(rng, b))


def _df(base: Units, cand: Units, paired: bool) -> int:
    return (base.count if paired else min(base.count, cand.count)) - 1


def quantile_changes(base_values: ArrayLike, base_units: ArrayLike, cand_values: ArrayLike,
                     cand_units: ArrayLike, qs: Sequence[float], base: Units, cand: Units | None = None, *,
                     point_changes: Sequence[float | None] | None = None, confidence: float = CONFIDENCE,
                     resamples: int = RESAMPLES, seed: int = SEED) -> list[Interval]:
    """Per quantile q: the % change of the pooled per-request quantile from baseline to candidate.
    `*_units` label each value with its unit in `base` (and in `cand`; None: paired, both arms' labels
    index `base`). `point_changes`: the changes the report shows, if computed another way (repeats)."""
    paired = cand is None
    cand = base if paired else cand
    xb, cb = _clean(base_values, base_units)
    xc, cc = _clean(cand_values, cand_units)
    given = list(point_changes) if point_changes is not None else [None] * len(qs)
    if len(xb) < 2 or len(xc) < 2:
        return [Interval(p, None, None, confidence, "too few requests", 0, base.name) for p in given]
    base_c, remap_b, cand_c, remap_c = _capped(base, cand, paired)
    wb, wc = _draws(base_c, cand_c, paired, seed, resamples)
    ptb, ownb, rb = _quantile_replicates(xb, remap_b[cb], wb, qs)
    ptc, ownc, rc = _quantile_replicates(xc, remap_c[cc], wc, qs)
    units, df, method = base_c.count + (0 if paired else cand_c.count), _df(base_c, cand_c, paired), \
        _method(base, paired)
    fewest = min(len(xb), len(xc))
    return [_change_interval(ownb[i], ownc[i], rb[:, i], rc[:, i],
                             change_pct(ptb[i], ptc[i]) if point is None else point, units, df, base.name,
                             method, confidence)
            if (fewest - 1) * min(q, 1 - q) >= MIN_BEYOND - 1e-9 else
            Interval(change_pct(ptb[i], ptc[i]) if point is None else point, None, None, confidence,
                     f"too few requests for a p{q * 100:g} ({fewest})", units, base.name, None)
            for i, (q, point) in enumerate(zip(qs, given, strict=True))]


PAIRED_T = "paired t"
BOOTSTRAP = "bootstrap"


def ratio_change(base_num: ArrayLike, base_den: ArrayLike, cand_num: ArrayLike, cand_den: ArrayLike,
                 base: Units, cand: Units | None = None, *, point_change: float | None = None,
                 confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED,
                 method: str = PAIRED_T) -> Interval:
    """The % change of sum(num) / sum(den) from baseline to candidate, from per-unit sums (one entry per
    unit of `base`, and of `cand` unless paired). Paired units of one run get a paired t on the units'
    log ratios (the bootstrap's spread shrinks by sqrt((n - 1) / n), and at 6 block pairs its interval
    covered 88-94% under drift and an on/off neighbour: benchmarks/coverage.py); repeats, unpaired arms,
    a unit without tokens or `method=BOOTSTRAP`, the cluster bootstrap."""
    paired = cand is None
    cand = base if paired else cand
    nb, db = (np.asarray(a, dtype=np.float64) for a in (base_num, base_den))
    nc, dc = (np.asarray(a, dtype=np.float64) for a in (cand_num, cand_den))
    if len(nb) != base.count or len(nc) != cand.count:
        raise ValueError("one sum per unit")
    base_c, ib, cand_c, ic = _capped(base, cand, paired)
    if (method == PAIRED_T and paired and len(np.unique(base.runs)) == 1
            and (found := _paired_t(nb, db, nc, dc, ib, base_c.count, point_change, base.name,
                                    confidence)) is not None):
        return found
    wb, wc = _draws(base_c, cand_c, paired, seed, resamples)
    pb, rb = _ratio_replicates(np.nan_to_num(nb), np.nan_to_num(db), ib, wb)
    pc, rc = _ratio_replicates(np.nan_to_num(nc), np.nan_to_num(dc), ic, wc)
    if point_change is None and pb > 0 and math.isfinite(pc):
        point_change = (pc / pb - 1) * 100
    return _change_interval(pb, pc, rb, rc, point_change, base_c.count + (0 if paired else cand_c.count),
                            _df(base_c, cand_c, paired), base.name, _method(base, paired), confidence)


def _paired_t(nb: np.ndarray, db: np.ndarray, nc: np.ndarray, dc: np.ndarray, unit_of: np.ndarray,
              units: int, point_change: float | None, name: str, confidence: float) -> Interval | None:
    """Student's t on the per-unit log ratios (candidate's rate over the baseline's), centred on the
    reported change (the ratio of sums); None when a unit has no rate on either arm or too few units."""
    sums = [np.bincount(unit_of, np.nan_to_num(a), minlength=units) for a in (nb, db, nc, dc)]
    if units < MIN_UNITS or any((a <= 0).any() for a in sums):
        return None
    sb, tb, sc, tc = sums
    logs = np.log((sc / tc) / (sb / tb))
    own = math.log((sc.sum() / tc.sum()) / (sb.sum() / tb.sum()))
    point = math.log1p(point_change / 100) if point_change is not None and point_change > -100 else own
    df = units - 1
    half = t_quantile((1 + confidence) / 2, df) * float(np.std(logs, ddof=1)) / math.sqrt(units)
    estimate = point_change if point_change is not None else math.expm1(own) * 100
    lo, hi = around(estimate, math.expm1(point - half) * 100, math.expm1(point + half) * 100)
    return Interval(estimate, lo, hi, confidence, f"{PAIRED_T} over {name}", units, name, df)


def _method(units: Units, paired: bool) -> str:
    how = "paired " if paired else ""
    runs = len(np.unique(units.runs))
    return f"{how}bootstrap over {units.name}" + (f" within {runs} runs" if runs > 1 else "")


def _one_arm(point: float, own: float, reps: np.ndarray, units: Units, confidence: float,
             clip: tuple[float, float] | None = None) -> Interval:
    df = units.count - 1
    if df < MIN_UNITS - 1:
        return Interval(point, None, None, confidence, "too few units", units.count, units.name, None)
    bounds = _bounds(reps, confidence)
    if bounds is None:
        return Interval(point, None, None, confidence, "unstable", units.count, units.name, df)
    lo, hi = _widened(point, bounds, point - own, df, confidence)
    if clip is not None:
        lo, hi = max(lo, clip[0]), min(hi, clip[1])
    lo, hi = around(point, lo, hi)
    return Interval(point, lo, hi, confidence, _method(units, False), units.count, units.name, df)


def quantile_interval(values: ArrayLike, units_of: ArrayLike, q: float, units: Units, *,
                      confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                      seed: int = SEED) -> Interval:
    """One arm's pooled quantile q with its interval over `units`."""
    x, c = _clean(values, units_of)
    if len(x) < 2:
        return Interval(float(x[0]) if len(x) else None, None, None, confidence, "too few values", len(x))
    capped, remap = units.capped()
    points, own, reps = _quantile_replicates(x, remap[c], capped.weights(np.random.default_rng(seed),
                                                                          resamples), (q,))
    return _one_arm(float(points[0]), own[0], reps[:, 0], capped, confidence)


def ratio_interval(num: ArrayLike, den: ArrayLike, units: Units, *, point: float | None = None,
                   clip: tuple[float, float] | None = None, confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """sum(num) / sum(den) over per-unit sums with its interval, moved onto `point` when given (a rate
    measured another way). Acceptance: (accepted, drafted) per prompt or per scrape interval; the tokens
    inside a unit are never resampled one by one."""
    n, d = np.nan_to_num(np.asarray(num, dtype=np.float64)), np.nan_to_num(np.asarray(den, dtype=np.float64))
    if len(n) != units.count:
        raise ValueError("one sum per unit")
    if not len(n) or d.sum() <= 0:
        return Interval(point, None, None, confidence, "no denominator", len(n), units.name)
    capped, remap = units.capped()
    own, reps = _ratio_replicates(n, d, remap, capped.weights(np.random.default_rng(seed), resamples))
    return _one_arm(own if point is None else point, own, reps, capped, confidence, clip)


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
