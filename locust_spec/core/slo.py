"""The latency objective a request must meet to count as good (goodput), for spec-verdict and spec-tune
alike: one syntax, one rule per request, one treatment of a missing TPOT."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

METRICS = ("ttft", "tpot", "e2e")
_PART = re.compile(r"^(ttft|tpot|e2e)(_ms)?\s*[=:]\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ms|s)?$")
SYNTAX = "ttft=MS, tpot=MS, e2e=MS (or ttft_ms=MS ...; a value may end in ms or s), comma-separated"


@dataclass(frozen=True)
class Slo:
    """Per-request limits in milliseconds; None: no limit on that metric."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def to_dict(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}


def parse_slo(text: str) -> Slo:
    """`ttft=500,tpot=50` (ms), `ttft_ms=500,tpot_ms=50` (spec-verdict's older spelling), or with a unit
    `ttft=0.5s,e2e=20000ms`; ValueError naming the bad part (at most 40 characters of it)."""
    found: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = _PART.match(part.lower())
        if not m:
            raise ValueError(f"not an SLO part: {part[:40]!r} (use {SYNTAX})")
        name, ms_suffix, number, unit = m.groups()
        if ms_suffix and unit == "s":
            raise ValueError(f"{part[:40]!r}: {name}_ms is in milliseconds, not seconds")
        value = float(number) * (1000.0 if unit == "s" else 1.0)
        if not value > 0 or math.isinf(value):
            raise ValueError(f"{part[:40]!r}: a limit must be a positive number of milliseconds")
        key = f"{name}_ms"
        if key in found:
            raise ValueError(f"{name} is given twice")
        found[key] = value
    if not found:
        raise ValueError(f"an SLO needs at least one of {SYNTAX}")
    return Slo(**found)


def meets_slo(slo: Slo, ok: np.ndarray, ttft_ms: np.ndarray, tpot_ms: np.ndarray,
              e2e_ms: np.ndarray) -> np.ndarray:
    """Per request: it succeeded and is inside every limit the SLO sets.

    A missing TTFT or E2E (NaN) never meets its limit: the request has no first token or no end to judge.
    A missing TPOT meets any TPOT limit: a one-token answer has no time between tokens, so there is nothing
    to be late by, and its whole latency is already judged by the TTFT and E2E limits; failing it would
    make a short answer count against a deployment that served it fast (vLLM's benchmark_serving counts
    such a request's TPOT as 0 for goodput, the same rule)."""
    good = np.asarray(ok, dtype=bool).copy()
    for values, limit, missing_meets in ((ttft_ms, slo.ttft_ms, False), (tpot_ms, slo.tpot_ms, True),
                                         (e2e_ms, slo.e2e_ms, False)):
        if limit is not None:
            values = np.asarray(values, dtype=np.float64)
            good &= (values <= limit) | (np.isnan(values) & missing_meets)
    return good
