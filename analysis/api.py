"""Python API (used by spec-ab): the verdict for two arms' runs, and writing it in every format."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from locust_spec.core.design import SEQUENTIAL
from locust_spec.metrics import power
from locust_spec.metrics.crosscheck import CANDIDATE_METRICS_OPTIONS

from . import answers, comparable, cost, provenance, rule, tasks, what_ran
from . import levels as lv
from .model import (
    ArmMetrics,
    ArmsValue,
    DesignInfo,
    Level,
    LevelInput,
    LevelVerdict,
    PlotData,
    PowerSource,
    Pricing,
    Slo,
    Verdict,
    level_label,
    worst_arrivals,
    worst_lag,
)
from .runs import InputError, RunData, discover, read_run, read_self_check
from .stats import Interval
from .verdict import Thresholds, build_verdict


def load_arm(paths: Iterable[Path | str], name: str) -> list[RunData]:
    runs = [read_run(prefix) for path in paths for prefix in discover(Path(path))]
    if not runs:
        raise InputError(f"no {name} run given")
    return runs


def _levels_text(users: Iterable[int]) -> str:
    return ", ".join(str(u) for u in sorted(users)) or "none"


def verdict_for(
    baseline: Sequence[Path | str],
    candidate: Sequence[Path | str],
    *,
    serving_concurrency: int | None = None,
    slo: Slo | None = None,
    force: bool = False,
    pricing: Pricing | None = None,
    power_gpus: dict[str, power.GpuSelection | None] | None = None,
    **thresholds: float,
) -> Verdict:
    """Read both arms (prefixes or folders; several = repeats) and judge every level they share.

    Keyword thresholds are `locust_spec.analysis.verdict.Thresholds` fields (e.g. ship_acceptance=0.7).
    With an SLO, goodput (tokens of requests meeting it, per second) is the throughput judged.
    With `pricing`, each level gets the cost per million output tokens; runs whose server metrics hold GPU
    power series (a DCGM exporter's) get watts and joules per token, of the GPUs `power_gpus` selects per arm
    ("baseline", "candidate"; None: every GPU).
    Raises InputError (one line) on bad input, and on arms that cannot be compared (different models, the
    same run twice, swapped) unless `force`.
    """
    th = Thresholds(**{k: v for k, v in thresholds.items() if v is not None})
    if th.objective == rule.GOODPUT and slo is None:
        raise InputError("--objective goodput needs --slo (goodput is the tokens of requests within it)")
    if th.objective not in rule.OBJECTIVES:
        raise InputError(f"objective {th.objective!r}: one of {', '.join(rule.OBJECTIVES)}")
    base_runs, cand_runs = load_arm(baseline, "baseline"), load_arm(candidate, "candidate")
    check_one_axis(base_runs + cand_runs)
    if serving_concurrency is not None and base_runs[0].rate_run:
        raise InputError("--serving-concurrency names a number of users; these runs are at request rates")
    records = (tuple(r.provenance for r in base_runs), tuple(r.provenance for r in cand_runs))
    try:
        provenance_notes = provenance.check_arms(*records, force)
        runs = comparable.runs_of([(r.provenance, r.design) for r in base_runs],
                                  [(r.provenance, r.design) for r in cand_runs])
        differences = comparable.check(runs, force)
    except provenance.ProvenanceError as exc:
        raise InputError(str(exc)) from None
    base_levels = [lv.run_levels(r, slo) for r in base_runs]
    cand_levels = [lv.run_levels(r, slo) for r in cand_runs]
    base_users = set().union(*base_levels)
    cand_users = set().union(*cand_levels)
    common = sorted(base_users & cand_users)
    if not common:
        raise InputError(f"baseline and candidate share no concurrency level (baseline: "
                         f"{_levels_text(base_users)}; candidate: {_levels_text(cand_users)})")
    inputs, notes, cdf, economy = [], list(provenance_notes), {}, {}
    checks = [read_self_check(folder) for folder in dict.fromkeys(Path(r.prefix).parent for r in base_runs)]
    checks = [c for c in checks if c is not None]
    floor = answers.self_agreement([r.answers for r in base_runs] + checks,
                                   "all levels and the self-check" if checks else "all levels")
    temperature = run_temperature(base_runs + cand_runs)
    selections = power_gpus or {}
    curves = {arm: [power.curves(r.snapshots or (), selections.get(arm)) for r in runs]
              for arm, runs in (("baseline", base_runs), ("candidate", cand_runs))}
    base_drafted = 0.0
    for users in common:
        base_pairs = [(run, levels[users]) for run, levels in zip(base_runs, base_levels, strict=True)
                      if users in levels]
        cand_pairs = [(run, levels[users]) for run, levels in zip(cand_runs, cand_levels, strict=True)
                      if users in levels]
        base_at = [level for _, level in base_pairs]
        cand_at = [level for _, level in cand_pairs]
        spec = lv.combine_spec([s for run, level in cand_pairs
                                if (s := lv.spec_stats(run, level)) is not None])
        base_drafted += sum(s.draft_tokens for run, level in base_pairs
                            if (s := lv.spec_stats(run, level)) is not None)
        base_m, cand_m = lv.combine(base_at), lv.combine(cand_at)
        changes, design = lv.change_intervals(base_at, cand_at, base_m, cand_m)
        economy[users] = level_economy(users, base_levels, cand_levels, curves, base_m, cand_m,
                                       changes["output_tok_s"], pricing)
        inputs.append(LevelInput(
            users=users,
            baseline=base_m,
            candidate=cand_m,
            spec=spec,
            rows_show_speculation=any(level.rows_show_speculation for level in cand_at),
            baseline_lag=worst_lag([run.client_lag[users] for run in base_runs if users in run.client_lag]),
            candidate_lag=worst_lag([run.client_lag[users] for run in cand_runs if users in run.client_lag]),
            changes=changes,
            acceptance_ci=(lv.acceptance_ci([r for r, _ in cand_pairs], cand_at, spec.acceptance)
                           if spec is not None and spec.acceptance is not None else None),
            baseline_batch=lv.arm_batch(base_pairs),
            candidate_batch=lv.arm_batch(cand_pairs),
            answers=answer_check(base_runs, cand_runs, users, floor, temperature),
            baseline_arrivals=worst_arrivals([level.arrivals for level in base_at if level.arrivals]),
            candidate_arrivals=worst_arrivals([level.arrivals for level in cand_at if level.arrivals]),
            baseline_spec=lv.combine_spec([s for run, level in base_pairs
                                           if (s := lv.spec_stats(run, level)) is not None]),
            design=design,
            spill={arm: max(shares) for arm, at in (("baseline", base_at), ("candidate", cand_at))
                   if (shares := [lv.samples.blocks.spill_share for lv in at
                                  if lv.samples is not None and lv.samples.blocks.spill_share is not None])},
            block_s=next((lv.design.block_s for lv in cand_at if lv.design is not None and lv.design.blocked),
                         None),
        ))
        cdf[users] = {"baseline": lv.merged_itl_cdf(base_runs, users),
                      "candidate": lv.merged_itl_cdf(cand_runs, users)}
    cand_drafted = sum(i.spec.draft_tokens for i in inputs if i.spec is not None)
    try:
        flipped = provenance.swapped(base_drafted, cand_drafted, force)
    except provenance.ProvenanceError as exc:
        raise InputError(str(exc)) from None
    notes += ([flipped] if flipped else []) + latency_notes(base_runs, cand_runs, inputs)
    notes += counter_notes(cand_runs, inputs) + spec_notes(inputs)
    arms = (("baseline", base_runs), ("candidate", cand_runs))
    warnings = [(arm, w) for arm, runs in arms for run in runs for w in run.warnings]
    disagreements = [(arm, w) for arm, runs in arms for run in runs for w in run.crosscheck]
    verdict = build_verdict(inputs, th, serving=serving_concurrency,
                            class_stats=lv.class_stats(base_runs, cand_runs),
                            run_warnings=warnings, crosscheck=disagreements, notes=notes,
                            plots=PlotData(itl_cdf=cdf), slo=slo, design=design_info(base_runs, cand_runs))
    ran = (what_ran.infer("baseline", records[0], [i.baseline_spec for i in inputs if i.baseline_spec],
                          any(r.snapshots for r in base_runs)),
           what_ran.infer("candidate", records[1], [i.spec for i in inputs if i.spec],
                          any(r.snapshots for r in cand_runs), what_ran.candidate_signs(verdict.levels)))
    verdict = replace(verdict, provenance=records, differences=tuple(differences), what_ran=ran,
                      configurations=base_drafted > 0,
                      summary=leading_summary(verdict.summary, verdict.levels, base_drafted > 0),
                      pricing=pricing, power=power_sources(curves, selections),
                      levels=tuple(replace(level, economy=economy[level.users]) for level in verdict.levels))
    said = cost.headline(verdict.levels, th.noise_pct, serving_concurrency)
    if said:
        verdict = replace(verdict, summary=f"{verdict.summary} {said}")
    by_task = tasks.task_verdicts(base_runs, cand_runs, inputs, th, slo)
    if not by_task:
        return verdict
    return replace(verdict, tasks=by_task, summary=f"{verdict.summary} {tasks.summary(by_task)}")


def answer_check(base_runs: Sequence[RunData], cand_runs: Sequence[RunData], users: Level,
                 floor: answers.Floor | None, temperature: float | None) -> answers.AnswerCheck | None:
    """One level's answer gate; 'not checked' (said, never silent) when an arm recorded no answers."""
    for arm, runs in (("baseline", base_runs), ("candidate", cand_runs)):
        if all(r.answers is None for r in runs):
            return answers.not_checked(f"the {arm}'s PREFIX_requests.csv holds no answers: no output_hash "
                                       "column (written before it) or no successful request")
    base = answers.level_answers([r.answers for r in base_runs], users)
    check = answers.check_level(base, answers.level_answers([r.answers for r in cand_runs], users), floor,
                                temperature)
    return check or answers.not_checked("the arms answered no prompt in common at this level")


def run_temperature(runs: Sequence[RunData]) -> float | None:
    """The temperature the runs' requests were sent with (PREFIX_run.json; the gate refuses runs that
    differ in it); None when no run recorded one."""
    for run in runs:
        value = run.provenance._get("load", "temperature") if run.provenance is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def leading_summary(summary: str, levels: Sequence[LevelVerdict], configurations: bool) -> str:
    """The summary as the headline: what it compares (speculation, or two configurations when the baseline
    speculated too), led by the answers when they hold the candidate back."""
    if configurations:
        summary = summary.replace("Speculative decoding:", "Candidate vs baseline configuration (both "
                                  "speculate):", 1)
    lead = answers.headline([(level_label(lv.users), lv.answers) for lv in levels])
    return f"{lead} {summary}" if lead else summary


def level_economy(users: float, base_levels: Sequence[dict], cand_levels: Sequence[dict],
                  curves: dict[str, list[list[power.Curve]]], base_m: ArmMetrics, cand_m: ArmMetrics,
                  throughput: Interval, pricing: Pricing | None) -> tuple[ArmsValue, ...]:
    """One level's cost (with `pricing`) and energy (from the runs' GPU power series, when they hold any)."""
    found = []
    if pricing is not None:
        found.append(cost.cost_value(pricing, base_m, cand_m, throughput))
    arms = []
    for arm, levels in (("baseline", base_levels), ("candidate", cand_levels)):
        at = [(levels_of[users], c) for levels_of, c in zip(levels, curves[arm], strict=True)
              if users in levels_of]
        arms.append(([level for level, _ in at], [cost.block_joules(c, level) for level, c in at]))
    return (*found, *cost.energy_values(*arms[0], *arms[1]))


def power_sources(curves: dict[str, list[list[power.Curve]]],
                  selections: dict[str, power.GpuSelection | None]) -> dict[str, PowerSource]:
    """Per arm whose runs held GPU power series: what they were read from, how many GPUs, which label."""
    out = {}
    for arm, runs in curves.items():
        found = [c for run in runs for c in run]
        if found:
            picked = selections.get(arm)
            out[arm] = PowerSource(power.source_of(found), max(len(run) for run in runs),
                                   None if picked is None else str(picked))
    return out


def check_one_axis(runs: Sequence[RunData]) -> None:
    """Both arms' levels must be of one kind: users (a concurrency ladder) or rates (open loop)."""
    kinds = {run.rate_run for run in runs}
    if len(kinds) > 1:
        rated = [str(run.prefix) for run in runs if run.rate_run]
        users = [str(run.prefix) for run in runs if not run.rate_run]
        raise InputError(f"the runs mix rate levels ({', '.join(rated)}) and users levels "
                         f"({', '.join(users)}): compare open-loop runs with open-loop runs")


def design_info(base_runs: Sequence[RunData], cand_runs: Sequence[RunData]) -> DesignInfo:
    """The design of the verdict's runs: one kind when all agree (else mixed), with its blocks."""
    designs = [run.design for run in (*base_runs, *cand_runs)]
    kinds = {d.kind if d is not None else SEQUENTIAL for d in designs}
    repeats = max(len(base_runs), len(cand_runs))
    if len(kinds) > 1:
        return DesignInfo("mixed", repeats=repeats)
    first = designs[0]
    if first is None or not first.blocked:
        return DesignInfo(SEQUENTIAL, repeats=repeats, warmup_s=first.warmup_s if first else None)
    return DesignInfo(first.kind, first.block_s, first.n_blocks, first.arms, repeats, first.warmup_s)


def latency_notes(base_runs: Sequence[RunData], cand_runs: Sequence[RunData],
                  inputs: Sequence[LevelInput]) -> list[str]:
    """Where ITL came from per-request medians: which _latency.json is absent, or lacks the level."""
    gaps = []
    for arm, runs in (("baseline", base_runs), ("candidate", cand_runs)):
        for users in [i.users for i in inputs if getattr(i, arm).itl_source == "rows"]:
            for run in runs:
                if run.latency is None:
                    gaps.append(f"{run.prefix}_latency.json does not exist")
                elif lv.level_hist(run, users, "itl") is None:
                    gaps.append(f"{run.prefix}_latency.json has no ITL histogram at {users} users")
    if not gaps:
        return []
    return [f"ITL p50 from per-request medians ({'; '.join(dict.fromkeys(gaps))}): approximate, no ITL p95"]


def counter_notes(cand_runs: Sequence[RunData], inputs: Sequence[LevelInput]) -> list[str]:
    """Why a level has no server counters, as the candidate's files show it."""
    missing = [i.users for i in inputs if i.spec is None]
    if not missing:
        return []
    notes = []
    for run in cand_runs:
        path = f"{run.prefix}_server_metrics.csv"
        if run.snapshots is None:
            notes.append(f"{path} does not exist: the candidate's /metrics was not scraped "
                         f"({CANDIDATE_METRICS_OPTIONS})")
        elif not run.snapshots:
            notes.append(f"{path} holds no scrape (header only): no scrape of the candidate's /metrics "
                         "succeeded; the run's log and summary warnings say why")
    if not notes:
        notes.append(f"fewer than two scrapes of the candidate's /metrics within the level(s) at "
                     f"{_levels_text(missing)} users: scrape more often (locust --metrics-interval)")
    return notes


def spec_notes(inputs: Sequence[LevelInput]) -> list[str]:
    """What the candidate's counter windows noted (restarts, anomalies, models left out), each note once with
    the levels it applies to."""
    levels: dict[str, list[int]] = {}
    for i in inputs:
        for note in i.spec.notes if i.spec is not None else ():
            levels.setdefault(note, []).append(i.users)
    return [f"candidate's server counters at {_levels_text(users)} users: {note}"
            for note, users in levels.items()]


def render(verdict: Verdict, fmt: str) -> str:
    from .report import html, markdown, schema, text

    renderers = {"text": text.render, "json": schema.render, "markdown": markdown.render, "html": html.render}
    if fmt not in renderers:
        raise InputError(f"unknown format {fmt!r} (text, json, markdown, html)")
    return renderers[fmt](verdict)


FORMAT_BY_SUFFIX = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".html": "html",
                    ".htm": "html", ".txt": "text"}


def format_for(path: Path) -> str:
    fmt = FORMAT_BY_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{path}: unknown output suffix (use .json, .md, .html or .txt)")
    return fmt


def write_outputs(verdict: Verdict, paths: Iterable[Path | str]) -> None:
    """Write the verdict to each path, the format chosen by the suffix."""
    for path in map(Path, paths):
        content = render(verdict, format_for(path))
        try:
            path.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{path}: cannot write: {exc.strerror}") from None
