"""The A/A self-test's report: the baseline compared with itself, so every 95% interval that excludes 0 is a
false claim and every ship, off or tradeoff word a false verdict, at every layer the verdict speaks at (its
levels, its per-task breakdown, its headline), each counted as a rate with its exact binomial interval;
and each level's smallest detectable change is this setup's noise floor (docs/verdict-method.md). Pure:
from a Verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from .model import NO_DETECTION, Level, LevelVerdict, Verdict, detectable, level_label
from .rule import NAMES
from .stats import CONFIDENCE
from .verdict import INCONCLUSIVE, SHIP, Thresholds, fmt_change

FILE = "aa.json"
SCHEMA = "locust-spec/aa/2"
EXPECTED_RATE = round(1 - CONFIDENCE, 10)
"""Identical arms: a 95% interval excludes 0 about this often."""
LEVELS, TASKS, HEADLINE = "levels", "tasks", "headline"


@dataclass(frozen=True)
class Quantity:
    """One compared quantity at one level (of the whole level, or of one task): its change, interval,
    direction against the band and smallest detectable change."""

    users: Level
    """The level: its users, or its rate (open loop)."""
    metric: str
    change: str
    direction: str
    mde_pct: float | None
    excludes_zero: bool = False
    task: str | None = None
    """None: the level's own quantity; else the task's (the exploratory layer)."""

    @property
    def claimed(self) -> bool:
        return self.excludes_zero


@dataclass(frozen=True)
class SelfTest:
    quantities: tuple[Quantity, ...]
    shipped: tuple[Level, ...]
    """Levels judged ship (the candidate speculating like the baseline): each one a false verdict."""
    words: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per layer (levels, tasks, headline): (ship/off/tradeoff words said, verdicts given)."""

    def layer(self, name: str) -> tuple[Quantity, ...]:
        return tuple(q for q in self.quantities if (q.task is None) == (name == LEVELS))

    @property
    def claims(self) -> int:
        return sum(q.claimed for q in self.quantities)

    @property
    def rate(self) -> float | None:
        return self.claims / len(self.quantities) if self.quantities else None

    def floor(self) -> dict[Level, dict[str, float | None]]:
        out: dict[Level, dict[str, float | None]] = {}
        for q in self.layer(LEVELS):
            out.setdefault(q.users, {})[q.metric] = q.mde_pct
        return out


def binomial_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Clopper-Pearson's exact interval of a rate seen k times in n (0 in 12: [0, 26.5%]), each end by
    bisection on a binomial tail."""
    if n <= 0:
        return 0.0, 1.0
    tail = (1 - confidence) / 2

    def at_most(p: float, j: int) -> float:
        """P(X <= j), summed in logs (math.comb of thousands overflows a float)."""
        if p <= 0.0 or p >= 1.0:
            return 1.0 if p <= 0.0 or j >= n else 0.0
        return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                            + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(j + 1))

    def solve(falls: float, j: int) -> float:
        """p where P(X <= j) (falling in p) reaches `falls`."""
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if at_most(mid, j) > falls else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(1 - tail, k - 1)  # P(X >= k) = tail
    high = 1.0 if k == n else solve(tail, k)  # P(X <= k) = tail
    return low, high


def compared_keys(verdict: Verdict) -> tuple[str, ...]:
    """Every quantity a verdict may decide on: TPOT p50 and p90, TTFT p50 and the throughput judged."""
    return ("tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms",
            "goodput_tok_s" if verdict.slo is not None else "output_tok_s")


def _quantities(lv: LevelVerdict, keys: Sequence[str], band: float, task: str | None) -> list[Quantity]:
    found = []
    for key in keys:
        change = lv.changes.get(key)
        if change is None or change.estimate is None:
            continue
        excludes = change.measured and not change.lo <= 0 <= change.hi
        mde = lv.mde_pct.get(key) if key in lv.mde_pct else change.mde_pct(band)
        found.append(Quantity(lv.users, key, fmt_change(change), lv.directions.get(key, "unknown"), mde,
                              excludes, task))
    return found


def self_test(verdict: Verdict) -> SelfTest:
    """Every compared quantity of every level and of every task's levels; the words at every layer."""
    keys = compared_keys(verdict)
    band = verdict.rule.noise_pct if verdict.rule is not None else Thresholds().noise_pct
    found = [q for lv in verdict.levels for q in _quantities(lv, keys, band, None)]
    found += [q for t in verdict.tasks for lv in t.levels for q in _quantities(lv, keys, band, t.task)]
    task_levels = [lv for t in verdict.tasks for lv in t.levels]
    words = {LEVELS: (sum(lv.verdict != INCONCLUSIVE for lv in verdict.levels), len(verdict.levels)),
             TASKS: (sum(lv.verdict != INCONCLUSIVE for lv in task_levels), len(task_levels)),
             HEADLINE: (int(verdict.verdict != INCONCLUSIVE), 1)}
    return SelfTest(tuple(found), tuple(lv.users for lv in verdict.levels if lv.verdict == SHIP), words)


