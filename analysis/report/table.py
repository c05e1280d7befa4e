"""The per-level comparison table shared by the text, Markdown and HTML reports."""

from __future__ import annotations

from .. import cost, provenance
from ..model import (
    NO_DETECTION,
    ArmMetrics,
    Arrivals,
    Batch,
    CrossPoint,
    DesignInfo,
    LevelVerdict,
    Rate,
    Verdict,
    detectable,
    level_label,
)
from ..verdict import LABELS, fmt_change

# The deciding metrics first (TPOT per request, throughput), then context: token-weighted ITL and the
# chunk gaps describe the stream's rhythm, not the time a reader waits per token.
ROWS = (
    ("TPOT p50 (ms)", "tpot_p50_ms", "{:.2f}"),
    ("TPOT p90 (ms)", "tpot_p90_ms", "{:.2f}"),
    ("output tok/s", "output_tok_s", "{:.1f}"),
    ("goodput tok/s (SLO)", "goodput_tok_s", "{:.1f}"),
    ("requests meeting SLO", "slo_share", "{:.1%}"),
    ("TTFT p50 (ms)", "ttft_p50_ms", "{:.1f}"),
    ("ITL p50, token-weighted (ms)", "itl_p50_ms", "{:.2f}"),
    ("ITL p95, token-weighted (ms)", "itl_p95_ms", "{:.2f}"),
    ("chunk gap p50 (ms)", "chunk_gap_p50_ms", "{:.2f}"),
    ("chunk gap p99, stall (ms)", "chunk_gap_p99_ms", "{:.2f}"),
    ("tokens per chunk", "tokens_per_chunk", "{:.2f}"),
)
HEADER = ("metric", "baseline", "candidate", "change [95% CI]")


def cell(arm: ArmMetrics, key: str, fmt: str) -> str:
    value = getattr(arm, key)
    if value is None:
        return "-"
    text = fmt.format(value)
    if key in arm.spread and arm.runs > 1:
        lo, hi = arm.spread[key]
        text += f" ({fmt.format(lo)}-{fmt.format(hi)})"
    return text


def rows(lv: LevelVerdict) -> list[tuple[str, str, str, str]]:
    """(metric, baseline, candidate, change [95% CI]) rows; repeats show their spread as (min-max).
    Rows neither arm measured (the SLO rows without --slo) are left out."""
    out = [("requests / failed",
            f"{lv.baseline.requests} / {lv.baseline.failures}",
            f"{lv.candidate.requests} / {lv.candidate.failures}", "")]
    if lv.baseline_batch is not None or lv.candidate_batch is not None:
        out.append(("server batch mean / p50 / max", batch_cell(lv.baseline_batch),
                    batch_cell(lv.candidate_batch), ""))
        out.append(("server waiting p50 / max", batch_cell(lv.baseline_batch, waiting=True),
                    batch_cell(lv.candidate_batch, waiting=True), ""))
    if lv.baseline_arrivals is not None or lv.candidate_arrivals is not None:
        out += arrival_rows(lv.baseline_arrivals, lv.candidate_arrivals)
    for label, key, fmt in ROWS:
        if getattr(lv.baseline, key) is None and getattr(lv.candidate, key) is None:
            continue
        change = lv.changes.get(key)
        out.append((label, cell(lv.baseline, key, fmt), cell(lv.candidate, key, fmt),
                    "" if change is None or change.estimate is None else fmt_change(change)))
    for value in lv.economy:
        label, fmt = cost.LABELS[value.key]
        out.append((label, *("-" if v is None else fmt.format(v) for v in (value.baseline, value.candidate)),
                    "" if value.change.estimate is None else fmt_change(value.change)))
    return out


