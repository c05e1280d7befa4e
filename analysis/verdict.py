"""Pure rules: per-level measurements and acceptance -> the ship/off/tradeoff/inconclusive verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from locust_spec.core.design import SEQUENTIAL

from . import answers, diagnoses, multiplicity
from . import rule as rules
from .model import (
    NO_DETECTION,
    ArmMetrics,
    ClassStats,
    CrossPoint,
    DesignInfo,
    Diagnosis,
    LevelInput,
    LevelVerdict,
    PlotData,
    Rate,
    Slo,
    Verdict,
    detectable,
    level_label,
    same_kind,
)
from .stats import (
    BETTER,
    POINT,
    SAME,
    UNKNOWN_DIRECTION,
    WORSE,
    Interval,
    change_pct,
    classify,
    crossing,
)
from .stats import INCONCLUSIVE as INCONCLUSIVE_DIR

SHIP, OFF, TRADEOFF, INCONCLUSIVE = "ship", "off", "tradeoff", "inconclusive"
VERDICTS = (SHIP, OFF, TRADEOFF, INCONCLUSIVE)
"""A level's verdict. `tradeoff`: per-token latency (TPOT) and throughput moved apart there."""
DEPENDS = "depends"
"""The overall word only (verdict.json schema 4): the judged levels disagree (ship at 1, off at 64), so the
answer depends on the concurrency served; the summary says up to which level speculation pays."""
OVERALL = (*VERDICTS, DEPENDS)
CHANGE_KEYS = ("tpot_p50_ms", "tpot_p90_ms", "output_tok_s", "goodput_tok_s", "ttft_p50_ms", "itl_p50_ms",
               "itl_p95_ms", "chunk_gap_p50_ms", "chunk_gap_p99_ms", "tokens_per_chunk", "slo_share")
# The per-token latency a reader of the stream experiences: time per output token of each request.
LATENCY_KEYS = ("tpot_p50_ms", "tpot_p90_ms")
_EPS = 1e-12


CLIENT_BEHIND = "the load generator was behind"
"""How a level's reason starts when the client's lag kept it from being judged (spec-ab adds its own fix)."""


@dataclass(frozen=True)
class Thresholds:
    """The rule of thumb's numbers; every one is a command-line option.

    The request and token minimums are floors under the intervals, not the evidence test: a level is
    judged when its deciding intervals clear or stay inside the noise band."""

    ship_acceptance: float = 2 / 3
    off_acceptance: float = 0.5
    noise_pct: float = 2.0
    max_failure_rate: float = 0.05
    min_requests: int = 5
    min_output_tokens: int = 100
    disagree_acceptance: float = 0.1
    position_acceptance: float = 0.5
    max_client_late_share: float = 0.05
    allow_lossy: bool = False
    """Judge a candidate whose answers changed (answers.py) on speed alone."""
    max_lateness_p99_ms: float = 50.0
    """Open loop: a rate level whose requests went out later than this (p99) did not get its rate."""
    max_missed_share: float = 0.01
    """Open loop: nor did one that never sent more than this share of its arrivals."""
    mde_target_pct: float = 10.0
    """A level that could not have detected a change this large (its minimum detectable effect on a
    deciding metric is above it) is said to be under-powered."""
    objective: str = rules.LATENCY
    """The primary question per level (rule.py): latency (TPOT p50), throughput, or goodput (--slo)."""
    margin_pct: float = rules.MARGIN_PCT
    """How much worse a guard may get (its interval's worse end) and still let a level ship."""
    ttft_margin_pct: float = rules.TTFT_MARGIN_PCT
    """TTFT p50's own margin (a draft's first step is a cost per request, not per token)."""


def noise_band(key: str, base: ArmMetrics, cand: ArmMetrics, noise_pct: float) -> float:
    """The band a difference must leave to count: the configured noise, widened to the repeats' spread."""
    band = noise_pct
    for arm in (base, cand):
        lo_hi = arm.spread.get(key)
        mid = getattr(arm, key)
        if lo_hi and mid:
            band = max(band, (lo_hi[1] - lo_hi[0]) / mid * 100.0)
    return band


def interval(level: LevelInput, key: str) -> Interval:
    """The change of `key` with its interval; a hand-built level without rows has its point only."""
    found = level.changes.get(key)
    if found is not None:
        return found
    return Interval.point(change_pct(getattr(level.baseline, key, None), getattr(level.candidate, key, None)))


