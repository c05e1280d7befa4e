"""Pure diagnoses: why speculation pays or not, each with the evidence that triggered it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from locust_spec.metrics.counters import DIFFUSION_KIND
from locust_spec.metrics.crosscheck import CANDIDATE_METRICS_OPTIONS
from locust_spec.metrics.synthetic import synthetic_length

from .model import ClassStats, Diagnosis, LevelInput, SpecStats, level_label
from .stats import BETTER, WORSE, Interval, change_pct, classify

# Tokens per chunk above this (and above the baseline's by as much) mean the target verified drafts.
SPECULATING_TOKENS_PER_CHUNK = 1.1
# vLLM's dynamic speculation schedule: a per-batch-size number of speculative tokens, 0 above some batch.
DYNAMIC_SCHEDULE = "num_speculative_tokens_per_batch_size"


def proposal_length(
    per_position: Sequence[float], position_acceptance: float, steep_by: int = 2
) -> Diagnosis | None:
    """Per-position acceptance below half of position 0 by position `steep_by`: propose fewer."""
    if len(per_position) <= 1 or per_position[0] <= 0:
        return None
    steep = [i for i, p in enumerate(per_position[1 : steep_by + 1], start=1) if p < per_position[0] / 2]
    if not steep:
        return None
    k = 0
    while k < len(per_position) and per_position[k] >= position_acceptance:
        k += 1
    k = max(k, 1)
    if k >= len(per_position):
        return None
    shown = ", ".join(f"{p:.2f}" for p in per_position)
    return Diagnosis(
        "proposal_length",
        f"acceptance per draft position falls steeply ({shown}): set num_speculative_tokens to {k}, "
        f"the positions whose acceptance stays at or above {position_acceptance:.2f}",
        {"per_position": list(per_position), "falls_below_half_at": steep[0], "suggested_k": k,
         "current_k": len(per_position), "position_threshold": position_acceptance},
    )


def arms_swapped(level: LevelInput) -> str | None:
    """The baseline's draft counters moved and the candidate's did not: the line that says so, else None."""
    base, cand = level.baseline_spec, level.spec
    if base is None or base.draft_tokens <= 0 or (cand is not None and cand.draft_tokens > 0):
        return None
    return (f"arms swapped? the baseline's draft counters moved ({base.draft_tokens:.0f} draft tokens) and "
            "the candidate's did not: give the run without speculation first (spec-verdict BASELINE "
            "CANDIDATE)")


def speculation_inactive(level: LevelInput, speculating_levels: Sequence[int] = ()) -> Diagnosis | None:
    """The candidate completed requests but the draft counters did not move: say the likely cause, and
    name every known one when the evidence does not single one out."""
    spec, cand = level.spec, level.candidate
    completed = cand.requests - cand.failures
    if spec is None or completed <= 0 or spec.drafts > 0 or spec.draft_tokens > 0:
        return None
    if spec.server_kind == DIFFUSION_KIND:
        return None  # nothing to activate: not_speculation says so
    elsewhere = sorted(u for u in speculating_levels if u != level.users)
    batch = level.candidate_batch.size if level.candidate_batch is not None else None
    evidence = {"completed_requests": completed, "drafts": spec.drafts, "draft_tokens": spec.draft_tokens,
                "server_generation_tokens": spec.generation_tokens, "server_kind": spec.server_kind,
                "families_seen": list(spec.families_seen), "speculating_levels": elsewhere,
                "batch": batch}
    has_spec_family = any("spec" in f or "draft" in f for f in spec.families_seen)
    wrong_url = f"the candidate's metrics URL points at another server ({CANDIDATE_METRICS_OPTIONS})"
    base_tpc = level.baseline.tokens_per_chunk
    swapped = arms_swapped(level)
    if swapped is not None:
        cause = swapped
    elif spec.generation_tokens <= 0:
        cause = ("the scraped server counted no generated tokens while the client received "
                 f"{cand.output_tokens}: {wrong_url}")
    elif level.rows_show_speculation:
        cause = ("the per-request stats show drafted tokens but the scraped counters did not move: "
                 f"{wrong_url}")
    elif (cand.tokens_per_chunk or 0) > SPECULATING_TOKENS_PER_CHUNK * max(base_tpc or 1.0, 1.0):
        cause = (f"the client received {cand.tokens_per_chunk:.2f} tokens per chunk (baseline "
                 f"{base_tpc or 1.0:.2f}), so the candidate did speculate: {wrong_url}")
    elif not has_spec_family:
        cause = ("the server exposes no speculative-decoding counters: speculation is disabled "
                 "(no --speculative-config) or the metrics URL is wrong")
    elif elsewhere:
        at = f" (batch ~{batch:.0f})" if batch is not None else ""
        cause = (f"the same server drafted at {', '.join(f'{u:g}' for u in elsewhere[:-1])}"
                 f"{', ' if len(elsewhere) > 1 else ''}{level_label(elsewhere[-1])} but not here{at}: a "
                 f"speculation schedule by batch size turned it off (vLLM's {DYNAMIC_SCHEDULE} with 0 "
                 "tokens at this batch, or a draft disabled above a batch size); otherwise structured "
                 "output with a grammar at this level")
    else:
        cause = ("speculation is configured but never drafted; known causes: structured output with a "
                 "grammar (the server falls back to plain decoding), a dynamic schedule "
                 f"({DYNAMIC_SCHEDULE}) giving 0 speculative tokens at this batch, an n-gram drafter "
                 "whose prompts never repeat (no match, no proposal), or prompts too long for the "
                 "draft's context")
    return Diagnosis("speculation_inactive",
                     f"speculation inactive at {level_label(level.users)}: {completed} requests completed "
                     f"but the draft counters did not move; {cause}", evidence)


NOT_APPLICABLE = "not applicable (diffusion decoding)"


def _positions(per_position: Sequence[float]) -> str:
    return ", ".join(f"{p:.2f}" for p in per_position)


def not_speculation(spec: SpecStats) -> str | None:
    """Why the candidate's counters cannot judge speculation at all: a diffusion LM, which does not
    speculate, or vLLM's synthetic acceptance, which accepts what its config says. None otherwise."""
    if spec.server_kind == DIFFUSION_KIND:
        return (f"{NOT_APPLICABLE}: the server counts denoising steps and committed tokens "
                "(vllm:diffusion_*), not drafts: a diffusion LM decodes whole blocks, and speculative "
                "decoding does not apply to it")
    length = synthetic_length(spec.per_position, spec.drafts)
    if length is None:
        return None
    return ("synthetic acceptance, never ship on it: acceptance per draft position "
            f"{_positions(spec.per_position)} over {spec.drafts:.0f} drafts is vLLM's "
            f"rejection_sample_method \"synthetic\" (synthetic_acceptance_length {length:.2f}), which "
            "accepts what its config says whatever the draft proposes: neither this acceptance nor the "
            "speed measured with it says anything of your draft, and the answers are not the model's; "
            "measure with the standard rejection sampler")