ARRIVAL_ROWS = (
    ("req/s sent / scheduled (asked)", lambda a: "-" if a.achieved_rate is None else
     f"{a.achieved_rate:.2f} / {a.scheduled_rate or 0:.2f} ({a.rate:g})"),
    ("arrivals never sent", lambda a: "-" if a.missed is None else f"{a.missed} of {a.scheduled}"),
    ("lateness p50 / p99 (ms)", lambda a: "-" if a.lateness_p99_ms is None else
     f"{a.lateness_p50_ms:.1f} / {a.lateness_p99_ms:.1f}"),
    ("TTFT p50 from arrival (ms)", lambda a: "-" if a.ttft_from_arrival_p50_ms is None else
     f"{a.ttft_from_arrival_p50_ms:.1f}"),
)
"""Open loop: whether each arm kept its arrival schedule, and TTFT as a user arriving then waited it."""


def arrival_rows(base: Arrivals | None, cand: Arrivals | None) -> list[tuple[str, str, str, str]]:
    return [(label, show(base) if base else "-", show(cand) if cand else "-", "")
            for label, show in ARRIVAL_ROWS]


def batch_cell(batch: Batch | None, waiting: bool = False) -> str:
    if batch is None:
        return "-"
    if waiting:
        return f"{batch.waiting_p50:.0f} / {batch.waiting_max:.0f}"
    mean = "-" if batch.running_mean is None else f"{batch.running_mean:.1f}"
    return f"{mean} / {batch.running_p50:.0f} / {batch.running_max:.0f}"


def crossover_lines(points: tuple[CrossPoint, ...]) -> list[str]:
    """One line per crossing: where, with the interval's range and the batch there."""
    out = []
    for p in points:
        text = p.note
        if p.users is not None:
            lo, hi = p.users_ci95
            unit = "req/s" if isinstance(p.users, Rate) else "users"
            # not a confidence interval: the curve between two measured levels is assumed straight
            text += (f" (the levels' intervals cross from "
                     f"{'below the lowest level' if lo is None else f'{lo:.1f} {unit}'} to "
                     f"{'beyond the highest level' if hi is None else f'{hi:.1f} {unit}'}, interpolated; "
                     "measure levels in between to place it)")
            if p.batch is not None:
                text += f", at a batch of about {p.batch:.1f}"
        out.append(text)
    return out


def users_label(users: float) -> str:
    """A level's heading: `16 users`, or on a rate level `4 req/s`."""
    return level_label(users)


def acceptance_line(lv: LevelVerdict) -> str:
    if lv.acceptance is None:
        return "acceptance: not measured"
    ci = lv.acceptance_ci
    parts = [f"acceptance {lv.acceptance:.2f}" + (f" [95% CI {ci.lo:.2f}, {ci.hi:.2f}, {ci.method}]"
                                                  if ci is not None and ci.measured else "")]
    if lv.mean_acceptance_length is not None:
        parts.append(f"mean acceptance length {lv.mean_acceptance_length:.2f}")
    if lv.per_position:
        parts.append("per position " + " ".join(f"{p:.2f}" for p in lv.per_position))
    return ", ".join(parts)


def measured(verdict: Verdict) -> tuple[list[str], list[list[str]]] | None:
    """What each run measured (its PREFIX_run.json): header and rows, one column per run; None when the
    verdict names no run (built by hand)."""
    base, cand = verdict.provenance
    if not base and not cand:
        return None
    header, rows = provenance.table(base, cand)
    ran = {r.arm: r.line() for r in verdict.what_ran}
    if ran:
        arms = ["baseline"] * len(base) + ["candidate"] * len(cand)
        rows.insert(1, ["speculation", *(ran.get(arm, "-") for arm in arms)])
    return header, rows


def answers_line(lv: LevelVerdict) -> str | None:
    """The candidate's answers against the baseline's (analysis/answers.py); None when not compared."""
    return lv.answers.line() if lv.answers is not None else None


TASK_HEADER = ("task", "users", "verdict", "acceptance [95% CI]", "TPOT p50 change", "TPOT p90 change",
               "tok/s per stream change")


def _acceptance_cell(lv: LevelVerdict) -> str:
    if lv.acceptance is None:
        return "not measured"
    ci = lv.acceptance_ci
    return f"{lv.acceptance:.2f}" + (f" [{ci.lo:.2f}, {ci.hi:.2f}]" if ci is not None and ci.measured else "")