def band_for(level: LevelInput, key: str, noise_pct: float) -> float:
    """A bootstrapped interval already holds the repeats' spread; a bare point is widened to it."""
    found = level.changes.get(key)
    if found is not None and found.measured:
        return noise_pct
    return noise_band(key, level.baseline, level.candidate, noise_pct)


def direction(level: LevelInput, key: str, noise_pct: float, lower_is_better: bool) -> str:
    """better / worse / same / inconclusive / unknown: the change's interval against the noise band."""
    return classify(interval(level, key), band_for(level, key, noise_pct), lower_is_better=lower_is_better)


def _signed(x: float) -> str:
    return f"{x:+.1f}"


def fmt_change(ci: Interval) -> str:
    """'+1.4% [-0.5, +3.2]' (the 95% interval), or '+1.4%' without one."""
    if ci.estimate is None:
        return "n/a"
    text = f"{ci.estimate:+.1f}%"
    if ci.measured and ci.method != POINT:
        text += f" [{_signed(ci.lo)}, {_signed(ci.hi)}]"
    return text


LABELS = {"tpot_p50_ms": ("TPOT p50", "ms"), "tpot_p90_ms": ("TPOT p90", "ms"),
          "output_tok_s": ("output", "tok/s"), "goodput_tok_s": ("goodput", "tok/s"),
          "ttft_p50_ms": ("TTFT p50", "ms")}


def _numbers(level: LevelInput, keys: Sequence[str], words: dict[str, str]) -> str:
    parts = []
    for key in keys:
        base, cand = getattr(level.baseline, key), getattr(level.candidate, key)
        if base is None or cand is None:
            continue
        label, unit = LABELS[key]
        parts.append(f"{label} {base:.1f} -> {cand:.1f} {unit} ({fmt_change(interval(level, key))}, "
                     f"{words[key]})")
    return "; ".join(parts)


def _brief(level: LevelInput, keys: Sequence[str]) -> str:
    """The deciding changes with their intervals, short enough for the one-line summary."""
    return ", ".join(f"{LABELS[k][0]} {fmt_change(interval(level, k))}" for k in keys
                     if interval(level, k).estimate is not None)


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
        if arm.tpot_p50_ms is None or arm.output_tok_s is None:
            gaps.append(f"{name} has no completed streams to measure TPOT and throughput")
    for name, lag in (("baseline", level.baseline_lag), ("candidate", level.candidate_lag)):
        # A client that falls behind sends less load than asked and stamps arrivals late, and it favours
        # the arm that sends fewer chunks (speculation): its numbers cannot judge the server.
        if lag is not None and lag.late_share > th.max_client_late_share + _EPS:
            gaps.append(f"{name}: {CLIENT_BEHIND} {lag.late_share:.1%} of the time at this "
                        f"level (max {lag.max_lag_ms:.0f} ms): its numbers measure the client, not the "
                        "server; add --processes or workers")
    gaps += _schedule_gaps(level, th)
    swapped = diagnoses.arms_swapped(level)
    if swapped is not None:
        gaps.append(swapped)
    elif level.spec is None:
        gaps.append("no server counters on the candidate at this level (the warnings say why)")
    elif (not_speculation := diagnoses.not_speculation(level.spec)) is not None:
        gaps.append(not_speculation)
    elif level.spec.draft_tokens <= 0:
        gaps.append("the candidate's draft counters did not move at this level (speculation_inactive says "
                    "why)")
    return gaps


def _schedule_gaps(level: LevelInput, th: Thresholds) -> list[str]:
    """Open loop: an arm that did not keep its arrival schedule measured a lower rate than the level's."""
    gaps = []
    for name, arr in (("baseline", level.baseline_arrivals), ("candidate", level.candidate_arrivals)):
        if arr is None:
            continue
        achieved = "" if arr.achieved_rate is None else f", achieving {arr.achieved_rate:.2f} req/s"
        if arr.lateness_p99_ms is not None and arr.lateness_p99_ms > th.max_lateness_p99_ms + _EPS:
            gaps.append(f"{name}: requests went out late (lateness p99 {arr.lateness_p99_ms:.0f} ms, above "
                        f"{th.max_lateness_p99_ms:g}){achieved}: the load generator could not keep "
                        f"{arr.rate:g} req/s; raise --max-concurrency (or -u), add --processes or workers")
        if arr.missed and arr.scheduled and arr.missed > th.max_missed_share * arr.scheduled + _EPS:
            gaps.append(f"{name}: {arr.missed} of {arr.scheduled} arrivals were never sent{achieved} "
                        "(a worker lost, or a backlog at the end): this level was not measured at its rate")
    return gaps


