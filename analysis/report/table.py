"""The per-level comparison table shared by the text, Markdown and HTML reports."""

from __future__ import annotations

from locust_spec.analysis.model import ArmMetrics, LevelVerdict

ROWS = (
    ("ITL p50 (ms)", "itl_p50_ms", "{:.2f}"),
    ("ITL p95 (ms)", "itl_p95_ms", "{:.2f}"),
    ("TPOT p50 (ms)", "tpot_p50_ms", "{:.2f}"),
    ("TTFT p50 (ms)", "ttft_p50_ms", "{:.1f}"),
    ("output tok/s", "output_tok_s", "{:.1f}"),
    ("chunk gap p50 (ms)", "chunk_gap_p50_ms", "{:.2f}"),
    ("tokens per chunk", "tokens_per_chunk", "{:.2f}"),
)
HEADER = ("metric", "baseline", "candidate", "change")


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
    """(metric, baseline, candidate, change) rows; repeats show their spread as (min-max)."""
    out = [("requests / failed",
            f"{lv.baseline.requests} / {lv.baseline.failures}",
            f"{lv.candidate.requests} / {lv.candidate.failures}", "")]
    for label, key, fmt in ROWS:
        change = lv.change_pct.get(key)
        out.append((label, cell(lv.baseline, key, fmt), cell(lv.candidate, key, fmt),
                    "" if change is None else f"{change:+.1f}%"))
    return out


def users_label(users: int) -> str:
    return f"{users} user" + ("" if users == 1 else "s")


def acceptance_line(lv: LevelVerdict) -> str:
    if lv.acceptance is None:
        return "acceptance: not measured"
    parts = [f"acceptance {lv.acceptance:.2f}"]
    if lv.mean_acceptance_length is not None:
        parts.append(f"mean acceptance length {lv.mean_acceptance_length:.2f}")
    if lv.per_position:
        parts.append("per position " + " ".join(f"{p:.2f}" for p in lv.per_position))
    return ", ".join(parts)


def runs_line(lv: LevelVerdict) -> str | None:
    if lv.baseline.runs == 1 and lv.candidate.runs == 1:
        return None
    return (f"repeats: {lv.baseline.runs} baseline, {lv.candidate.runs} candidate runs "
            "(median, spread min-max)")
