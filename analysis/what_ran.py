"""What speculation each arm ran, as far as it is known (pure): the --speculative-config the runs were
told (PREFIX_run.json's `speculative_config`, schema 2), else what the server's counters show, marked as
inferred: whether it drafted at all, and k from the number of per-position acceptance series (vLLM
exposes one per draft position). vLLM does not serve its speculative config over HTTP, so without the
option the counters are all a reader of the report has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import SpecStats
from .provenance import Provenance


@dataclass(frozen=True)
class WhatRan:
    arm: str
    given: object | None
    """The config as given (parsed JSON, or its text; "none": no speculation); None: not given."""
    drafted: bool | None
    """Whether the server drafted any token in the measured levels; None: its counters were not read."""
    k: int | None
    """Draft positions, from the per-position series; None where the server shows none."""
    signs: tuple[str, ...] = ()
    """What the measurements say of how it drafted: 'synthetic acceptance' (the per-position counters'
    shape), 'answers changed' (the answer gate)."""

    def line(self) -> str:
        if self.drafted is None:
            inferred = "no /metrics read"
        elif not self.drafted:
            inferred = "drafted nothing"
        else:
            inferred = "drafted" + (f", k={self.k} (per-position counters)" if self.k else "")
        if self.signs:
            inferred += f" ({', '.join(self.signs)})"
        given = "not given" if self.given is None else str(self.given)
        return f"given: {given[:200]}; inferred: {inferred}"

    def as_dict(self) -> dict:
        return {"given": self.given, "inferred": {"drafted": self.drafted, "k": self.k,
                                                  "signs": list(self.signs)}}


def given_config(runs: Sequence[Provenance]) -> object | None:
    """The first run's --speculative-config as recorded (the gate refuses an arm whose runs differ)."""
    for p in runs:
        config = p._get("speculative_config", "config")
        if config is not None:
            return config
    return None


def infer(arm: str, runs: Sequence[Provenance], stats: Sequence[SpecStats], scraped: bool,
          signs: Sequence[str] = ()) -> WhatRan:
    """`stats`: the arm's counter windows over its measured levels; `scraped`: any of its runs read its
    server's /metrics (a server without speculation exposes no speculative counters: it drafted nothing);
    `signs`: what the verdict saw of it (SYNTHETIC, CHANGED)."""
    if not scraped and not stats:
        return WhatRan(arm, given_config(runs), None, None, tuple(signs))
    k = max((len(s.per_position) for s in stats), default=0)
    return WhatRan(arm, given_config(runs), any(s.draft_tokens > 0 for s in stats), k or None, tuple(signs))


SYNTHETIC, CHANGED = "synthetic acceptance", "answers changed"


def candidate_signs(levels: Sequence) -> tuple[str, ...]:
    """The signs the judged levels (model.LevelVerdict) show of the candidate's speculation."""
    synthetic = any(d.kind == "synthetic_acceptance" for lv in levels for d in lv.diagnoses)
    changed = any(lv.answers is not None and lv.answers.lossy for lv in levels)
    return tuple(sign for sign, seen in ((SYNTHETIC, synthetic), (CHANGED, changed)) if seen)
