"""Pure diagnoses: why speculation pays or not, each with the evidence that triggered it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from locust_spec.analysis.model import ArmMetrics, ClassStats, Diagnosis, LevelInput, SpecStats

from locust_spec.crosscheck import CANDIDATE_METRICS_OPTIONS

# Tokens per chunk above this (and above the baseline's by as much) mean the target verified drafts.
SPECULATING_TOKENS_PER_CHUNK = 1.1


def _pct(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base <= 0:
        return None
    return (cand - base) / base * 100.0


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


def speculation_inactive(level: LevelInput) -> Diagnosis | None:
    """The candidate completed requests but the draft counters did not move: say the likely cause."""
    spec, cand = level.spec, level.candidate
    completed = cand.requests - cand.failures
    if spec is None or completed <= 0 or spec.drafts > 0 or spec.draft_tokens > 0:
        return None
    evidence = {"completed_requests": completed, "drafts": spec.drafts, "draft_tokens": spec.draft_tokens,
                "server_generation_tokens": spec.generation_tokens, "server_kind": spec.server_kind,
                "families_seen": list(spec.families_seen)}
    has_spec_family = any("spec" in f or "draft" in f for f in spec.families_seen)
    wrong_url = f"the candidate's metrics URL points at another server ({CANDIDATE_METRICS_OPTIONS})"
    base_tpc = level.baseline.tokens_per_chunk
    if spec.generation_tokens <= 0:
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
    else:
        cause = ("speculation is configured but never drafted: e.g. structured output with a grammar "
                 "makes the server fall back to plain decoding")
    return Diagnosis("speculation_inactive",
                     f"speculation inactive at {level.users} users: {completed} requests completed but "
                     f"the draft counters did not move; {cause}", evidence)


def draft_disagrees(spec: SpecStats | None, disagree_acceptance: float) -> Diagnosis | None:
    """Acceptance near zero with drafts proposed: the draft and the target do not agree."""
    if spec is None or spec.acceptance is None or spec.draft_tokens <= 0:
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


def draft_cost(base: ArmMetrics, cand: ArmMetrics, band_pct: float) -> Diagnosis | None:
    """Step time (chunk gap) rising more than tokens per chunk: the draft eats more than it earns."""
    gap = _pct(base.chunk_gap_p50_ms, cand.chunk_gap_p50_ms)
    tpc = _pct(base.tokens_per_chunk, cand.tokens_per_chunk)
    if gap is None or tpc is None or gap <= band_pct:
        return None
    gap_ratio = cand.chunk_gap_p50_ms / base.chunk_gap_p50_ms
    tpc_ratio = cand.tokens_per_chunk / base.tokens_per_chunk
    if gap_ratio <= tpc_ratio * (1 + band_pct / 100):
        return None
    return Diagnosis(
        "draft_cost",
        f"step time (chunk gap p50) rose {gap:+.0f}% ({base.chunk_gap_p50_ms:.1f} -> "
        f"{cand.chunk_gap_p50_ms:.1f} ms) while tokens per chunk rose only {tpc:+.0f}% "
        f"({base.tokens_per_chunk:.2f} -> {cand.tokens_per_chunk:.2f}): the draft eats more than it earns",
        {"chunk_gap_p50_ms": [base.chunk_gap_p50_ms, cand.chunk_gap_p50_ms],
         "tokens_per_chunk": [base.tokens_per_chunk, cand.tokens_per_chunk],
         "chunk_gap_change_pct": gap, "tokens_per_chunk_change_pct": tpc},
    )


def ttft_change(base: ArmMetrics, cand: ArmMetrics, band_pct: float) -> Diagnosis | None:
    """Report a TTFT p50 change beyond the noise band (speculation can raise TTFT)."""
    change = _pct(base.ttft_p50_ms, cand.ttft_p50_ms)
    if change is None or abs(change) <= band_pct:
        return None
    word = "rose" if change > 0 else "fell"
    why = ": the draft adds work to the first step" if change > 0 else ""
    return Diagnosis(
        "ttft_change",
        f"TTFT p50 {word} {change:+.1f}% ({base.ttft_p50_ms:.1f} -> {cand.ttft_p50_ms:.1f} ms){why}",
        {"ttft_p50_ms": [base.ttft_p50_ms, cand.ttft_p50_ms], "change_pct": change},
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
