"""verdict.json: the Verdict as design.md's documented JSON document (schema 1)."""

from __future__ import annotations

import orjson
from locust_spec.analysis.model import LevelVerdict, Verdict

SCHEMA = 1


def level_dict(lv: LevelVerdict) -> dict:
    return {
        "users": lv.users,
        "verdict": lv.verdict,
        "acceptance": lv.acceptance,
        "mean_acceptance_length": lv.mean_acceptance_length,
        "per_position": list(lv.per_position),
        "baseline": lv.baseline.as_m(),
        "candidate": lv.candidate.as_m(),
        "change_pct": dict(lv.change_pct),
        "reasons": list(lv.reasons),
        "diagnoses": [d.as_dict() for d in lv.diagnoses],
    }


def to_dict(verdict: Verdict) -> dict:
    return {
        "schema": SCHEMA,
        "verdict": verdict.verdict,
        "summary": verdict.summary,
        "levels": [level_dict(lv) for lv in verdict.levels],
        "diagnoses": [d.as_dict() for d in verdict.diagnoses],
        "warnings": list(verdict.warnings),
    }


def render(verdict: Verdict) -> str:
    return orjson.dumps(to_dict(verdict), option=orjson.OPT_INDENT_2).decode() + "\n"