def acceptance_band(acceptance: float | None, ci: Interval | None, th: Thresholds) -> str:
    """ship / off / middle: by the whole interval when there is one (an interval across a threshold leaves
    the measurements to decide), else by the point; unknown (a task without per-request stats), middle."""
    if acceptance is None:
        return "middle"
    lo, hi = (ci.lo, ci.hi) if ci is not None and ci.measured else (acceptance, acceptance)
    if lo >= th.ship_acceptance - _EPS:
        return SHIP
    if hi < th.off_acceptance:
        return OFF
    return "middle"


def _acc_text(acceptance: float | None, ci: Interval | None) -> str:
    if acceptance is None:
        return "acceptance (not measured)"
    text = f"acceptance {acceptance:.2f}"
    if ci is not None and ci.measured and ci.method != POINT:
        text += f" [{ci.lo:.2f}, {ci.hi:.2f}]"
    return text


def _named(level: LevelInput, key: str) -> str:
    return f"{rules.NAMES[key]} {fmt_change(interval(level, key))}"


def _prediction(level: LevelInput, th: Thresholds, mde: dict[str, float | None], primary: str) -> str:
    """What acceptance suggests when the timings could not decide, and what more measuring would buy:
    acceptance explains and predicts, it never ships nor switches off on its own."""
    spec = level.spec
    if spec is None or spec.acceptance is None:
        return ""
    band = acceptance_band(spec.acceptance, level.acceptance_ci, th)
    acc = _acc_text(spec.acceptance, level.acceptance_ci)
    said = {SHIP: f"{acc} suggests it pays", OFF: f"{acc} suggests it does not pay"}.get(
        band, f"{acc} does not say which way")
    more = _more_time(level, primary, mde.get(primary), th)
    return f"; {said}, but only the timings decide{more}"


def _more_time(level: LevelInput, primary: str, mde: float | None, th: Thresholds) -> str:
    """'; about 12 more minutes would detect 10%': the standard error falls as one over the root of the
    units, so the units needed grow with the square of the ratio of what was detectable to the target."""
    ci = level.changes.get(primary)
    if mde is None or ci is None or not ci.units or level.block_s is None or mde <= th.mde_target_pct:
        return ""
    need = ci.units * ((mde - th.noise_pct) / max(th.mde_target_pct - th.noise_pct, 1e-9)) ** 2 - ci.units
    minutes = need * level.block_s * 2 / 60  # a unit is a block pair: one block of each arm
    return f"; about {minutes:.0f} more minutes at this level would detect {th.mde_target_pct:g}%"


