"""Per task: the verdict's rules applied to each prompt class's own requests at each level.

A workload mixes tasks (SpecBench's six, or a file's categories), and speculation pays on some and not on
others: a summary copies its passage, a translation does not. Each task gets what a level gets, from its
own rows only, with the same interval functions (levels.change_intervals, levels.acceptance_ci) over the
same independent units: the level's blocks (block pairs when the arms shared a clock) that hold the
task's requests, runs as clusters; acceptance over its prompts. TPOT p50 and p90 per request;
throughput per stream, the task's output tokens over its requests' time (what a stream of this task got:
the task's tokens over the level's window would rise when the other tasks got faster, however this one
fared); acceptance from the candidate's per-request speculative stats (vLLM:
`--per-request-spec-decode-metrics detailed`). The server's counters cannot be split by task, so without
per-request stats a task's acceptance is unknown and its TPOT and throughput decide. Lag, batch, design and
arrivals are the level's: the tasks shared the load generator and the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from . import levels as lv
from .model import LevelInput, LevelVerdict, Slo, SpecStats, TaskVerdict, level_label
from .rule import ALPHA, CORRECTIONS, EXPLORATORY
from .runs import RunData
from .verdict import INCONCLUSIVE, OFF, SHIP, TRADEOFF, Thresholds, adjust_family, judge_level

SOURCE = "per-request stats"
# The order a summary names verdicts in: where speculation pays first.
ORDER = (SHIP, TRADEOFF, OFF, INCONCLUSIVE)


def task_run(run: RunData, task: str) -> RunData:
    """The run's rows of one task (its design stays: the blocks are the level's); histograms and scrapes
    hold every task, so they stay out."""
    rows = run.requests[run.requests["prompt_class"].astype("string") == task]
    return replace(run, requests=rows, latency=None, snapshots=None)


def _per_stream(level: lv.RunLevel) -> lv.RunLevel:
    """A task's level with its throughput as tokens over its requests' time (see the module's doc)."""
    s = level.samples
    seconds = float(np.nansum(s.e2e_s)) if s is not None else 0.0
    if seconds <= 0:
        return level
    good = None if s.good is None else float(np.nansum(s.output_tokens * s.good)) / seconds
    metrics = replace(level.metrics, output_tok_s=float(np.nansum(s.output_tokens)) / seconds,
                      goodput_tok_s=good)
    return replace(level, metrics=metrics)


def _levels(run: RunData, slo: Slo | None) -> dict[float, lv.RunLevel]:
    return {users: _per_stream(level) for users, level in lv.run_levels(run, slo).items()}


def tasks_of(runs: Sequence[RunData]) -> list[str]:
    """The prompt classes the runs' measured requests hold, sorted."""
    found: set[str] = set()
    for run in runs:
        frame = run.requests
        found.update(str(c) for c in frame.loc[lv.measured(frame), "prompt_class"].dropna().unique())
    return sorted(found)


def _drafted(levels: Sequence[lv.RunLevel]) -> tuple[float, float]:
    """(accepted, drafted) tokens by the requests' own speculative stats."""
    parts = [x.samples for x in levels if x.samples is not None]
    return (float(sum(np.nansum(p.accepted) for p in parts)), float(sum(np.nansum(p.drafted) for p in parts)))


def _spec(levels: Sequence[lv.RunLevel], level: LevelInput) -> SpecStats | None:
    """The task's acceptance from its requests' own stats; without them, acceptance unknown while the
    level's counters say whether the server speculated at all."""
    accepted, drafted = _drafted(levels)
    if drafted > 0:
        tokens = float(sum(x.metrics.output_tokens for x in levels))
        return SpecStats(accepted / drafted, None, (), 0.0, drafted, accepted, tokens, SOURCE)
    if level.spec is None:
        return None
    return replace(level.spec, acceptance=None, mean_acceptance_length=None, per_position=())


def _task_input(base: Sequence[lv.RunLevel], cand: Sequence[tuple[RunData, lv.RunLevel]],
                level: LevelInput) -> LevelInput:
    cand_levels = [x for _, x in cand]
    base_m, cand_m = lv.combine(base), lv.combine(cand_levels)
    spec = _spec(cand_levels, level)
    per_request = _drafted(cand_levels)[1] > 0
    acceptance_ci = (lv.acceptance_ci([r for r, _ in cand], cand_levels, spec.acceptance)
                     if per_request else None)
    changes, design = lv.change_intervals(base, cand_levels, base_m, cand_m, per_stream=True)
    return LevelInput(
        users=level.users, baseline=base_m, candidate=cand_m, spec=spec, rows_show_speculation=per_request,
        baseline_lag=level.baseline_lag, candidate_lag=level.candidate_lag, changes=changes,
        acceptance_ci=acceptance_ci, baseline_batch=level.baseline_batch,
        candidate_batch=level.candidate_batch,
        baseline_arrivals=level.baseline_arrivals, candidate_arrivals=level.candidate_arrivals,
        design=design, spill=level.spill, block_s=level.block_s)


def task_verdicts(base_runs: Sequence[RunData], cand_runs: Sequence[RunData], inputs: Sequence[LevelInput],
                  th: Thresholds, slo: Slo | None = None) -> tuple[TaskVerdict, ...]:
    """Every task's verdict at the levels judged (`inputs`); () when the runs hold fewer than two tasks
    (the level's verdict is then the task's)."""
    tasks = tasks_of([*base_runs, *cand_runs])
    if len(tasks) < 2:
        return ()
    throughput_key = "goodput_tok_s" if slo is not None else "output_tok_s"
    found: list[tuple[str, list[LevelInput], bool]] = []
    for task in tasks:
        base = [_levels(task_run(r, task), slo) for r in base_runs]
        cand = [(r, _levels(r, slo)) for r in (task_run(r, task) for r in cand_runs)]
        at = []
        for level in sorted(inputs, key=lambda i: i.users):
            task_base = [by[level.users] for by in base if level.users in by]
            task_cand = [(r, by[level.users]) for r, by in cand if level.users in by]
            if task_base and task_cand:
                at.append(_task_input(task_base, task_cand, level))
        if at:
            found.append((task, at, any(_drafted(list(by.values()))[1] > 0 for _, by in cand)))
    # exploratory: every task's every level is one family under the false discovery rate
    family = [level for _, at, _ in found for level in at]
    adjusted = iter(adjust_family(family, th, throughput_key, EXPLORATORY))
    return tuple(TaskVerdict(task, tuple(judge_level(level, th, throughput_key=throughput_key,
                                                     adjusted=next(adjusted), exploratory=True)
                                         for level in at), measured)
                 for task, at, measured in found)


def _names(tasks: Sequence[str]) -> str:
    return tasks[0] if len(tasks) == 1 else f"{', '.join(tasks[:-1])} and {tasks[-1]}"


WHY_INCONCLUSIVE = (("has only", "too few requests: measure longer"),
                    ("load generator was behind", "the load generator fell behind"),
                    ("failed", "too many failures"),
                    ("counters", "no speculation counters"),
                    ("cannot be ruled out", "a guard's interval reaches past its margin"),
                    ("but not after", "not after the false discovery rate's correction"),
                    ("no interval", "too few units or requests for an interval"),
                    ("inside the", "no change beyond the noise band"))


def _why(level: LevelVerdict) -> str:
    """An inconclusive task level's reason, in a few words (its first reason says it in full)."""
    first = level.reasons[0] if level.reasons else ""
    return next((short for key, short in WHY_INCONCLUSIVE if key in first),
                "its intervals straddle the noise band")


def summary(tasks: Sequence[TaskVerdict]) -> str:
    """Where speculation pays, per level: 'at 16 users: ship on summarization and rag; off on translation;
    inconclusive on qa (too few requests: measure longer)'."""
    if not tasks:
        return ""
    by_users: dict[float, dict[tuple[str, str], list[str]]] = {}
    for t in tasks:
        for level in t.levels:
            why = f" ({_why(level)})" if level.verdict == INCONCLUSIVE else ""
            by_users.setdefault(level.users, {}).setdefault((level.verdict, why), []).append(t.task)
    parts = []
    for users, groups in sorted(by_users.items()):
        order = sorted(groups, key=lambda key: (ORDER.index(key[0]), key[1]))
        said = "; ".join(f"{verdict} on {_names(groups[verdict, why])}{why}" for verdict, why in order)
        parts.append(f"at {level_label(users)}: {said}")
    unknown = [t.task for t in tasks if not t.acceptance_measured]
    note = (f" (acceptance of {_names(unknown)} not measured per request: TPOT and throughput decide)"
            if unknown else "")
    return (f"Per task (exploratory, {CORRECTIONS[EXPLORATORY]} at {ALPHA:g}), " + "; ".join(parts) + note
            + ".")
