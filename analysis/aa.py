"""The A/A self-test's report: the baseline compared with itself, every compared quantity that came out
better or worse is a false claim, and each level's smallest detectable change is this setup's noise floor
(docs/verdict-method.md). Pure: from a Verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from .model import NO_DETECTION, Level, Verdict, detectable, level_label
from .stats import BETTER, WORSE
from .verdict import LABELS, LATENCY_KEYS, SHIP, fmt_change

FILE = "aa.json"
SCHEMA = "locust-spec/aa/1"
EXPECTED_RATE = 0.05
"""Identical arms: a 95% interval leaves the band (better or worse) about this often, at most."""


@dataclass(frozen=True)
class Quantity:
    """One compared quantity at one level: its change, interval, direction and smallest detectable change."""

    users: Level
    """The level: its users, or its rate (open loop)."""
    metric: str
    change: str
    direction: str
    mde_pct: float | None

    @property
    def claimed(self) -> bool:
        return self.direction in (BETTER, WORSE)


@dataclass(frozen=True)
class SelfTest:
    quantities: tuple[Quantity, ...]
    shipped: tuple[Level, ...]
    """Levels judged ship (the candidate speculating like the baseline): each one a false verdict."""

    @property
    def claims(self) -> int:
        return sum(q.claimed for q in self.quantities)

    @property
    def rate(self) -> float | None:
        return self.claims / len(self.quantities) if self.quantities else None

    def floor(self) -> dict[Level, dict[str, float | None]]:
        out: dict[Level, dict[str, float | None]] = {}
        for q in self.quantities:
            out.setdefault(q.users, {})[q.metric] = q.mde_pct
        return out


def deciding_keys(verdict: Verdict) -> tuple[str, ...]:
    return (*LATENCY_KEYS, "goodput_tok_s" if verdict.slo is not None else "output_tok_s")


def self_test(verdict: Verdict) -> SelfTest:
    """Every deciding quantity of every level (TPOT p50, TPOT p90, throughput)."""
    found = []
    for lv in verdict.levels:
        for key in deciding_keys(verdict):
            change = lv.changes.get(key)
            if change is None or change.estimate is None:
                continue
            found.append(Quantity(lv.users, key, fmt_change(change), lv.directions.get(key, "unknown"),
                                  lv.mde_pct.get(key)))
    return SelfTest(tuple(found), tuple(lv.users for lv in verdict.levels if lv.verdict == SHIP))


def as_dict(found: SelfTest) -> dict:
    return {"schema": SCHEMA, "compared": len(found.quantities), "claimed": found.claims,
            "false_claim_rate": found.rate, "expected_at_most": EXPECTED_RATE,
            "levels_shipped": [_number(u) for u in found.shipped],
            "noise_floor_pct": {str(u): v for u, v in found.floor().items()},
            "quantities": [{"users": _number(q.users), "metric": q.metric, "change": q.change,
                            "direction": q.direction, "mde_pct": q.mde_pct} for q in found.quantities]}


def _number(level: Level) -> int | float:
    """A level as JSON holds it: users, or a rate's requests per second (a Rate is a float of its own)."""
    return level if isinstance(level, int) else float(level)


def render_json(found: SelfTest) -> str:
    return orjson.dumps(as_dict(found), option=orjson.OPT_INDENT_2).decode() + "\n"


def _floor_text(floor: dict[str, float | None]) -> str:
    return ", ".join(f"{LABELS[k][0]} {_floor(v)}" for k, v in floor.items())


def _floor(mde_pct: float | None) -> str:
    if mde_pct is None:
        return "no interval"
    return f"+-{mde_pct:.1f}%" if detectable(mde_pct) else NO_DETECTION


def render_text(found: SelfTest) -> str:
    """The A/A result: false claims against the expected rate, each level's noise floor, the claims."""
    lines = [f"A/A self-test: {found.claims} of {len(found.quantities)} compared quantities claimed better "
             f"or worse (identical arms: about {EXPECTED_RATE:.0%} at most is expected)"]
    if found.shipped:
        lines.append(f"  ! judged ship at {', '.join(map(level_label, found.shipped))}: a false verdict")
    lines.append("Noise floor (smallest change each level could detect, 80% power):")
    lines += [f"  {level_label(users)}: {_floor_text(floor)}" for users, floor in found.floor().items()]
    claimed: Sequence[Quantity] = [q for q in found.quantities if q.claimed]
    if claimed:
        lines.append("False claims:")
        lines += [f"  {level_label(q.users)}, {LABELS[q.metric][0]}: {q.change} ({q.direction})"
                  for q in claimed]
    if found.claims > max(1, round(EXPECTED_RATE * len(found.quantities))):
        lines.append("More claims than noise explains: the setup drifts or the arms differ; do not trust an "
                     "A/B on it before finding out why (see docs/verdict-method.md)")
    return "\n".join(lines) + "\n"