def task_rows(verdict: Verdict) -> list[tuple[str, ...]]:
    """One row per task and level: its verdict, acceptance and the deciding changes with their intervals
    (throughput per stream: the task's tokens over its requests' time, analysis/tasks.py)."""
    tput = "goodput_tok_s" if verdict.slo is not None else "output_tok_s"
    out = []
    for task in verdict.tasks:
        for lv in task.levels:
            changes = [lv.changes.get(key) for key in ("tpot_p50_ms", "tpot_p90_ms", tput)]
            out.append((task.task, str(lv.users), lv.verdict, _acceptance_cell(lv),
                        *("-" if c is None or c.estimate is None else fmt_change(c) for c in changes)))
    return out


def evidence_line(lv: LevelVerdict) -> str | None:
    """Repeats, the units the intervals resampled and the smallest change each deciding metric could show
    (an inconclusive level's reasons say when it was under-powered)."""
    parts = []
    if lv.baseline.runs > 1 or lv.candidate.runs > 1:
        parts.append(f"repeats: {lv.baseline.runs} baseline, {lv.candidate.runs} candidate runs "
                     "(median, spread min-max)")
    units = next((c for k, c in lv.changes.items() if k in lv.mde_pct and c.measured and c.units), None)
    if units is not None:
        parts.append(f"intervals over {units.units} {units.unit} ({lv.design})")
    found = {LABELS[k][0]: v for k, v in lv.mde_pct.items() if v is not None}
    mde = [f"{label} +-{v:.1f}%" for label, v in found.items() if detectable(v)]
    if mde:
        parts.append("smallest detectable change " + ", ".join(mde))
    blind = [label for label, v in found.items() if not detectable(v)]
    if blind:
        parts.append(f"{NO_DETECTION} ({', '.join(blind)})")
    return "; ".join(parts) or None


def title(verdict: Verdict) -> str:
    """What the verdict decides: speculation against none, or (the baseline speculated too) one
    configuration against another."""
    return "Candidate vs baseline configuration" if verdict.configurations else "Speculative decoding"


def forced_lines(verdict: Verdict) -> list[str]:
    """What differs between the compared runs (--force), for the first screen."""
    return [f"NOT COMPARABLE, compared anyway (--force): {d}" for d in verdict.differences]


LEVELS_HEADER = ("level", "verdict", "TPOT p50 change", "TPOT p90 change", "throughput change", "answers")


def levels_rows(verdict: Verdict) -> list[tuple[str, ...]]:
    """One row per level: its verdict and the deciding changes with their 95% intervals, and the answer
    check's status: the answer, before any detail."""
    tput = "goodput_tok_s" if verdict.slo is not None else "output_tok_s"
    out = []
    for lv in verdict.levels:
        changes = [lv.changes.get(key) for key in ("tpot_p50_ms", "tpot_p90_ms", tput)]
        out.append((users_label(lv.users), lv.verdict,
                    *("-" if c is None or c.estimate is None else fmt_change(c) for c in changes),
                    lv.answers.status if lv.answers is not None else "not checked"))
    return out


def rule_line(verdict: Verdict) -> str:
    """The decision rule every level was judged by, declared beside the design ("" for a hand-built
    verdict without one)."""
    return verdict.rule.describe() if verdict.rule is not None else ""


def design_line(design: DesignInfo) -> str:
    """How the arms shared time, for the top of a report."""
    repeats = f", {design.repeats} repeats" if design.repeats > 1 else ""
    if design.kind in ("interleaved", "simultaneous") and design.block_s:
        how = ("arms taking turns in blocks (ABBA)" if design.kind == "interleaved" else
               "arms at the same time")
        return (f"design: {design.kind}, {how}, {design.blocks_per_level} blocks of {design.block_s:g}s per "
                f"level{repeats}")
    if design.kind == "mixed":
        return f"design: mixed (the runs were measured differently; intervals unpaired){repeats}"
    return (f"design: sequential, one arm's ladder after the other's{repeats}: drift between the arms is "
            "not in the intervals")
