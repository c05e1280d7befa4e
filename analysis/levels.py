"""Split a run by concurrency level (warm-up excluded) and measure each arm per level."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram
from locust_spec.analysis.model import METRIC_KEYS, ArmMetrics, ClassStats, SpecStats
from locust_spec.analysis.runs import InputError, RunData

from locust_spec import counters

# locust_spec.histograms records whole microseconds.
HDR_UNITS_PER_MS = 1000.0
SUMMED = ("requests", "failures")


@dataclass(frozen=True)
class RunLevel:
    """One run's measurements at one level, and the wall window its measured requests spanned."""

    users: int
    metrics: ArmMetrics
    start_unix_s: float
    end_unix_s: float
    rows_show_speculation: bool


def decode_hist(h: object, where: str) -> HdrHistogram | None:
    """An H entry of _latency.json: None when empty; a one-line InputError when it claims values it lacks."""
    if h is None:
        return None
    if not isinstance(h, dict):
        raise InputError(f"{where}: a histogram entry is not an object")
    if not h.get("count"):
        return None
    if not isinstance(h.get("hdr"), str) or not h["hdr"]:
        raise InputError(f"{where}: a histogram of {h['count']} values has no encoded HDR data")
    try:
        return HdrHistogram.decode(h["hdr"])
    except Exception as exc:  # the hdrh decoder raises assorted types on bad bytes
        raise InputError(f"{where}: bad HDR histogram: {type(exc).__name__}") from None


def percentile_ms(hist: HdrHistogram, pct: float) -> float:
    return hist.get_value_at_percentile(pct) / HDR_UNITS_PER_MS


def cdf_points(hist: HdrHistogram, max_points: int = 300) -> tuple[tuple[float, float], ...]:
    """(latency ms, fraction of values at or below it) at up to max_points recorded values."""
    counts = np.ctypeslib.as_array(hist.counts)[: hist.counts_len]
    index = np.flatnonzero(counts)
    if not len(index):
        return ()
    cumulative = np.cumsum(counts[index], dtype=np.float64) / float(counts[index].sum())
    # one point per 1/max_points of the mass, plus the last value
    picks = np.unique(np.append(np.searchsorted(cumulative, np.linspace(0, 1, max_points), "left"),
                                len(index) - 1).clip(0, len(index) - 1))
    return tuple(
        (hist.get_highest_equivalent_value(hist.get_value_from_index(int(index[i]))) / HDR_UNITS_PER_MS,
         float(cumulative[i]))
        for i in picks
    )


def level_hist(run: RunData, users: int, metric: str) -> HdrHistogram | None:
    """The run's HDR histogram of `metric` over all classes at one level, if latency.json has it."""
    if run.latency is None:
        return None
    level = run.latency.get("levels", {}).get(str(users))
    if not isinstance(level, dict) or not isinstance(level.get(metric), dict):
        return None
    return decode_hist(level[metric].get("all"), f"{run.prefix}_latency.json levels.{users}.{metric}")


def _median(series: pd.Series, key: object) -> float | None:
    value = series.get(key)
    return None if value is None or pd.isna(value) else float(value)


def run_levels(run: RunData) -> dict[int, RunLevel]:
    """Per level users: requests, failures, exact latency percentiles, throughput over the level's window."""
    frame = run.requests
    error = frame["error"].cat
    interrupted = error.codes.isin(np.flatnonzero(error.categories.astype(str).str.startswith("interrupted")))
    used = (frame["warmup"] != 1).to_numpy() & ~interrupted.to_numpy()
    failed = (error.codes >= 0).to_numpy()
    # Rows outside a group get key -1, so no filtered copy of a million-row frame is made.
    users_col = frame["level_users"].to_numpy().astype(np.int64)
    level = pd.Series(np.where(used, users_col, -1), index=frame.index)
    ok_level = pd.Series(np.where(used & ~failed, users_col, -1), index=frame.index)
    requests = level.value_counts().drop(-1, errors="ignore")
    failures = pd.Series(failed).groupby(level.to_numpy()).sum()
    start = frame["start_unix_s"].groupby(level).min()
    end = (frame["start_unix_s"] + frame["e2e_ms"].fillna(0.0) / 1000.0).groupby(level).max()
    tokens = frame["output_tokens"].fillna(0.0).groupby(level).sum()
    ok_by = frame[["ttft_ms", "tpot_ms", "itl_p50_ms", "chunk_gap_p50_ms", "output_tokens", "chunks",
                   "spec_draft_tokens"]].groupby(ok_level)
    medians = ok_by[["ttft_ms", "tpot_ms", "itl_p50_ms", "chunk_gap_p50_ms"]].median()
    sums = ok_by[["output_tokens", "chunks", "spec_draft_tokens"]].sum()
    ok_tokens, ok_chunks, drafted = sums["output_tokens"], sums["chunks"], sums["spec_draft_tokens"]
    out = {}
    for users in sorted(requests.index):
        users = int(users)
        itl = level_hist(run, users, "itl")
        gap = level_hist(run, users, "chunk_gap")
        wall = float(end[users] - start[users])
        chunks = float(ok_chunks.get(users, 0.0))
        metrics = ArmMetrics(
            requests=int(requests[users]),
            failures=int(failures[users]),
            ttft_p50_ms=_median(medians["ttft_ms"], users),
            itl_p50_ms=percentile_ms(itl, 50) if itl else _median(medians["itl_p50_ms"], users),
            itl_p95_ms=percentile_ms(itl, 95) if itl else None,
            tpot_p50_ms=_median(medians["tpot_ms"], users),
            chunk_gap_p50_ms=percentile_ms(gap, 50) if gap else _median(medians["chunk_gap_p50_ms"], users),
            output_tok_s=float(tokens[users]) / wall if wall > 0 and users in ok_tokens.index else None,
            tokens_per_chunk=float(ok_tokens.get(users, 0.0)) / chunks if chunks > 0 else None,
            output_tokens=int(tokens[users]),
            itl_source="hdr" if itl else "rows",
        )
        out[users] = RunLevel(users, metrics, float(start[users]), float(end[users]),
                              bool(drafted.get(users, 0.0) > 0))
    return out


