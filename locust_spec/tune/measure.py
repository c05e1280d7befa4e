"""Read an arm's Locust runs into per-level samples of the objective over their blocks of time (thin I/O
over the analysis readers: analysis/levels.py cuts each level into the design's blocks)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from locust_spec.analysis.levels import RunLevel, level_batch, own_windows, run_levels
from locust_spec.analysis.model import Level
from locust_spec.analysis.runs import RunData, read_run
from locust_spec.analysis.tasks import task_run
from locust_spec.core.slo import Slo
from locust_spec.metrics import batch
from locust_spec.tune import choose
from locust_spec.tune.sample import ArmSample


def _unit_key(run_index: int, level: RunLevel, group: tuple[int, int]) -> tuple:
    """(clock, level index, group) for a run on a shared clock, which pairs it with the arms beside it;
    (None, run, level, block) otherwise."""
    design = level.design
    if design is not None and design.blocked and design.clock_unix_s is not None:
        return (design.clock_unix_s, *group)
    return (None, run_index, level.users, *group)


def _part(objective: str, level: RunLevel,
          per_stream: bool = False) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Per block the amount and seconds of a rate, or per request the TPOT and its block; `per_stream`,
    a rate's seconds are its requests' own (a task's). Goodput counts the requests spec-verdict's rows call
    good (run_levels with the SLO: core/slo.py), so one run has one goodput in both commands."""
    s = level.samples
    blocks = s.blocks
    n = len(blocks.groups)
    own_s = np.bincount(s.block, np.nan_to_num(s.e2e_s), minlength=n) if per_stream else blocks.window_s
    if objective == "throughput":
        tokens = np.bincount(s.block, s.output_tokens, minlength=n) if per_stream else blocks.tokens
        return tokens, own_s, None
    if objective == "tpot":
        keep = np.isfinite(s.tpot_ms)
        return s.tpot_ms[keep], None, s.block[keep]
    if objective == "goodput":
        if s.good is None:
            raise ValueError("the goodput objective needs an SLO")
        return np.bincount(s.block[s.good], minlength=n).astype(np.float64), own_s, None
    raise ValueError(f"unknown objective {objective!r} ({', '.join(choose.OBJECTIVES)})")


def _held(level: RunLevel, part: tuple[np.ndarray, np.ndarray | None, np.ndarray | None]
          ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]]:
    """A task's blocks that hold any of its requests, and its part on those alone: an empty block is no
    evidence, and counted as a unit it would narrow the interval (as levels.with_requests)."""
    s = level.samples
    held = np.bincount(s.block, minlength=len(s.blocks.groups)) > 0
    values, seconds, unit_of = part
    new = np.cumsum(held) - 1
    if unit_of is not None:
        return held, (values, None, new[unit_of])
    return held, (values[held], seconds[held], None)


def pooled(k: int, users: Level, objective: str,
           parts: Sequence[tuple[int, RunLevel, float | None]], per_stream: bool = False) -> ArmSample:
    """Levels of one arm (its repeats; every level of a swing run) as one sample: units keyed so that arms
    on one clock pair; batch the window-weighted mean of the levels that had one. `per_stream`: a task's
    (its rates per stream, over the blocks holding its requests)."""
    values, seconds, unit_of, keys, runs = [], [], [], [], []
    weighted = []
    for run_index, level, running in parts:
        groups = level.samples.blocks.groups
        part = _part(objective, level, per_stream)
        if per_stream:
            held, part = _held(level, part)
            groups = tuple(g for g, h in zip(groups, held, strict=True) if h)
            if not groups:
                continue
        v, sec, of = part
        offset = len(keys)
        values.append(v)
        if sec is not None:
            seconds.append(sec)
        if of is not None:
            unit_of.append(of + offset)
        level_keys = [_unit_key(run_index, level, g) for g in groups]
        keys += level_keys
        runs += [level_keys[0][0] if level_keys[0][0] is not None else run_index] * len(level_keys)
        if running is not None:
            weighted.append((running, float(level.samples.blocks.window_s.sum())))
    if not keys:  # a task with no request in any run at this level
        return ArmSample(k, users, np.empty(0), None if objective == "tpot" else np.empty(0),
                      np.empty(0, dtype=np.int64) if objective == "tpot" else None, (),
                      np.empty(0, dtype=np.int64), 0, None)
    total = sum(w for _, w in weighted)
    mean_batch = sum(b * w for b, w in weighted) / total if weighted and total > 0 else None
    run_codes = np.unique(np.array([str(r) for r in runs]), return_inverse=True)[1]
    return ArmSample(k, users, np.concatenate(values), np.concatenate(seconds) if seconds else None,
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


def level_samples(prefixes: Sequence[Path], k: int, objective: str,
                  slo: Slo | None) -> dict[Level, ArmSample]:
    """Per level (users, or a rate on an open-loop sweep): the arm's measured requests over all its runs,
    and the server's batch there."""
    return task_samples(prefixes, k, objective, slo, (None,))[None]


def task_samples(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None,
                 tasks: Sequence[str | None]) -> dict[str | None, dict[Level, ArmSample]]:
    """level_samples per prompt class (None: all of them), each run read once. A task's rate is per stream,
    its requests' amount over their own seconds (over the level's windows it would rise whenever the other
    tasks got faster, as analysis/tasks.py), over the blocks that hold its requests; its batch is the
    level's."""
    parts: dict[str | None, dict[Level, list]] = {task: {} for task in tasks}
    for i, prefix in enumerate(prefixes):
        run = read_run(prefix)
        levels = run_levels(run, slo)
        running = {users: _running(run, level) for users, level in levels.items()}
        for task in tasks:
            found = levels if task is None else run_levels(task_run(run, task), slo)
            for users, level in found.items():
                parts[task].setdefault(users, []).append((i, level, running.get(users)))
    return {task: {users: pooled(k, users, objective, p, per_stream=task is not None)
                   for users, p in by_level.items()} for task, by_level in parts.items()}


def whole_sample(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None) -> ArmSample | None:
    """Every measured level of the runs as one sample (a swing phase: its levels alternate, and the
    switches between them are what is measured)."""
    parts = []
    for i, prefix in enumerate(prefixes):
        run = read_run(prefix)
        parts += [(i, level, _running(run, level)) for level in run_levels(run, slo).values()]
    return pooled(k, 0, objective, parts) if parts else None
