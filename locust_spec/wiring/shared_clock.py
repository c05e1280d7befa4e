"""The arms' shared clock, from an arm's Locust process: say it is up, then take the zero spec-ab sets.

spec-ab starts every arm's Locust at once with `--blocks` (core/design.py), whose clock is only provisional
(READY_WAIT_S after the spawn). Each process, its imports done (Locust's `init`), creates its READY_FILE in
$LOCUST_SPEC_CLOCK_DIR; once every arm's is there, spec-ab writes CLOCK_FILE: READY_MARGIN_S from then.
The process waits for it and rewrites its `--blocks` with that zero before anything reads them, so its
ladder, its users' turns and its workers (Locust sends them the master's options) all run on it. A fixed
lead before the zero would be sized for the slowest start and paid by every session.
"""

from __future__ import annotations

import logging
import math
import time
from argparse import Namespace
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import orjson

from locust_spec.core.design import CLOCK_DIR_ENV, CLOCK_FILE, READY_FILE, Design, parse_blocks

logger = logging.getLogger(__name__)
POLL_S = 0.02


def take(options: Namespace, environ: Mapping[str, str]) -> None:
    """Under a blocked `--blocks` design started by spec-ab (the variable set, not a worker: a worker takes
    its master's options), say this process is up and wait for the shared zero; `options.blocks` then
    carries it. Without the variable, the design's own clock stands."""
    folder = environ.get(CLOCK_DIR_ENV)
    text = getattr(options, "blocks", "") or ""
    if not folder or not text or getattr(options, "worker", False):
        return
    design = parse_blocks(text)
    if design is None or not design.blocked:
        return
    zero = shared_zero(Path(folder), design)
    options.blocks = orjson.dumps(replace(design, clock_unix_s=zero).to_dict()).decode()


def shared_zero(folder: Path, design: Design) -> float:
    """Say slot `design.slot` is up and wait for spec-ab's zero, at most until the provisional one (then
    that: spec-ab, not hearing every arm, takes it too)."""
    provisional = design.clock_unix_s
    try:
        (folder / READY_FILE.format(slot=design.slot)).touch()
    except OSError as e:
        logger.warning("locust-spec: could not tell spec-ab this process is up (%s); the shared clock starts "
                       "at its latest", e.strerror or e)
    path = folder / CLOCK_FILE
    while time.time() < provisional:
        zero = _read(path)
        if zero is not None:
            return min(zero, provisional)
        time.sleep(POLL_S)
    return provisional


def _read(path: Path) -> float | None:
    try:
        zero = float(path.read_bytes())
    except (OSError, ValueError):  # not written yet (spec-ab replaces it whole)
        return None
    return zero if math.isfinite(zero) else None
