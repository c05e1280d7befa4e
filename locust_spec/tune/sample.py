"""One arm's objective at one level as spec-tune measures it: the input of its intervals (intervals.py) and
of the choice of k (choose.py), in a module of its own so that neither of those imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from locust_spec.analysis.model import Level


@dataclass(frozen=True, eq=False)
class ArmSample:
    """One arm's objective at one level, repeats pooled, over its independent units (blocks of time).

    Rates (throughput, goodput): per unit the amount (tokens, good requests) and the seconds it measured;
    tpot: per request its TPOT and its unit. `keys` name each unit so that arms measured on one clock pair
    by it ((clock, level, group)); `runs` is each unit's run (repeats: the outer cluster)."""

    k: int
    users: Level
    values: np.ndarray
    seconds: np.ndarray | None
    unit_of: np.ndarray | None
    keys: tuple[tuple, ...]
    runs: np.ndarray
    requests: int
    batch: float | None
    """Time-weighted mean of the server's running requests over the window (None: not scraped)."""