def _decide(level: LevelInput, rule: rules.DecisionRule, th: Thresholds, adjusted: dict[str, float | None],
            mde: dict[str, float | None], exploratory: bool) -> tuple[str, str]:
    """The declared rule on one level: the primary beyond the band (its adjusted p within alpha), the
    guards within their margins; which interval straddles when it cannot say."""
    primary, alpha = rule.primary, rule.alpha
    band = band_for(level, primary, th.noise_pct)
    word = direction(level, primary, th.noise_pct, rules.LOWER_IS_BETTER[primary])
    family = "the per-task FDR" if exploratory else f"{rules.CORRECTIONS[rule.correction]} over the levels"
    p = adjusted.get(primary)
    survives = p is not None and p <= alpha + _EPS
    losses, open_guards = [], []
    for key in rule.guards:
        ci = interval(level, key)
        edge = rules.margin(rule, key, band_for(level, key, th.noise_pct))
        lower = rules.LOWER_IS_BETTER[key]
        if not ci.measured:
            open_guards.append(f"{rules.NAMES[key]} (not measured)")
            continue
        worst, best = (ci.hi, ci.lo) if lower else (-ci.lo, -ci.hi)
        q = adjusted.get(key)
        if best > edge and q is not None and q <= alpha + _EPS:
            losses.append(f"{_named(level, key)} worse beyond its {edge:g}% margin")
        elif worst > edge + _EPS:
            open_guards.append(f"{_named(level, key)} (its interval reaches past the {edge:g}% margin)")
    head = _named(level, primary)
    if word == BETTER and survives:
        if losses:
            return TRADEOFF, (f"{head} is better beyond the +-{band:g}% band, but {'; '.join(losses)}: you "
                              "have a decision to make, not a result")
        if open_guards:
            return INCONCLUSIVE, (f"{head} is better beyond the +-{band:g}% band, but a loss cannot be "
                                  f"ruled out on {'; '.join(open_guards)}: measure longer or repeat")
        return SHIP, (f"{head} is better beyond the +-{band:g}% band and every guard stayed within its "
                      f"margin: worth it")
    if word == WORSE and survives:
        return OFF, f"{head} is worse beyond the +-{band:g}% band: a measured loss, switch it off"
    if losses:
        return OFF, f"{'; '.join(losses)} while {head} did not improve: a measured loss, switch it off"
    if word in (BETTER, WORSE):
        why = f"its interval clears the band, but not after {family} (adjusted p {p:.3f} > {alpha:g})"
    elif word == SAME:
        why = f"its interval lies inside the +-{band:g}% band: no change that matters"
    elif word == INCONCLUSIVE_DIR:
        why = f"its interval straddles the +-{band:g}% band"
    else:
        ci = interval(level, primary)
        why = (f"no interval ({ci.method}, {ci.units} unit(s))" if ci.estimate is not None else
               "it could not be measured")
    return INCONCLUSIVE, f"{head}: {why}{_prediction(level, th, mde, primary)}"



def offered(level: float, throughput_key: str) -> bool:
    """At a rate level both arms serve the same arrivals, so the output rate is the offered load, the same
    on both unless an arm falls behind, which its latency shows: per-token latency decides there, and with
    an SLO, goodput. (A closed loop's users send as fast as they are served: there throughput decides.)"""
    return isinstance(level, Rate) and throughput_key == "output_tok_s"


def judge_level(level: LevelInput, th: Thresholds, *, throughput_key: str = "output_tok_s",
                speculating_levels: Sequence[int] = (), adjusted: dict[str, float | None] | None = None,
                exploratory: bool = False) -> LevelVerdict:
    """Apply the declared rule (rule.py) to one level: per-token latency is TPOT (p50 and p90) per
    request, throughput is output (or, with an SLO, goodput) tokens per second, each judged by its
    interval. `adjusted`: the questions' p-values after the family's correction (build_verdict, tasks);
    without it, the level is its own family."""
    base, cand, spec = level.baseline, level.candidate, level.spec
    rule = rule_of(level, th, throughput_key)
    changes = {k: interval(level, k) for k in (*CHANGE_KEYS, "step_ms") if k in level.changes or
               k in CHANGE_KEYS}
    words = {k: direction(level, k, th.noise_pct, lower_is_better=k != throughput_key)
             for k in (*LATENCY_KEYS, throughput_key, "ttft_p50_ms")}
    if throughput_key == "goodput_tok_s" and base.goodput_tok_s == 0 and cand.goodput_tok_s == 0:
        words[throughput_key] = SAME  # neither arm served a request within the SLO: no change to measure
    raw = questions_of(level, th, throughput_key)
    adjusted = rules.weighted(rule, raw) if adjusted is None else adjusted
    deciding = rule.keys
    found = [
        diagnoses.speculation_inactive(level, speculating_levels),
        diagnoses.synthetic_acceptance(spec),
        diagnoses.draft_disagrees(spec, th.disagree_acceptance),
        (diagnoses.proposal_length(spec.per_position, th.position_acceptance)
         if spec and diagnoses.not_speculation(spec) is None else None),
        diagnoses.draft_cost(level, th.noise_pct),
        diagnoses.ttft_change(level, words["ttft_p50_ms"]),
        diagnoses.baseline_speculating(level),
        diagnoses.block_spill(level),
    ]
    gaps = _evidence_gaps(level, th)
    mde = {k: changes[k].mde_pct(band_for(level, k, th.noise_pct)) for k in deciding if k in changes}
    power = power_note(level, mde, deciding, th)
    if gaps:
        verdict, reasons, brief = INCONCLUSIVE, gaps, gaps[0]
    else:
        verdict, reason = _decide(level, rule, th, adjusted, mde, exploratory)
        reasons = [f"{reason} ({_numbers(level, deciding, words)})"]
        if offered(level.users, throughput_key) and rule.objective == rules.LATENCY:
            reasons.append("at a rate level both arms serve the same arrivals, so throughput is the offered "
                           "load and guards nothing (with --slo, goodput does)")
        # the summary line names the question and the other of latency and throughput
        brief = _brief(level, [k for k in deciding if k in (*LATENCY_KEYS[:1], throughput_key)])
    if power is not None and verdict == INCONCLUSIVE and not gaps:
        reasons.append(power)
    lossy = answers.lossy_reason(level.answers, th.allow_lossy)
    if lossy is not None:
        if not th.allow_lossy and verdict in (SHIP, TRADEOFF):
            verdict, brief = level.answers.held, lossy
        reasons = [lossy, *reasons]
    tests = {k: {"role": rule.role(k), "p_value": raw.get(k), "p_adjusted": adjusted.get(k),
                 "exploratory": exploratory} for k in deciding}
    return LevelVerdict(
        users=level.users, verdict=verdict,
        acceptance=spec.acceptance if spec else None,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        per_position=spec.per_position if spec else (),
        baseline=base, candidate=cand, changes=changes, reasons=tuple(reasons),
        diagnoses=tuple(d for d in found if d is not None), brief=brief,
        acceptance_ci=level.acceptance_ci, baseline_batch=level.baseline_batch,
        candidate_batch=level.candidate_batch, answers=level.answers,
        baseline_arrivals=level.baseline_arrivals, candidate_arrivals=level.candidate_arrivals,
        directions=words, mde_pct=mde, power_note=power, design=level.design, tests=tests,
        exploratory=exploratory,
    )