def synthetic_acceptance(spec: SpecStats | None) -> Diagnosis | None:
    """The per-position counters show vLLM's synthetic acceptance (metrics/synthetic.py)."""
    if spec is None or spec.server_kind == DIFFUSION_KIND:
        return None
    length = synthetic_length(spec.per_position, spec.drafts)
    if length is None:
        return None
    return Diagnosis("synthetic_acceptance", not_speculation(spec) or "",
                     {"per_position": list(spec.per_position), "drafts": spec.drafts,
                      "synthetic_acceptance_length": length})


def draft_disagrees(spec: SpecStats | None, disagree_acceptance: float) -> Diagnosis | None:
    """Acceptance near zero with drafts proposed: the draft and the target do not agree."""
    if spec is None or spec.acceptance is None or spec.draft_tokens <= 0 or not_speculation(spec):
        return None
    if spec.acceptance >= disagree_acceptance:
        return None
    return Diagnosis(
        "draft_disagrees",
        f"acceptance {spec.acceptance:.1%} over {spec.draft_tokens:.0f} draft tokens: the target rejects "
        "nearly everything the draft proposes; for a draft model check for a tokenizer/vocabulary mismatch "
        "with `spec-verdict vocab TARGET DRAFT`; for n-gram the traffic does not repeat its context",
        {"acceptance": spec.acceptance, "draft_tokens": spec.draft_tokens, "threshold": disagree_acceptance},
    )


def _evidence(ci: Interval) -> list[float | None]:
    return [ci.estimate, ci.lo, ci.hi]


def draft_cost(level: LevelInput, band_pct: float) -> Diagnosis | None:
    """The draft eats more than it earns: the candidate did deliver more tokens per chunk (it drafted), yet
    each step got slower by more than that, beyond the noise band: the low end of the step's rise clears
    the high end of the tokens-per-chunk rise. Per token, the stream is then slower than without the draft.

    Without a measured rise in tokens per chunk nothing was drafted to pay for, and a slower step is
    not the draft's cost (speculation_inactive says why instead)."""
    tpc = level.changes.get("tokens_per_chunk")
    step = level.changes.get("step_ms")
    if tpc is None or step is None or not (tpc.measured and step.measured):
        return None
    if classify(tpc, band_pct, lower_is_better=False) != BETTER:
        return None
    if classify(step, band_pct, lower_is_better=True) != WORSE:
        return None
    if 1 + step.lo / 100 <= (1 + tpc.hi / 100) * (1 + band_pct / 100):
        return None
    base, cand = level.baseline, level.candidate
    tpot = level.changes.get("tpot_p50_ms")
    return Diagnosis(
        "draft_cost",
        f"each step got slower by {step.estimate:+.0f}% [{step.lo:+.0f}, {step.hi:+.0f}] while tokens per "
        f"chunk rose only {tpc.estimate:+.0f}% [{tpc.lo:+.0f}, {tpc.hi:+.0f}] "
        f"({base.tokens_per_chunk:.2f} -> {cand.tokens_per_chunk:.2f}): the draft eats more than it earns",
        {"tokens_per_chunk": [base.tokens_per_chunk, cand.tokens_per_chunk],
         "step_change_pct": _evidence(step), "tokens_per_chunk_change_pct": _evidence(tpc),
         "tpot_p50_change_pct": _evidence(tpot) if tpot is not None else None},
    )


