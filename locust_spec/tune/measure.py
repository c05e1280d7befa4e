"""Read an arm's Locust runs into per-level samples of the objective over their blocks of time (thin I/O
over the analysis readers: analysis/levels.py cuts each level into the design's blocks)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from locust_spec.analysis.levels import RunLevel, level_batch, own_windows, run_levels
from locust_spec.analysis.runs import RunData, read_run
from locust_spec.metrics import batch
from locust_spec.tune import choose
from locust_spec.tune.choose import Sample, Slo


def _unit_key(run_index: int, level: RunLevel, group: tuple[int, int]) -> tuple:
    """(clock, level index, group) for a run on a shared clock, which pairs it with the arms beside it;
    (None, run, level, block) otherwise."""
    design = level.design
    if design is not None and design.blocked and design.clock_unix_s is not None:
        return (design.clock_unix_s, *group)
    return (None, run_index, level.users, *group)


def _part(objective: str, slo: Slo | None, level: RunLevel) -> tuple[np.ndarray, np.ndarray | None,
                                                                     np.ndarray | None]:
    """Per block the amount and seconds of a rate, or per request the TPOT and its block."""
    s = level.samples
    blocks = s.blocks
    n = len(blocks.groups)
    if objective == "throughput":
        return blocks.tokens, blocks.window_s, None
    if objective == "tpot":
        keep = np.isfinite(s.tpot_ms)
        return s.tpot_ms[keep], None, s.block[keep]
    if objective == "goodput":
        ok = choose.good(np.ones(len(s.tpot_ms), dtype=bool), s.ttft_ms, s.tpot_ms, s.e2e_s * 1000.0, slo)
        return np.bincount(s.block[ok], minlength=n).astype(np.float64), blocks.window_s, None
    raise ValueError(f"unknown objective {objective!r} ({', '.join(choose.OBJECTIVES)})")


def pooled(k: int, users: int, objective: str, slo: Slo | None,
           parts: Sequence[tuple[int, RunLevel, float | None]]) -> Sample:
    """Levels of one arm (its repeats; every level of a swing run) as one sample: units keyed so that arms
    on one clock pair; batch the window-weighted mean of the levels that had one."""
    values, seconds, unit_of, keys, runs = [], [], [], [], []
    weighted = []
    for run_index, level, running in parts:
        v, sec, of = _part(objective, slo, level)
        offset = len(keys)
        values.append(v)
        if sec is not None:
            seconds.append(sec)
        if of is not None:
            unit_of.append(of + offset)
        level_keys = [_unit_key(run_index, level, g) for g in level.samples.blocks.groups]
        keys += level_keys
        runs += [level_keys[0][0] if level_keys[0][0] is not None else run_index] * len(level_keys)
        if running is not None:
            weighted.append((running, float(level.samples.blocks.window_s.sum())))
    total = sum(w for _, w in weighted)
    mean_batch = sum(b * w for b, w in weighted) / total if weighted and total > 0 else None
    run_codes = np.unique(np.array([str(r) for r in runs]), return_inverse=True)[1]
    return Sample(k, users, np.concatenate(values), np.concatenate(seconds) if seconds else None,
                  np.concatenate(unit_of) if unit_of else None, tuple(keys), run_codes,
                  sum(level.metrics.requests for _, level, _ in parts), mean_batch)


def _running(run: RunData, level: RunLevel) -> float | None:
    """The batch while the level's requests were being sent: from its first start to its last one (the
    last requests' ends run into the next level, whose load would count); interleaved, only over the arm's
    own blocks, as spec-verdict measures it (its server idles in the other arms')."""
    starts = run.requests["start_unix_s"].to_numpy()[level.samples.blocks.rows]
    if not len(starts) or not run.snapshots:
        return None
    if own_windows(level) is not None:
        found = level_batch(run, level)
        return None if found is None else found.size
    return batch.mean_running(run.snapshots, float(starts.min()), float(starts.max()))


def level_samples(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None) -> dict[int, Sample]:
    """Per level (users): the arm's measured requests over all its runs, and the server's batch there."""
    parts: dict[int, list] = {}
    for i, prefix in enumerate(prefixes):
        run = read_run(prefix)
        for users, level in run_levels(run).items():
            parts.setdefault(users, []).append((i, level, _running(run, level)))
    return {users: pooled(k, users, objective, slo, p) for users, p in parts.items()}


def whole_sample(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None) -> Sample | None:
    """Every measured level of the runs as one sample (a swing phase: its levels alternate, and the
    switches between them are what is measured)."""
    parts = []
    for i, prefix in enumerate(prefixes):
        run = read_run(prefix)
        parts += [(i, level, _running(run, level)) for level in run_levels(run).values()]
    return pooled(k, 0, objective, slo, parts) if parts else None
