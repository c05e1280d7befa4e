"""Pure rules: per-level measurements and acceptance -> the ship/off/tradeoff/inconclusive verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from locust_spec.analysis import diagnoses
from locust_spec.analysis.model import (
    ArmMetrics,
    ClassStats,
    Diagnosis,
    LevelInput,
    LevelVerdict,
    PlotData,
    Verdict,
)

SHIP, OFF, TRADEOFF, INCONCLUSIVE = "ship", "off", "tradeoff", "inconclusive"
VERDICTS = (SHIP, OFF, TRADEOFF, INCONCLUSIVE)
CHANGE_KEYS = ("ttft_p50_ms", "itl_p50_ms", "itl_p95_ms", "tpot_p50_ms", "chunk_gap_p50_ms",
               "output_tok_s", "tokens_per_chunk")
_EPS = 1e-12


@dataclass(frozen=True)
class Thresholds:
    """The rule of thumb's numbers; every one is a command-line option."""

    ship_acceptance: float = 2 / 3
    off_acceptance: float = 0.5
    noise_pct: float = 2.0
    max_failure_rate: float = 0.05
    min_requests: int = 10
    min_output_tokens: int = 1000
    disagree_acceptance: float = 0.1
    position_acceptance: float = 0.5
    max_client_late_share: float = 0.05


