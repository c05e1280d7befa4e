"""verdict.json: the Verdict as the documented JSON document (schema 7, docs/contracts.md)."""

from __future__ import annotations

import orjson

from .. import cost
from ..model import LevelVerdict, Rate, Verdict
from ..stats import POINT, Interval
from ..verdict import CHANGE_KEYS

SCHEMA = 7


def units_dict(ci: Interval | None) -> dict | None:
    """What an interval was resampled over: how many independent units, of what, and how."""
    if ci is None or ci.method == POINT or not ci.measured:
        return None
    return {"count": ci.units, "unit": ci.unit, "method": ci.method}


def metric_dict(lv: LevelVerdict, key: str) -> dict:
    change = lv.changes.get(key)
    return {"baseline": getattr(lv.baseline, key), "candidate": getattr(lv.candidate, key),
            "change_pct": None if change is None else change.estimate,
            "ci95_pct": None if change is None or change.method == POINT else change.as_list(),
            "direction": lv.directions.get(key), "units": units_dict(change), **test_dict(lv, key)}


def test_dict(lv: LevelVerdict, key: str) -> dict:
    """The question the decision rule asked of this metric (schema 7): its role, raw and adjusted p-value
    (Holm over the levels, Benjamini-Hochberg q-value for a task), whether it is exploratory; a metric the
    rule asks nothing of has role null."""
    test = lv.tests.get(key, {})
    return {"role": test.get("role"), "p_value": test.get("p_value"), "p_adjusted": test.get("p_adjusted"),
            "exploratory": lv.exploratory}


def level_dict(lv: LevelVerdict) -> dict:
    ci = lv.acceptance_ci
    rate = isinstance(lv.users, Rate)
    arrivals = {"baseline": lv.baseline_arrivals.as_dict() if lv.baseline_arrivals else None,
                "candidate": lv.candidate_arrivals.as_dict() if lv.candidate_arrivals else None}
    return {
        "users": None if rate else lv.users,
        **({"rate": float(lv.users), "arrivals": arrivals} if rate else {}),
        "verdict": lv.verdict,
        "batch": {"baseline": lv.baseline_batch.as_dict() if lv.baseline_batch else None,
                  "candidate": lv.candidate_batch.as_dict() if lv.candidate_batch else None},
        "acceptance": lv.acceptance,
        "acceptance_ci95": ci.as_list() if ci is not None else None,
        "acceptance_units": units_dict(ci),
        "mean_acceptance_length": lv.mean_acceptance_length,
        "per_position": list(lv.per_position),
        "requests": {"baseline": lv.baseline.requests, "candidate": lv.candidate.requests},
        "failures": {"baseline": lv.baseline.failures, "candidate": lv.candidate.failures},
        "metrics": {key: metric_dict(lv, key) for key in CHANGE_KEYS
                    if getattr(lv.baseline, key) is not None or getattr(lv.candidate, key) is not None},
        "mde_pct": dict(lv.mde_pct),
        "under_powered": lv.power_note,
        "design": lv.design,
        "reasons": list(lv.reasons),
        "diagnoses": [d.as_dict() for d in lv.diagnoses],
        "answers": lv.answers.as_dict() if lv.answers is not None else None,
        **economy_dict(lv),
    }


def economy_dict(lv: LevelVerdict) -> dict:
    """Schema 5: cost and energy per arm with their change; null when not priced (--gpu-cost-per-hour) or
    not measured (no GPU power series in the runs)."""
    found = {v.key: v for v in lv.economy}
    return {key: found[key].as_dict() if key in found else None for key in cost.KEYS}


def to_dict(verdict: Verdict) -> dict:
    return {
        "schema": SCHEMA,
        "axis": verdict.axis,
        "verdict": verdict.verdict,
        "summary": verdict.summary,
        "comparison": "configurations" if verdict.configurations else "speculation",
        "differences": list(verdict.differences),
        "speculation": {r.arm: r.as_dict() for r in verdict.what_ran},
        "slo": verdict.slo.as_dict() if verdict.slo else None,
        "pricing": verdict.pricing.as_dict() if verdict.pricing else None,
        "power": {arm: source.as_dict() if (source := verdict.power.get(arm)) else None
                  for arm in ("baseline", "candidate")},
        "design": verdict.design.as_dict(),
        "decision_rule": verdict.rule.as_dict() if verdict.rule is not None else None,
        "levels": [level_dict(lv) for lv in verdict.levels],
        "crossover": {p.metric: p.as_dict(rate_axis=verdict.axis == "rate") for p in verdict.crossover},
        "diagnoses": [d.as_dict() for d in verdict.diagnoses],
        "warnings": list(verdict.warnings),
        "tasks": [{"task": t.task, "acceptance_measured": t.acceptance_measured,
                   "levels": [level_dict(lv) for lv in t.levels]} for t in verdict.tasks],
        "provenance": {arm: [p.as_dict() for p in runs]
                       for arm, runs in zip(("baseline", "candidate"), verdict.provenance, strict=True)},
    }


def _plain(value: object) -> float:
    """A Rate (a diagnosis's evidence may name levels) as the number it is."""
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def render(verdict: Verdict) -> str:
    return orjson.dumps(to_dict(verdict), option=orjson.OPT_INDENT_2, default=_plain).decode() + "\n"