def ttft_change(level: LevelInput, word: str) -> Diagnosis | None:
    """A TTFT p50 rise whose interval clears the noise band: the draft's cost on the first token. (A fall
    is no cost of speculation to diagnose; the table shows it.)"""
    base, cand = level.baseline, level.candidate
    change = change_pct(base.ttft_p50_ms, cand.ttft_p50_ms)
    if change is None or word != WORSE:
        return None
    ci = level.changes.get("ttft_p50_ms")
    shown = f"{change:+.1f}%" + (f" [{ci.lo:+.1f}, {ci.hi:+.1f}]" if ci is not None and ci.measured else "")
    return Diagnosis(
        "ttft_change",
        f"TTFT p50 rose {shown} ({base.ttft_p50_ms:.1f} -> {cand.ttft_p50_ms:.1f} ms): the draft adds work "
        "to the first step",
        {"ttft_p50_ms": [base.ttft_p50_ms, cand.ttft_p50_ms], "change_pct": change,
         "ci95_pct": ci.as_list() if ci is not None else None},
    )


BASELINE_SPECULATING = "baseline_speculating"
SPILL_SHARE = 0.3
"""More of an arm's request time than this outside its own blocks: its blocks are short for its requests."""


def block_spill(level: LevelInput) -> Diagnosis | None:
    """Under the interleaved design a user stops sending when its arm's block ends, and the requests
    still running finish at a falling concurrency. When that is a large share of an arm's request time,
    the measured difference is pulled towards zero (the slower arm's longer requests spend more of their
    time in that tail)."""
    if not level.spill or max(level.spill.values()) <= SPILL_SHARE:
        return None
    arm = max(level.spill, key=level.spill.get)
    others = ", ".join(f"{name} {share:.0%}" for name, share in level.spill.items() if name != arm)
    block = f" (blocks of {level.block_s:g}s)" if level.block_s else ""
    return Diagnosis(
        "block_spill",
        f"requests outlast their blocks{block}: {level.spill[arm]:.0%} of the {arm}'s request time at "
        f"{level_label(level.users)} ran outside its own blocks ({others}), mostly after a block ended at a "
        "falling concurrency, which pulls the measured difference towards zero; use a --block-time several "
        "times the longest requests at this level",
        {"spill_share": dict(level.spill), "block_s": level.block_s, "threshold": SPILL_SHARE},
    )




def baseline_speculating(level: LevelInput) -> Diagnosis | None:
    """The baseline's own counters (or its requests' speculative stats) show drafted tokens: the A/B then
    compares two speculating servers, and says nothing about switching speculation on."""
    spec = level.baseline_spec
    drafted = spec.draft_tokens if spec is not None else 0.0
    if drafted <= 0:
        return None
    tpc = level.baseline.tokens_per_chunk
    shown = f", {tpc:.2f} tokens per chunk" if tpc is not None else ""
    return Diagnosis(
        BASELINE_SPECULATING,
        f"the baseline speculated at {level_label(level.users)}: its counters show {drafted:.0f} draft tokens"
        f"{shown}; serve the baseline without --speculative-config (or point --metrics-url-baseline at "
        "it) to measure speculation against none",
        {"draft_tokens": drafted, "acceptance": spec.acceptance, "tokens_per_chunk": tpc},
    )


def per_class(stats: Sequence[ClassStats], ship_acceptance: float, off_acceptance: float) -> Diagnosis | None:
    """Acceptance and latency per prompt class, from per-request speculative-decoding stats."""
    measured = [s for s in stats if s.acceptance is not None]
    if not measured:
        return None
    pays = [s.cls for s in measured if s.acceptance >= ship_acceptance - 1e-12]
    not_pays = [s.cls for s in measured if s.acceptance < off_acceptance]
    parts = []
    if pays:
        parts.append(f"pays on {', '.join(pays)}")
    if not_pays:
        parts.append(f"not on {', '.join(not_pays)}")
    middle = [s.cls for s in measured if s.cls not in pays and s.cls not in not_pays]
    if middle:
        parts.append(f"in between on {', '.join(middle)}")
    detail = "; ".join(f"{s.cls} {s.acceptance:.0%}" for s in measured)
    return Diagnosis(
        "per_class",
        f"acceptance per prompt class: {', '.join(parts)} ({detail})",
        {"classes": [{"class": s.cls, "acceptance": s.acceptance, "draft_tokens": s.draft_tokens,
                      "requests": s.requests, "baseline_tpot_p50_ms": s.baseline_tpot_p50_ms,
                      "candidate_tpot_p50_ms": s.candidate_tpot_p50_ms} for s in measured]},
    )


def cross_check(warnings: Iterable[tuple[str, str]]) -> list[Diagnosis]:
    """The runs' own cross-check warnings (client vs server), one diagnosis each, naming the arm."""
    return [Diagnosis("cross_check", f"{arm}: {text}", {"arm": arm, "warning": text})
            for arm, text in warnings]