def _rate(k: int, n: int) -> dict:
    low, high = binomial_interval(k, n)
    return {"count": k, "of": n, "rate": k / n if n else None, "ci95": [low, high]}


def as_dict(found: SelfTest) -> dict:
    by_layer = {name: _rate(sum(q.claimed for q in found.layer(name)), len(found.layer(name)))
                for name in (LEVELS, TASKS)}
    return {"schema": SCHEMA, "compared": len(found.quantities), "claimed": found.claims,
            "false_claim_rate": found.rate, "false_claim_rate_ci95": list(binomial_interval(
                found.claims, len(found.quantities))) if found.quantities else None,
            "expected_at_most": EXPECTED_RATE, "intervals_excluding_zero": by_layer,
            "words": {name: _rate(*counts) for name, counts in (found.words or {}).items()},
            "levels_shipped": [_number(u) for u in found.shipped],
            "noise_floor_pct": {str(u): v for u, v in found.floor().items()},
            "quantities": [{"users": _number(q.users), "task": q.task, "metric": q.metric, "change": q.change,
                            "direction": q.direction, "excludes_zero": q.excludes_zero, "mde_pct": q.mde_pct}
                           for q in found.quantities]}


def _number(level: Level) -> int | float:
    """A level as JSON holds it: users, or a rate's requests per second (a Rate is a float of its own)."""
    return level if isinstance(level, int) else float(level)


def render_json(found: SelfTest) -> str:
    return orjson.dumps(as_dict(found), option=orjson.OPT_INDENT_2).decode() + "\n"


def _floor_text(floor: dict[str, float | None]) -> str:
    return ", ".join(f"{NAMES[k]} {_floor(v)}" for k, v in floor.items())


def _floor(mde_pct: float | None) -> str:
    if mde_pct is None:
        return "no interval"
    return f"+-{mde_pct:.1f}%" if detectable(mde_pct) else NO_DETECTION


def _share(k: int, n: int) -> str:
    low, high = binomial_interval(k, n)
    return f"{k} of {n} ({k / n:.0%}, 95% CI {low:.0%}-{high:.0%})" if n else "none"


def render_text(found: SelfTest) -> str:
    """The A/A result: intervals excluding 0 and false words per layer with their rates' intervals, each
    level's noise floor, the claims."""
    n = len(found.quantities)
    lines = [f"A/A self-test: {found.claims} of {n} compared quantities claimed better or worse (their 95% "
             f"interval excludes 0; identical arms: about {EXPECTED_RATE:.0%} is expected)"]
    for name in (LEVELS, TASKS):
        layer = found.layer(name)
        if layer:
            excluded = sum(q.claimed for q in layer)
            lines.append(f"  {name}: intervals excluding 0 {_share(excluded, len(layer))}")
    for name, (said, of) in (found.words or {}).items():
        if of:
            lines.append(f"  {name}: ship/off/tradeoff words {_share(said, of)} (every one false here)")
    if found.shipped:
        lines.append(f"  ! judged ship at {', '.join(map(level_label, found.shipped))}: a false verdict")
    lines.append("Noise floor (smallest change each level could detect, 80% power):")
    lines += [f"  {level_label(users)}: {_floor_text(floor)}" for users, floor in found.floor().items()]
    claimed: Sequence[Quantity] = [q for q in found.quantities if q.claimed]
    if claimed:
        lines.append("False claims:")
        lines += [f"  {level_label(q.users)}{f' ({q.task})' if q.task else ''}, {NAMES[q.metric]}: "
                  f"{q.change} ({q.direction})" for q in claimed]
    if n and binomial_interval(found.claims, n)[0] > EXPECTED_RATE:
        lines.append("More claims than noise explains (the rate's interval lies above 5%): the setup drifts "
                     "or the arms differ; do not trust an A/B on it before finding out why (see "
                     "docs/verdict-method.md)")
    if n < 60:
        lines.append(f"One run of {n} quantities cannot pin a rate down (0 of 12 is 0-26%): repeat the "
                     "self-test (benchmarks/aa.py runs three)")
    return "\n".join(lines) + "\n"