def combine(levels: Sequence[RunLevel]) -> ArmMetrics:
    """Repeats of one arm at one level: counts summed, every other metric the median, with its spread."""
    if len(levels) == 1:
        return levels[0].metrics
    values: dict[str, object] = {}
    spread: dict[str, tuple[float, float]] = {}
    for key in METRIC_KEYS:
        seen = [getattr(lv.metrics, key) for lv in levels if getattr(lv.metrics, key) is not None]
        if key in SUMMED:
            values[key] = int(sum(seen))
        elif seen:
            values[key] = float(statistics.median(seen))
            spread[key] = (float(min(seen)), float(max(seen)))
        else:
            values[key] = None
    sources = {lv.metrics.itl_source for lv in levels}
    return ArmMetrics(**values, output_tokens=sum(lv.metrics.output_tokens for lv in levels),
                      runs=len(levels), itl_source="hdr" if sources == {"hdr"} else "rows", spread=spread)


def spec_stats(run: RunData, level: RunLevel) -> SpecStats | None:
    """The candidate's counters over the level's window; None without two scrapes inside it."""
    if not run.snapshots:
        return None
    window = counters.spec_window(run.snapshots, level.start_unix_s, level.end_unix_s)
    if window.scrapes < 2:
        return None
    return SpecStats(
        acceptance=window.acceptance_rate,
        mean_acceptance_length=window.mean_acceptance_length,
        per_position=tuple(window.per_position),
        drafts=window.drafts or 0.0,
        draft_tokens=window.draft_tokens or 0.0,
        accepted=window.accepted or 0.0,
        generation_tokens=window.generation_tokens or 0.0,
        server_kind=window.server_kind,
        families_seen=tuple(window.families_seen),
        notes=tuple(window.notes),
    )


def combine_spec(stats: Sequence[SpecStats]) -> SpecStats | None:
    """Repeats: the median acceptance and per-position acceptance; counts summed."""
    if not stats:
        return None
    if len(stats) == 1:
        return stats[0]

    def med(values: list) -> float | None:
        present = [v for v in values if v is not None]
        return float(statistics.median(present)) if present else None

    width = min(len(s.per_position) for s in stats)
    return SpecStats(
        acceptance=med([s.acceptance for s in stats]),
        mean_acceptance_length=med([s.mean_acceptance_length for s in stats]),
        per_position=tuple(med([s.per_position[i] for s in stats]) for i in range(width)),
        drafts=sum(s.drafts for s in stats),
        draft_tokens=sum(s.draft_tokens for s in stats),
        accepted=sum(s.accepted for s in stats),
        generation_tokens=sum(s.generation_tokens for s in stats),
        server_kind=stats[0].server_kind,
        families_seen=tuple(sorted({f for s in stats for f in s.families_seen})),
        notes=tuple(dict.fromkeys(n for s in stats for n in s.notes)),
    )


def _measured_ok(runs: Sequence[RunData]) -> pd.DataFrame:
    frames = [r.requests[(r.requests["warmup"] != 1) & r.requests["error"].isna()] for r in runs]
    cols = ["prompt_class", "tpot_ms", "spec_accepted_tokens", "spec_draft_tokens"]
    return pd.concat([f[cols].astype({"prompt_class": "string"}) for f in frames], ignore_index=True)


def class_stats(baseline: Sequence[RunData], candidate: Sequence[RunData]) -> list[ClassStats]:
    """Per prompt class over every measured level: acceptance from per-request stats, TPOT p50 per arm."""
    cand = _measured_ok(candidate)
    if cand["spec_draft_tokens"].fillna(0).sum() <= 0:
        return []
    base_tpot = _measured_ok(baseline).groupby("prompt_class")["tpot_ms"].median()
    grouped = cand.groupby("prompt_class")
    drafted = grouped["spec_draft_tokens"].sum()
    accepted = grouped["spec_accepted_tokens"].sum()
    tpot = grouped["tpot_ms"].median()
    out = []
    for cls, n in grouped.size().items():
        d = float(drafted[cls])
        out.append(ClassStats(
            cls=str(cls), acceptance=float(accepted[cls]) / d if d > 0 else None, draft_tokens=d,
            requests=int(n),
            baseline_tpot_p50_ms=_median(base_tpot, cls), candidate_tpot_p50_ms=_median(tpot, cls),
        ))
    return out


def merged_itl_cdf(runs: Sequence[RunData], users: int) -> tuple[tuple[float, float], ...]:
    """Per-token latency CDF at one level over all of an arm's runs (HDR histograms merged)."""
    merged = None
    for run in runs:
        hist = level_hist(run, users, "itl")
        if hist is None:
            continue
        if merged is None:
            merged = hist
        else:
            merged.add(hist)
    return cdf_points(merged) if merged is not None and merged.get_total_count() else ()
