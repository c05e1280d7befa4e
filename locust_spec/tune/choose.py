"""The objective per arm and level with its interval, and the k to deploy per level (pure).

Candidates statistically tied with the best (the interval of their % change from it holds 0)
are equivalent as far as the measurement can tell; the smallest k among them is chosen, since a shorter
proposal costs less verification work when the load shifts and is the safer default.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from locust_spec.tune import intervals
from locust_spec.tune.intervals import Interval

OBJECTIVES = ("throughput", "tpot", "goodput")
UNITS = {"throughput": "output tok/s", "tpot": "ms TPOT p50", "goodput": "good req/s"}
MIN_REQUESTS = 5
"""Fewer measured requests than this at a level: the arm is left out of that level's choice."""


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


def values(frame: pd.DataFrame, objective: str, slo: Slo | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-request values of a level's measured rows that the objective's statistic is taken over, and
    each one's request seconds (E2E).

    throughput: output tokens of every measured request (failed ones count what they delivered);
    tpot: TPOT of each successful request with one; goodput: 1 for a successful request inside the SLO.
    """
    ok = frame["error"].isna().to_numpy()
    seconds = frame["e2e_ms"].to_numpy(dtype=float) / 1000.0
    if objective == "throughput":
        return frame["output_tokens"].fillna(0.0).to_numpy(dtype=float), seconds
    if objective == "tpot":
        tpot = frame["tpot_ms"].to_numpy(dtype=float)
        keep = ok & ~np.isnan(tpot)
        return tpot[keep], seconds[keep]
    if objective == "goodput":
        good = ok.copy()
        if slo is not None:
            for column, limit in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)):
                if limit is not None:
                    # A request with no TPOT (one token) meets any TPOT limit.
                    col = frame[column].to_numpy(dtype=float)
                    good &= (col <= limit) | (np.isnan(col) & (column == "tpot_ms"))
        return good.astype(float), seconds
    raise ValueError(f"unknown objective {objective!r} ({', '.join(OBJECTIVES)})")


@dataclass(frozen=True, eq=False)
class Sample:
    """One arm's per-request values at one level, repeats pooled: each request's seconds (E2E), the
    measured windows' seconds (a rate is sum(values) / wall_s) and each request's run (a cluster when
    repeated)."""

    k: int
    users: int
    values: np.ndarray
    seconds: np.ndarray
    wall_s: float
    groups: np.ndarray | None
    requests: int
    batch: float | None
    """Time-weighted mean of the server's running requests over the window (None: not scraped)."""

    @property
    def parts(self) -> intervals.Parts:
        return self.values, self.seconds, self.wall_s, self.groups


@dataclass(frozen=True)
class ArmResult:
    k: int
    users: int
    requests: int
    batch: float | None
    interval: Interval | None
    versus_best: Interval | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return {"k": self.k, "users": self.users, "requests": self.requests, "batch": self.batch,
                "interval": intervals.as_dict(self.interval),
                "versus_best_pct": intervals.as_dict(self.versus_best), "note": self.note or None}


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
    if sample.requests < MIN_REQUESTS or len(sample.values) < 2 or sample.wall_s <= 0:
        return None
    iv = intervals.level(objective, sample.parts)
    return iv if iv.measured else None


def compare(a: Sample, b: Sample, objective: str) -> Interval:
    """The % change of a's objective from b's, with its interval."""
    return intervals.change(objective, b.parts, a.parts)


def better(objective: str, x: float, y: float) -> bool:
    return x > y if higher_is_better(objective) else x < y


def significantly_worse(change: Interval, objective: str) -> bool:
    """The change (arm vs reference) is on the bad side with its whole interval."""
    if not change.measured:
        return False
    return change.hi < 0 if higher_is_better(objective) else change.lo > 0


def choose(samples: Sequence[Sample], objective: str) -> Decision:
    """The k to deploy at one level: the smallest k not significantly worse than the best estimate."""
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
    arms, tied = [], []
    for s, iv in measured:
        if iv is None:
            arms.append(ArmResult(s.k, s.users, s.requests, s.batch, None,
                                  note=f"fewer than {MIN_REQUESTS} measured requests"))
            continue
        diff = None if s is best else compare(s, best, objective)
        if diff is not None and not significantly_worse(diff, objective):
            tied.append(s.k)
        arms.append(ArmResult(s.k, s.users, s.requests, s.batch, iv, diff))
    chosen = min([best.k, *tied])
    unit = UNITS[objective]
    if chosen == best.k:
        reason = f"k={best.k} is best ({best_iv.estimate:.4g} {unit})"
        reason += (f"; k={', '.join(map(str, sorted(tied)))} tied but larger" if tied
                   else "; every other k is significantly worse")
    else:
        reason = (f"k={best.k} has the best estimate ({best_iv.estimate:.4g} {unit}) but k={chosen} is "
                  f"statistically tied with it and smaller")
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