def rule_of(level: LevelInput, th: Thresholds, throughput_key: str) -> rules.DecisionRule:
    """The declared rule at this level (a rate level's throughput is the offered load: no guard there)."""
    return declared(th, throughput_key, offered(level.users, throughput_key))


def declared(th: Thresholds, throughput_key: str, at_rate: bool) -> rules.DecisionRule:
    """The decision rule the thresholds declare (`at_rate`: a rate level, throughput the offered load)."""
    return rules.rule_for(th.objective, throughput_key, offered=at_rate, margin_pct=th.margin_pct,
                          noise_pct=th.noise_pct, ttft_margin_pct=th.ttft_margin_pct)


def questions_of(level: LevelInput, th: Thresholds, throughput_key: str) -> dict[str, float | None]:
    """The level's questions' raw p-values, for its family's correction."""
    return rules.questions(rule_of(level, th, throughput_key), lambda k: interval(level, k),
                           lambda k: band_for(level, k, th.noise_pct))



def power_note(level: LevelInput, mde: dict[str, float | None], deciding: Sequence[str],
               th: Thresholds) -> str | None:
    """'under-powered: ...' when a deciding metric had no interval over units or could only have shown a
    change larger than `mde_target_pct`; None when the level could see changes that size."""
    missing = [LABELS[k][0] for k in deciding if not interval(level, k).measured
               and getattr(level.baseline, k) is not None and getattr(level.candidate, k) is not None]
    units = min((level.changes[k].units for k in deciding if k in level.changes and level.changes[k].units),
                default=0)
    if missing:
        return (f"under-powered: no interval for {', '.join(missing)} ({units} independent unit(s)); "
                "measure longer (more blocks) or repeat")
    large = [(k, v) for k, v in mde.items() if v is not None and v > th.mde_target_pct]
    if not large:
        return None
    blind = [LABELS[k][0] for k, v in large if not detectable(v)]
    if blind:
        return (f"under-powered: this level {NO_DETECTION} ({', '.join(blind)}, over {units} independent "
                "units); measure longer or repeat")
    shown = ", ".join(f"{LABELS[k][0]} +-{v:.0f}%" for k, v in large)
    return (f"under-powered: the smallest changes this level could detect are {shown} (over {units} "
            f"independent units), above the {th.mde_target_pct:g}% worth detecting; measure longer or repeat")