def change_pct(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base <= 0:
        return None
    return (cand - base) / base * 100.0


def noise_band(key: str, base: ArmMetrics, cand: ArmMetrics, noise_pct: float) -> float:
    """The band a difference must leave to count: the configured noise, widened to the repeats' spread."""
    band = noise_pct
    for arm in (base, cand):
        lo_hi = arm.spread.get(key)
        mid = getattr(arm, key)
        if lo_hi and mid:
            band = max(band, (lo_hi[1] - lo_hi[0]) / mid * 100.0)
    return band


def direction(change: float | None, band: float, lower_is_better: bool) -> str:
    """better / worse beyond the band, same inside it, unknown when not measured."""
    if change is None:
        return "unknown"
    if abs(change) <= band:
        return "same"
    improved = change < 0 if lower_is_better else change > 0
    return "better" if improved else "worse"


def _fmt_change(label: str, unit: str, base: float, cand: float, change: float, word: str) -> str:
    return f"{label} {base:.1f} -> {cand:.1f} {unit} ({change:+.1f}%, {word})"


def _evidence_gaps(level: LevelInput, th: Thresholds) -> list[str]:
    """Reasons the level cannot be judged: failures, too little evidence, a lagging client, no counters."""
    gaps = []
    for name, arm in (("baseline", level.baseline), ("candidate", level.candidate)):
        if arm.requests <= 0:
            gaps.append(f"{name} has no requests at this level")
            continue
        rate = arm.failures / arm.requests
        if rate > th.max_failure_rate + _EPS:
            gaps.append(f"{name} failed {arm.failures} of {arm.requests} requests ({rate:.0%}, "
                        f"above {th.max_failure_rate:.0%})")
        if arm.requests < th.min_requests:
            gaps.append(f"{name} has only {arm.requests} requests (needs {th.min_requests})")
        if arm.output_tokens < th.min_output_tokens:
            gaps.append(f"{name} has only {arm.output_tokens} output tokens (needs {th.min_output_tokens})")
        if arm.itl_p50_ms is None or arm.output_tok_s is None:
            gaps.append(f"{name} has no completed streams to measure ITL and throughput")
    for name, lag in (("baseline", level.baseline_lag), ("candidate", level.candidate_lag)):
        # A client that falls behind sends less load than asked and stamps arrivals late, and it favours
        # the arm that sends fewer chunks (speculation): its numbers cannot judge the server.
        if lag is not None and lag.late_share > th.max_client_late_share + _EPS:
            gaps.append(f"{name}: the load generator was behind {lag.late_share:.1%} of the time at this "
                        f"level (max {lag.max_lag_ms:.0f} ms): its numbers measure the client, not the "
                        "server; add --processes or workers")
    if level.spec is None:
        gaps.append("no server counters on the candidate at this level (the warnings say why)")
    elif level.spec.acceptance is None or level.spec.draft_tokens <= 0:
        gaps.append("the candidate's draft counters did not move at this level (speculation_inactive says "
                    "why)")
    return gaps


def _decide(acceptance: float, itl: str, tput: str, numbers: str, th: Thresholds) -> tuple[str, str]:
    ship_at, off_at = th.ship_acceptance, th.off_acceptance
    if acceptance >= ship_at - _EPS:
        head = f"acceptance {acceptance:.2f} >= {ship_at:.2f}"
        if tput == "worse":
            if itl == "better":
                return TRADEOFF, (f"{head}, but throughput fell beyond the noise band while "
                                  "per-token latency improved: you have a decision to make, "
                                  f"not a result ({numbers})")
            return OFF, (f"{head}, yet throughput fell and per-token latency did not improve: "
                         f"here the draft costs more than it wins ({numbers})")
        if itl == "worse":
            return TRADEOFF, (f"{head}, but per-token latency got worse while throughput held: "
                              f"you have a decision to make, not a result ({numbers})")
        return SHIP, f"{head}: worth it ({numbers})"
    if acceptance < off_at:
        if itl == "better" and tput == "better":
            # Seen on real vLLM with n-gram: the rule of thumb prices in a draft's cost, and a nearly free
            # drafter can pay below it. The rule stands, but the user must see that the measurements disagree.
            return OFF, (f"acceptance {acceptance:.2f} < {off_at:.2f}: off by the rule of thumb, although "
                         f"both per-token latency and throughput improved here ({numbers}); a nearly free "
                         "drafter (n-gram) can pay below the rule: re-judge on the measurements with "
                         f"spec-verdict --off-acceptance {max(acceptance - 0.05, 0.0):.2f}")
        return OFF, f"acceptance {acceptance:.2f} < {off_at:.2f}: switch it off ({numbers})"
    head = (f"acceptance {acceptance:.2f} is between {off_at:.2f} and {ship_at:.2f}, "
            "so the measurements decide")
    dirs = (itl, tput)
    better, worse = dirs.count("better"), dirs.count("worse")
    if better == 0 and worse == 0:
        return INCONCLUSIVE, (f"{head}, and per-token latency and throughput differ by less than the noise "
                              f"band ({numbers})")
    if better and not worse:
        return SHIP, f"{head}: per-token latency and throughput did not get worse and improved ({numbers})"
    if better and worse:
        return TRADEOFF, (f"{head}: per-token latency and throughput moved in opposite directions, you have "
                          f"a decision to make, not a result ({numbers})")
    return OFF, f"{head}: neither per-token latency nor throughput improved ({numbers})"


def judge_level(level: LevelInput, th: Thresholds) -> LevelVerdict:
    """Apply the rules to one concurrency level."""
    base, cand, spec = level.baseline, level.candidate, level.spec
    changes = {k: change_pct(getattr(base, k), getattr(cand, k)) for k in CHANGE_KEYS}
    itl_band = noise_band("itl_p50_ms", base, cand, th.noise_pct)
    tput_band = noise_band("output_tok_s", base, cand, th.noise_pct)
    itl = direction(changes["itl_p50_ms"], itl_band, lower_is_better=True)
    tput = direction(changes["output_tok_s"], tput_band, lower_is_better=False)
    found = [
        diagnoses.speculation_inactive(level),
        diagnoses.draft_disagrees(spec, th.disagree_acceptance),
        diagnoses.proposal_length(spec.per_position, th.position_acceptance) if spec else None,
        diagnoses.draft_cost(base, cand, noise_band("chunk_gap_p50_ms", base, cand, th.noise_pct)),
        diagnoses.ttft_change(base, cand, noise_band("ttft_p50_ms", base, cand, th.noise_pct)),
    ]
    gaps = _evidence_gaps(level, th)
    if gaps:
        verdict, reasons = INCONCLUSIVE, gaps
    else:
        numbers = "; ".join([
            _fmt_change("ITL p50", "ms", base.itl_p50_ms, cand.itl_p50_ms, changes["itl_p50_ms"], itl),
            _fmt_change("output", "tok/s", base.output_tok_s, cand.output_tok_s,
                        changes["output_tok_s"], tput),
        ])
        verdict, reason = _decide(spec.acceptance, itl, tput, numbers, th)
        reasons = [reason]
    return LevelVerdict(
        users=level.users, verdict=verdict,
        acceptance=spec.acceptance if spec else None,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        per_position=spec.per_position if spec else (),
        baseline=base, candidate=cand, change_pct=changes, reasons=tuple(reasons),
        diagnoses=tuple(d for d in found if d is not None),
    )


def _users(n: int) -> str:
    return f"{n} concurrent user" + ("" if n == 1 else "s")


def ladder_summary(levels: Sequence[LevelVerdict]) -> str:
    """Runs of equal verdicts along the ladder: 'ship up to 4 concurrent users; off from 16 ...'."""
    runs: list[list[LevelVerdict]] = []
    for lv in sorted(levels, key=lambda x: x.users):
        if runs and runs[-1][0].verdict == lv.verdict:
            runs[-1].append(lv)
        else:
            runs.append([lv])
    if len(runs) == 1:
        only = runs[0]
        if len(only) == 1:
            return f"{only[0].verdict} at {_users(only[0].users)}"
        return f"{only[0].verdict} at every measured level ({only[0].users} to {_users(only[-1].users)})"
    parts = []
    for i, run in enumerate(runs):
        lo, hi, v = run[0].users, run[-1].users, run[0].verdict
        if i == 0:
            parts.append(f"{v} up to {_users(hi)}" if lo != hi or lo > 1 else f"{v} at {_users(lo)}")
        elif i == len(runs) - 1:
            parts.append(f"{v} from {_users(lo)}")
        elif lo == hi:
            parts.append(f"{v} at {_users(lo)}")
        else:
            parts.append(f"{v} from {lo} to {_users(hi)}")
    return "; ".join(parts)


def serving_level(levels: Sequence[LevelVerdict], serving: int) -> LevelVerdict:
    """The measured level for the serving concurrency: exact, else the nearest (the higher one on a tie)."""
    return min(levels, key=lambda lv: (abs(lv.users - serving), -lv.users))


def overall(levels: Sequence[LevelVerdict], serving: int | None) -> tuple[str, str]:
    """The overall verdict and its one-sentence summary."""
    ladder = ladder_summary(levels)
    if serving is not None:
        lv = serving_level(levels, serving)
        where = (f"at your serving concurrency ({_users(serving)})" if lv.users == serving else
                 f"at {_users(lv.users)}, the measured level nearest your serving concurrency ({serving})")
        return lv.verdict, f"Speculative decoding: {lv.verdict} {where}; across the ladder: {ladder}."
    judged = {lv.verdict for lv in levels} - {INCONCLUSIVE}
    if not judged:
        verdict = INCONCLUSIVE
    elif len(judged) == 1:
        verdict = judged.pop()
    else:
        verdict = TRADEOFF
    return verdict, f"Speculative decoding: {ladder}."


def build_verdict(
    levels: Sequence[LevelInput],
    th: Thresholds,
    *,
    serving: int | None = None,
    class_stats: Sequence[ClassStats] = (),
    run_warnings: Sequence[tuple[str, str]] = (),
    crosscheck: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
    plots: PlotData | None = None,
) -> Verdict:
    """Judge every common level, then summarise; run-level diagnoses and warnings ride along.

    `run_warnings` are every (arm, line) of the runs' summaries; `crosscheck` the subset where the client's
    totals disagreed with the server's counters, which become `cross_check` diagnoses.
    """
    judged = tuple(judge_level(lv, th) for lv in sorted(levels, key=lambda x: x.users))
    verdict, summary = overall(judged, serving)
    top: list[Diagnosis] = []
    by_class = diagnoses.per_class(class_stats, th.ship_acceptance, th.off_acceptance)
    if by_class:
        top.append(by_class)
    top.extend(diagnoses.cross_check(crosscheck))
    warnings = tuple(f"{arm}: {text}" for arm, text in run_warnings) + tuple(notes)
    return Verdict(verdict=verdict, summary=summary, levels=judged, diagnoses=tuple(top), warnings=warnings,
                   serving_concurrency=serving, plots=plots or PlotData())
