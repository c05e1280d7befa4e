"""The objective per arm and level with its interval, and the k to deploy per level (pure).

Candidates tied with the best (the whole interval of their % change from it inside the +-TIE_BAND_PCT
band: shown equivalent, not merely not shown different) are equivalent as far as the measurement can
tell; the smallest k among them is chosen, since a shorter proposal costs less verification work when the
load shifts and is the safer default. An interval that reaches past the band is no tie: the best estimate
stands (on real vLLM, k=4 measured +17% at one user with an interval holding 0, and the tie then chosen,
k=0, served 71.8 tok/s against 219.2 for k=4).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from locust_spec.analysis.cost import cost_interval
from locust_spec.analysis.model import NO_DETECTION, Pricing, detectable
from locust_spec.tune import intervals
from locust_spec.tune.intervals import Interval

OBJECTIVES = ("throughput", "tpot", "goodput")
UNITS = {"throughput": "output tok/s", "tpot": "ms TPOT p50", "goodput": "good req/s"}
MIN_REQUESTS = 5
"""Fewer measured requests than this at a level: the arm is left out of that level's choice."""
TIE_BAND_PCT = 2.0
"""spec-verdict's noise band: a change within it is no change that matters."""
MDE_TARGET_PCT = 10.0
"""As spec-verdict's: a comparison that could not have shown a difference this large is under-powered."""


@dataclass(frozen=True)
class Slo:
    """Per-request limits for goodput, in ms; None = no limit on that metric."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def as_dict(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}


_SLO_PART = re.compile(r"^(ttft|tpot|e2e)\s*[=:]\s*(\d+(?:\.\d+)?)\s*(ms|s)?$")


def parse_slo(text: str) -> Slo:
    """`ttft=500,tpot=50` (ms) or with units `ttft=0.5s,tpot=50ms`; ValueError naming the bad part."""
    found: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = _SLO_PART.match(part.lower())
        if not m:
            raise ValueError(f"not an SLO part: {part!r} (use ttft=MS, tpot=MS, e2e=MS, comma-separated)")
        found[f"{m.group(1)}_ms"] = float(m.group(2)) * (1000.0 if m.group(3) == "s" else 1.0)
    if not found:
        raise ValueError("an SLO needs at least one of ttft=MS, tpot=MS, e2e=MS")
    return Slo(**found)


def higher_is_better(objective: str) -> bool:
    return objective != "tpot"


def good(ok: np.ndarray, ttft_ms: np.ndarray, tpot_ms: np.ndarray, e2e_ms: np.ndarray,
         slo: Slo | None) -> np.ndarray:
    """Per request: successful and inside every limit of the SLO (goodput counts these). A request with no
    TPOT (one token) meets any TPOT limit."""
    out = np.asarray(ok, dtype=bool).copy()
    if slo is not None:
        for values, limit, missing_ok in ((ttft_ms, slo.ttft_ms, False), (tpot_ms, slo.tpot_ms, True),
                                          (e2e_ms, slo.e2e_ms, False)):
            if limit is not None:
                out &= (values <= limit) | (np.isnan(values) & missing_ok)
    return out


@dataclass(frozen=True, eq=False)
class Sample:
    """One arm's objective at one level, repeats pooled, over its independent units (blocks of time).

    Rates (throughput, goodput): per unit the amount (tokens, good requests) and the seconds it measured;
    tpot: per request its TPOT and its unit. `keys` name each unit so that arms measured on one clock pair
    by it ((clock, level, group)); `runs` is each unit's run (repeats: the outer cluster)."""

    k: int
    users: int
    values: np.ndarray
    seconds: np.ndarray | None
    unit_of: np.ndarray | None
    keys: tuple[tuple, ...]
    runs: np.ndarray
    requests: int
    batch: float | None
    """Time-weighted mean of the server's running requests over the window (None: not scraped)."""


@dataclass(frozen=True)
class ArmResult:
    k: int
    users: int
    requests: int
    batch: float | None
    interval: Interval | None
    versus_best: Interval | None = None
    note: str = ""
    cost_per_mtok_usd: Interval | None = None
    """With --gpu-cost-per-hour: dollars per million output tokens at this k, from its throughput."""

    @property
    def mde_pct(self) -> float | None:
        """The smallest difference from the best k this comparison could have shown (80% power)."""
        return self.versus_best.mde_pct(0.0) if self.versus_best is not None else None

    def as_dict(self) -> dict:
        return {"k": self.k, "users": self.users, "requests": self.requests, "batch": self.batch,
                "interval": intervals.as_dict(self.interval),
                "versus_best_pct": intervals.as_dict(self.versus_best), "mde_pct": self.mde_pct,
                "units": self.versus_best.units if self.versus_best is not None else None,
                "note": self.note or None, "cost_per_mtok_usd": intervals.as_dict(self.cost_per_mtok_usd)}


@dataclass(frozen=True)
class Decision:
    """The k chosen at one level, why, and the evidence behind it."""

    users: int
    k: int | None
    best_k: int | None
    tied: tuple[int, ...]
    batch: float | None
    reason: str
    arms: tuple[ArmResult, ...] = field(default=())

    def arm(self, k: int) -> ArmResult | None:
        return next((a for a in self.arms if a.k == k), None)

    def as_dict(self) -> dict:
        return {"users": self.users, "k": self.k, "best_k": self.best_k, "tied_with_best": list(self.tied),
                "batch": self.batch, "reason": self.reason, "arms": [a.as_dict() for a in self.arms]}


def estimate(sample: Sample, objective: str) -> Interval | None:
    """The arm's objective with its interval; None with too few requests or no interval."""
    if sample.requests < MIN_REQUESTS or len(sample.values) < 2:
        return None
    iv = intervals.level(objective, sample)
    return iv if iv.measured else None