def _users(n: float) -> str:
    return level_label(n, concurrent=True)


def _batch(lv: LevelVerdict) -> float | None:
    return lv.candidate_batch.size if lv.candidate_batch is not None else None


def _batch_text(run: Sequence[LevelVerdict]) -> str:
    """' (batch ~3)' or ' (batch ~3 to ~12)': the candidate server's time-weighted running requests."""
    ends = [b for b in (_batch(run[0]), _batch(run[-1])) if b is not None]
    if not ends:
        return ""
    if len(run) == 1 or len(ends) == 1 or round(ends[0]) == round(ends[-1]):
        return f" (batch ~{ends[-1]:.0f})"
    return f" (batch ~{ends[0]:.0f} to ~{ends[-1]:.0f})"


def ladder_summary(levels: Sequence[LevelVerdict]) -> str:
    """Runs of equal verdicts along the ladder with the batch the server ran, and, for every run that did
    not ship, why: 'ship up to 4 concurrent users (batch ~4); inconclusive at 16 ... (batch ~15): ...'."""
    runs: list[list[LevelVerdict]] = []
    for lv in sorted(levels, key=lambda x: x.users):
        if runs and runs[-1][0].verdict == lv.verdict:
            runs[-1].append(lv)
        else:
            runs.append([lv])
    parts = []
    for i, run in enumerate(runs):
        lo, hi, v = run[0].users, run[-1].users, run[0].verdict
        if len(runs) == 1:
            where = (f"at {_users(lo)}" if lo == hi else
                     f"at every measured level ({lo:g} to {_users(hi)})")
        elif i == 0:
            where = f"up to {_users(hi)}" if lo != hi or lo > 1 else f"at {_users(lo)}"
        elif lo == hi:
            where = f"at {_users(lo)}"
        elif i == len(runs) - 1:
            where = f"from {_users(lo)}"
        else:
            where = f"from {lo:g} to {_users(hi)}"
        text = f"{v} {where}{_batch_text(run)}"
        if v != SHIP:
            whys = [f"at {lv.users}: {lv.brief}" if len(run) > 1 else lv.brief for lv in run if lv.brief]
            if whys:
                text += ": " + "; ".join(whys)
        parts.append(text)
    return "; ".join(parts)


def serving_level(levels: Sequence[LevelVerdict], serving: int) -> LevelVerdict:
    """The measured level for the serving concurrency: exact, else the nearest (the higher one on a tie)."""
    return min(levels, key=lambda lv: (abs(lv.users - serving), -lv.users))


def around(levels: Sequence[LevelVerdict], serving: int) -> tuple[LevelVerdict, LevelVerdict] | None:
    """The measured levels either side of a serving concurrency between them; None when it is measured or
    outside the ladder."""
    ordered = sorted(levels, key=lambda lv: lv.users)
    return next(((a, b) for a, b in zip(ordered, ordered[1:], strict=False) if a.users < serving < b.users),
                None)


def overall(levels: Sequence[LevelVerdict], serving: int | None,
            cross: Sequence[CrossPoint] = ()) -> tuple[str, str]:
    """The overall verdict and its one-sentence summary, which names every level's verdict.

    Without a serving concurrency: one verdict when every level agrees; `depends` when judged levels
    differ, with a sentence saying up to which level speculation pays (`cross`: the crossover, where the
    intervals support one); inconclusive when the judged levels agree but another level could not be judged
    (the ladder does not support one word)."""
    ladder = ladder_summary(levels)
    if serving is not None:
        sides = around(levels, serving)
        if sides is not None and sides[0].verdict != sides[1].verdict:
            low, high = sides
            return INCONCLUSIVE, (
                f"Speculative decoding: not measured at your serving concurrency ({_users(serving)}), and "
                f"the measured levels around it disagree ({low.verdict} at {_users(low.users)}, "
                f"{high.verdict} at {_users(high.users)}): measure there, e.g. --levels "
                f"{low.users},{serving},{high.users}; across the ladder: {ladder}.")
        lv = serving_level(levels, serving)
        where = (f"at your serving concurrency ({_users(serving)})" if lv.users == serving else
                 f"at {_users(lv.users)}, the measured level nearest your serving concurrency ({serving})")
        return lv.verdict, f"Speculative decoding: {lv.verdict} {where}; across the ladder: {ladder}."
    verdicts = {lv.verdict for lv in levels}
    judged = verdicts - {INCONCLUSIVE}
    if len(judged) > 1:
        return DEPENDS, f"Speculative decoding: {ladder}. {pays_up_to(levels, cross)}"
    verdict = verdicts.pop() if len(verdicts) == 1 else INCONCLUSIVE
    return verdict, f"Speculative decoding: {ladder}."


