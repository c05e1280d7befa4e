"""What a spec-tune run concluded, as one value every report format renders, and schedule.json."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from locust_spec.analysis.model import Pricing
from locust_spec.core.schedule import KEY, Built
from locust_spec.tune.choose import UNITS, Decision, Slo
from locust_spec.tune.confirm import Confirmation

SCHEMA = "locust-spec/tune/3"
SCHEDULE_SCHEMA = "locust-spec/tune-schedule/1"


TaskDecisions = tuple[tuple[str, tuple[Decision, ...]], ...]
"""Per prompt class, the k each level would choose for that task alone (per stream)."""


@dataclass(frozen=True)
class TuneResult:
    objective: str
    slo: Slo | None
    ks: tuple[int, ...]
    levels: tuple[int, ...]
    max_num_seqs: int
    decisions: tuple[Decision, ...]
    built: Built | None
    speculative_config: dict | None
    static_k: int | None
    confirmation: Confirmation | None
    notes: tuple[str, ...]
    tasks: TaskDecisions = ()
    pricing: Pricing | None = None
    """--gpu-cost-per-hour: every arm's cost per million output tokens is in its decision."""

    @property
    def unit(self) -> str:
        return UNITS[self.objective]

    @property
    def config_arg(self) -> str:
        """The ready command-line option for `vllm serve` (empty when the schedule is off everywhere)."""
        if self.speculative_config is None:
            return ""
        text = json.dumps(self.speculative_config, separators=(",", ":"))
        return "--speculative-config " + shlex.quote(text)

    def schedule_json(self) -> dict:
        return {
            "schema": SCHEDULE_SCHEMA,
            KEY: [list(e) for e in self.built.entries] if self.built else None,
            "num_speculative_tokens": (self.speculative_config or {}).get("num_speculative_tokens", 0),
            "speculative_config": self.speculative_config,
            "speculative_config_arg": self.config_arg,
            "thresholds_batch": list(self.built.thresholds) if self.built else [],
            "max_num_seqs": self.max_num_seqs,
            "objective": self.objective,
            "slo": self.slo.as_dict() if self.slo else None,
            "levels": [{"users": d.users, "batch": d.batch, "k": d.k, "reason": d.reason}
                       for d in self.decisions],
            "notes": list(self.notes) + list(self.built.notes if self.built else ()),
        }

    def as_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "objective": self.objective,
            "unit": self.unit,
            "slo": self.slo.as_dict() if self.slo else None,
            "ks": list(self.ks),
            "levels": list(self.levels),
            "schedule": self.schedule_json(),
            "decisions": [d.as_dict() for d in self.decisions],
            "static_k": self.static_k,
            "confirmation": self.confirmation.as_dict() if self.confirmation else None,
            "notes": list(self.notes),
            "tasks": [{"task": task, "decisions": [d.as_dict() for d in decisions]}
                      for task, decisions in self.tasks],
            "pricing": self.pricing.as_dict() if self.pricing else None,
        }
