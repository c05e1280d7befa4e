"""Read an arm's Locust runs into per-level samples of the objective (thin I/O over the analysis readers)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from locust_spec.analysis.levels import level_keys, measured, run_levels
from locust_spec.analysis.runs import RunData, read_run
from locust_spec.metrics import batch
from locust_spec.tune import choose
from locust_spec.tune.choose import Sample, Slo

Part = tuple[tuple[np.ndarray, np.ndarray], float, int, float | None]
"""One run at one level: (values, seconds), its window's seconds, its requests, its batch."""


def _pool(k: int, users: int, parts: Sequence[Part]) -> Sample:
    """Repeats of one arm at one level: values pooled, windows added (a rate over all their seconds),
    runs as clusters; batch the window-weighted mean of the repeats that had one."""
    with_batch = [(b, w) for _, w, _, b in parts if b is not None]
    mean_batch = (sum(b * w for b, w in with_batch) / sum(w for _, w in with_batch)
                  if with_batch and sum(w for _, w in with_batch) > 0 else None)
    groups = np.concatenate([np.full(len(v), i) for i, ((v, _), _, _, _) in enumerate(parts)]) \
        if len(parts) > 1 else None
    return Sample(k, users, np.concatenate([v for (v, _), _, _, _ in parts]),
                  np.concatenate([s for (_, s), _, _, _ in parts]), float(sum(w for _, w, _, _ in parts)),
                  groups, sum(n for _, _, n, _ in parts), mean_batch)


def _running(run: RunData, rows: pd.DataFrame) -> float | None:
    """The batch while these requests were being sent: from the first start to the last one. (The last
    requests' ends run into the next level, whose load would count.)"""
    if rows.empty:
        return None
    starts = rows["start_unix_s"]
    return batch.mean_running(run.snapshots or [], float(starts.min()), float(starts.max()))


def _level_parts(prefixes: Sequence[Path], objective: str, slo: Slo | None,
                 tasks: Sequence[str | None]) -> dict[str | None, dict[int, list[Part]]]:
    """Per task (None: every request) and level, each run's part; each run is read once."""
    parts: dict[str | None, dict[int, list[Part]]] = {task: {} for task in tasks}
    for prefix in prefixes:
        run = read_run(prefix)
        frame = run.requests
        used = measured(frame)
        classes = frame["prompt_class"].astype("string").to_numpy()
        users_col, _ = level_keys(frame)
        for users, level in run_levels(run).items():
            at_level = used & (users_col == users)
            for task in tasks:
                rows = frame[at_level if task is None else at_level & (classes == task)]
                if rows.empty:
                    continue
                # A task's rate is per stream, its requests' amount over their own seconds: over the
                # level's window it would rise whenever the other tasks got faster (as analysis/tasks.py).
                wall = (level.end_unix_s - level.start_unix_s if task is None
                        else float(rows["e2e_ms"].fillna(0.0).sum()) / 1000.0)
                parts[task].setdefault(users, []).append(
                    (choose.values(rows, objective, slo), wall, len(rows), _running(run, rows)))
    return parts


def level_samples(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None) -> dict[int, Sample]:
    """Per level (users, or a rate on an open-loop sweep): the arm's measured requests over all its runs,
    and the server's batch there."""
    return task_samples(prefixes, k, objective, slo, (None,))[None]


def task_samples(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None,
                 tasks: Sequence[str | None]) -> dict[str | None, dict[int, Sample]]:
    """level_samples per prompt class (None: all of them); a task's rate is per stream."""
    found = _level_parts(prefixes, objective, slo, tasks)
    return {task: {users: _pool(k, users, p) for users, p in by_level.items()}
            for task, by_level in found.items()}


def whole_sample(prefixes: Sequence[Path], k: int, objective: str, slo: Slo | None) -> Sample | None:
    """Every measured request of the runs as one sample (a swing phase: its levels alternate, and the
    switches between them are what is measured); the window spans first start to last end."""
    parts = []
    for prefix in prefixes:
        run = read_run(prefix)
        frame = run.requests
        rows = frame[measured(frame)]
        if rows.empty:
            continue
        start = float(rows["start_unix_s"].min())
        end = float((rows["start_unix_s"] + rows["e2e_ms"].fillna(0.0) / 1000.0).max())
        running = _running(run, rows)
        parts.append((choose.values(rows, objective, slo), end - start, len(rows), running))
    return _pool(k, 0, parts) if parts else None