def compare(a: Sample, b: Sample, objective: str) -> Interval:
    """The % change of a's objective from b's, with its interval (paired by block group when both arms
    ran on one clock)."""
    return intervals.change(objective, b, a)


def better(objective: str, x: float, y: float) -> bool:
    return x > y if higher_is_better(objective) else x < y


def significantly_worse(change: Interval, objective: str) -> bool:
    """The change (arm vs reference) is on the bad side with its whole interval."""
    if not change.measured:
        return False
    return change.hi < 0 if higher_is_better(objective) else change.lo > 0


def equivalent(change: Interval) -> bool:
    """The change (arm vs the best) lies inside the tie band with its whole interval."""
    return change.measured and change.lo >= -TIE_BAND_PCT and change.hi <= TIE_BAND_PCT


def choose(samples: Sequence[Sample], objective: str) -> Decision:
    """The k to deploy at one level: the smallest k shown equivalent to the best estimate."""
    users = samples[0].users
    measured = [(s, estimate(s, objective)) for s in sorted(samples, key=lambda s: s.k)]
    usable = [(s, iv) for s, iv in measured if iv is not None]
    if not usable:
        arms = tuple(ArmResult(s.k, s.users, s.requests, s.batch, None, note="too few requests")
                     for s, _ in measured)
        return Decision(users, None, None, (), None, f"no arm had {MIN_REQUESTS} measured requests", arms)
    best, best_iv = usable[0]
    for s, iv in usable[1:]:
        if better(objective, iv.estimate, best_iv.estimate):
            best, best_iv = s, iv
    arms, tied, open_ = [], [], []
    for s, iv in measured:
        if iv is None:
            arms.append(ArmResult(s.k, s.users, s.requests, s.batch, None,
                                  note=f"fewer than {MIN_REQUESTS} measured requests"))
            continue
        diff = None if s is best else compare(s, best, objective)
        if diff is not None and equivalent(diff):
            tied.append(s.k)
        elif diff is not None and not significantly_worse(diff, objective):
            open_.append(s.k)
        arms.append(ArmResult(s.k, s.users, s.requests, s.batch, iv, diff))
    chosen = min([best.k, *tied])
    unit = UNITS[objective]
    if chosen == best.k:
        reason = f"k={best.k} is best ({best_iv.estimate:.4g} {unit})"
        reason += (f"; k={', '.join(map(str, sorted(tied)))} tied but larger" if tied
                   else "; every other k is significantly worse" if not open_ else "")
        if open_:
            reason += (f"; k={', '.join(map(str, sorted(open_)))} not shown within +-{TIE_BAND_PCT:g}% of it "
                       "(an interval reaching past the band is no tie), so the best estimate stands")
    else:
        reason = (f"k={best.k} has the best estimate ({best_iv.estimate:.4g} {unit}) but k={chosen} is "
                  f"tied with it (within +-{TIE_BAND_PCT:g}% by its whole interval) and smaller")
    weak = [(a.k, a.mde_pct) for a in arms if a.versus_best is not None
            and (a.mde_pct is None or a.mde_pct > MDE_TARGET_PCT)]
    shown = [f"k={k} " + ("no interval" if m is None else f"+-{m:.0f}%") for k, m in weak
             if m is None or detectable(m)]
    blind = [f"k={k}" for k, m in weak if m is not None and not detectable(m)]
    if shown:
        reason += (f"; under-powered: the smallest differences from k={best.k} this level could show are "
                   f"{', '.join(shown)} (above {MDE_TARGET_PCT:g}%)")
    if blind:
        lead = "; " if shown else "; under-powered: "
        reason += f"{lead}{', '.join(blind)} against k={best.k}: {NO_DETECTION}"
    if weak:
        reason += ": a tie may hide a real difference"
    chosen_sample = next(s for s, _ in usable if s.k == chosen)
    return Decision(users, chosen, best.k, tuple(sorted(tied)), chosen_sample.batch, reason, tuple(arms))


def best_static(decisions: Sequence[Decision], objective: str) -> int | None:
    """The single k that does best over the whole ladder: the highest mean of its objective relative to
    each level's best (so every level weighs the same); ties go to the smaller k."""
    scores: dict[int, list[float]] = {}
    for d in decisions:
        ests = {a.k: a.interval.estimate for a in d.arms if a.interval is not None}
        if not ests:
            continue
        top = max(ests.values()) if higher_is_better(objective) else min(ests.values())
        for k, e in ests.items():
            ratio = (e / top if higher_is_better(objective) else top / e) if top and e else 0.0
            scores.setdefault(k, []).append(ratio)
    levels = sum(1 for d in decisions if any(a.interval for a in d.arms))
    complete = {k: sum(r) / len(r) for k, r in scores.items() if len(r) == levels}
    if not complete:
        return None
    return min(complete, key=lambda k: (-round(complete[k], 9), k))


def priced(decisions: Sequence[Decision], throughput: dict[int, dict], pricing: Pricing
           ) -> tuple[Decision, ...]:
    """Every arm's cost per million output tokens at its level, from its throughput sample (`throughput`:
    per k, per level); k 0 holds the baseline's GPUs, every other k the candidate's (a draft model's)."""
    def arm(a: ArmResult, users: object) -> ArmResult:
        sample = throughput.get(a.k, {}).get(users)
        if sample is None:
            return a
        gpus = pricing.gpus_baseline if a.k == 0 else pricing.gpus_candidate
        return replace(a, cost_per_mtok_usd=cost_interval(pricing.usd_per_gpu_hour, gpus,
                                                          estimate(sample, "throughput")))

    return tuple(replace(d, arms=tuple(arm(a, d.users) for a in d.arms)) for d in decisions)