SERVING_HINT = "spec-verdict --serving-concurrency N gives the verdict at the concurrency you serve."


def pays_up_to(levels: Sequence[LevelVerdict], cross: Sequence[CrossPoint] = ()) -> str:
    """The sentence for levels that disagree: up to which level speculation pays (the highest of the
    shipping levels at the bottom of the ladder, below the first judged level that does not ship), where
    the crossover puts the turn, and how to get one word."""
    ordered = [lv for lv in sorted(levels, key=lambda lv: lv.users) if lv.verdict != INCONCLUSIVE]
    first_other = next((i for i, lv in enumerate(ordered) if lv.verdict != SHIP), len(ordered))
    turns = "; ".join(c.note for c in cross if c.users is not None)
    if first_other == 0:
        ships = [lv.users for lv in ordered if lv.verdict == SHIP]
        head = (f"It does not pay at the lowest level ({_users(ordered[0].users)}: {ordered[0].verdict})"
                + (f"; it ships only at {', '.join(_users(u) for u in ships)}" if ships else
                   "; no level ships"))
    else:
        last, above = ordered[first_other - 1], ordered[first_other]
        head = (f"Speculation pays up to {_users(last.users)}{_batch_text([last])}, not at "
                f"{_users(above.users)} ({above.verdict})")
    return f"{head}{f'; {turns}' if turns else ''}. {SERVING_HINT}"


def _gain(ci: Interval, lower_is_better: bool) -> Interval:
    """A change as a gain (positive = speculation pays), its interval flipped for lower-is-better."""
    if not lower_is_better or ci.estimate is None:
        return ci
    return Interval(-ci.estimate, None if ci.hi is None else -ci.hi, None if ci.lo is None else -ci.lo,
                    ci.confidence, ci.method, ci.units)


def _batch_at(levels: Sequence[LevelVerdict], users: float | None) -> float | None:
    """The candidate's batch at an interpolated concurrency (linear in log users, like the crossing)."""
    if users is None:
        return None
    for a, b in zip(levels, levels[1:], strict=False):
        ba, bb = _batch(a), _batch(b)
        if a.users <= users <= b.users and ba is not None and bb is not None:
            t = math.log(users / a.users) / math.log(b.users / a.users)
            return ba + t * (bb - ba)
    return None


def _status_text(ordered: Sequence[LevelVerdict], key: str) -> str:
    """'better at 1; inconclusive at 16, 64': each level's direction on `key`, runs of equal ones joined."""
    runs: list[tuple[str, list[int]]] = []
    for lv in ordered:
        word = lv.directions.get(key, UNKNOWN_DIRECTION)
        if runs and runs[-1][0] == word:
            runs[-1][1].append(lv.users)
        else:
            runs.append((word, [lv.users]))
    return "; ".join(f"{word} at {', '.join(map(str, users))}" for word, users in runs)


CROSSING_METHOD = ("interpolated linearly in log users (or req/s) between the two measured levels either "
                   "side; the range is where the levels' interval bounds cross under the same straight line, "
                   "not a confidence interval: the curve between measured levels is not measured")


def crossover(levels: Sequence[LevelVerdict], throughput_key: str) -> tuple[CrossPoint, ...]:
    """Where speculation stops paying along the ladder, on TPOT p50 and on throughput, claimed only as far
    as the levels' intervals go: a crossing needs a level that is better (its interval beyond the noise
    band) before one that is worse; it is then interpolated in log users where the estimates cross zero,
    with the range where the intervals' bounds do (None: beyond the measured levels on that side).
    Otherwise the note says what each level's interval allows."""
    ordered = sorted(levels, key=lambda lv: lv.users)
    if len(ordered) < 2:
        return ()
    users = [lv.users for lv in ordered]
    out = []
    keys = (("tpot_p50_ms", True),) if offered(ordered[0].users, throughput_key) else (
        ("tpot_p50_ms", True), (throughput_key, False))
    for key, lower in keys:
        words = [lv.directions.get(key, UNKNOWN_DIRECTION) for lv in ordered]
        gains = [_gain(lv.changes.get(key, Interval.point(None)), lower) for lv in ordered]
        found = crossing(users, gains, 0.0)
        label = LABELS[key][0]
        supported = (found.x is not None and BETTER in words[:users.index(found.between[0]) + 1]
                     and WORSE in words[users.index(found.between[1]):])
        if supported:
            unit = "req/s" if isinstance(users[0], Rate) else "concurrent users"
            note = (f"{label}: speculation stops paying at about {found.x:.1f} {unit}, "
                    f"between {found.between[0]:g} and {found.between[1]:g}")
            kind = users[0]
            out.append(CrossPoint(key, same_kind(kind, found.x),
                                  (same_kind(kind, found.lo), same_kind(kind, found.hi)),
                                  tuple(same_kind(kind, b) for b in found.between),
                                  _batch_at(ordered, found.x), note, CROSSING_METHOD))
            continue
        if all(w == BETTER for w in words):
            note = f"{label}: speculation pays at every measured level"
        elif words[0] == WORSE:
            note = f"{label}: speculation does not pay even at the lowest level"
        else:
            note = f"{label}: no crossing the intervals support ({_status_text(ordered, key)})"
        out.append(CrossPoint(key, None, (None, None), None, None, note))
    return tuple(out)


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
    slo: Slo | None = None,
    design: DesignInfo | None = None,
) -> Verdict:
    """Judge every common level, then summarise; run-level diagnoses and warnings ride along.

    `run_warnings` are every (arm, line) of the runs' summaries; `crosscheck` the subset where the client's
    totals disagreed with the server's counters, which become `cross_check` diagnoses. With an SLO,
    goodput is the throughput the rules judge.
    """
    throughput_key = "goodput_tok_s" if slo is not None else "output_tok_s"
    speculating = tuple(lv.users for lv in levels if lv.spec is not None and lv.spec.draft_tokens > 0)
    ordered = sorted(levels, key=lambda x: x.users)
    adjusted = adjust_family(ordered, th, throughput_key, multiplicity.HOLM)
    judged = tuple(judge_level(lv, th, throughput_key=throughput_key, speculating_levels=speculating,
                               adjusted=adj) for lv, adj in zip(ordered, adjusted, strict=True))
    cross = crossover(judged, throughput_key)
    verdict, summary = overall(judged, serving, cross)
    top: list[Diagnosis] = []
    by_class = diagnoses.per_class(class_stats, th.ship_acceptance, th.off_acceptance)
    if by_class:
        top.append(by_class)
    top.extend(diagnoses.cross_check(crosscheck))
    speculating_base = [lv.users for lv in judged if any(d.kind == diagnoses.BASELINE_SPECULATING
                                                         for d in lv.diagnoses)]
    if speculating_base:
        notes = (*notes, f"the baseline itself speculated at {', '.join(map(level_label, speculating_base))} "
                         "(baseline_speculating): this compares two speculating servers, not speculation "
                         "against none")
    warnings = tuple(f"{arm}: {text}" for arm, text in run_warnings) + tuple(notes)
    rule = declared(th, throughput_key, bool(ordered) and offered(ordered[0].users, throughput_key))
    return Verdict(verdict=verdict, summary=summary, levels=judged, diagnoses=tuple(top), warnings=warnings,
                   serving_concurrency=serving, plots=plots or PlotData(),
                   crossover=cross, slo=slo,
                   design=design or DesignInfo(SEQUENTIAL), rule=rule)


def adjust_family(levels: Sequence[LevelInput], th: Thresholds, throughput_key: str,
                  method: str) -> list[dict[str, float | None]]:
    """Every level's questions adjusted together: Holm over the ladder's levels, Benjamini-Hochberg over a
    per-task breakdown (multiplicity.py), each level's questions weighted within it (rule.weighted)."""
    weighted = [rules.weighted(rule_of(lv, th, throughput_key), questions_of(lv, th, throughput_key))
                for lv in levels]
    return multiplicity.adjust(weighted, method)
