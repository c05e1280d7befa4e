"""Split a run by concurrency level (warm-up excluded) and measure each arm per level."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram

from locust_spec.metrics import counters
from locust_spec.metrics.batch import mean_running
from locust_spec.metrics.exposition import Snapshot

from . import stats
from .model import METRIC_KEYS, ArmMetrics, Arrivals, Batch, ClassStats, Level, Rate, Slo, SpecStats
from .runs import InputError, RunData

# locust_spec.recording.histograms records whole microseconds.
HDR_UNITS_PER_MS = 1000.0
SUMMED = ("requests", "failures")


@dataclass(frozen=True, eq=False)
class Samples:
    """One run's completed measured requests at one level, one entry per request: what intervals resample."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    output_tokens: np.ndarray
    e2e_s: np.ndarray
    chunks: np.ndarray
    accepted: np.ndarray
    drafted: np.ndarray
    good: np.ndarray | None = None


@dataclass(frozen=True)
class RunLevel:
    """One run's measurements at one level, the wall window its measured requests spanned, and when the
    next level's first request started (the latest a scrape can still bracket this level's end)."""

    users: Level
    """The level: its users, or (open loop) its Rate."""
    metrics: ArmMetrics
    start_unix_s: float
    end_unix_s: float
    rows_show_speculation: bool
    samples: Samples | None = None
    next_level_unix_s: float | None = None
    arrivals: Arrivals | None = None
    """A rate level's: how the schedule was kept."""


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


def level_hist(run: RunData, users: Level, metric: str) -> HdrHistogram | None:
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


def _slo_good(frame: pd.DataFrame, slo: Slo | None) -> np.ndarray | None:
    """Per row: the request met the SLO (failed rows never do; a missing latency never meets a bound)."""
    if slo is None:
        return None
    good = frame["error"].isna().to_numpy().copy()
    for column, bound in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms)):
        if bound is not None:
            good &= (frame[column] <= bound).to_numpy()
    return good


def _by_level(keys: np.ndarray) -> dict[float, np.ndarray]:
    """Row positions per level key (-1 left out), from one stable sort instead of a mask per level."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    return {float(part_keys[0]): idx for part_keys, idx in zip(np.split(sorted_keys, bounds),
                                                                  np.split(order, bounds), strict=True)
            if len(idx) and part_keys[0] >= 0}


def level_keys(frame: pd.DataFrame) -> tuple[np.ndarray, type]:
    """Each row's level as a number, its rate on a rate run (open loop) else its users, and the type that
    makes a number a level (Rate, int). runs.py has checked that a run holds one kind."""
    if "level_rate" in frame and frame["level_rate"].notna().any():
        return frame["level_rate"].to_numpy(dtype=np.float64), Rate
    return frame["level_users"].to_numpy(dtype=np.float64), int


def _arrivals(frame: pd.DataFrame, rows: np.ndarray, ok: np.ndarray, rate: Rate,
              account: dict | None) -> Arrivals:
    """A rate level's delivery: lateness over its measured requests (sent, failed or not), TTFT and E2E from
    the intended start over those that completed; the summary's account (`account`) when the run has one."""
    late = (frame["lateness_ms"].to_numpy(dtype=np.float64) if "lateness_ms" in frame
            else np.full(len(frame), np.nan))
    measured = late[rows][~np.isnan(late[rows])]
    done = np.clip(np.nan_to_num(late[ok]), 0.0, None)

    def median(column: str) -> float | None:
        values = frame[column].to_numpy(dtype=np.float64)[ok] + done
        values = values[~np.isnan(values)]
        return float(np.median(values)) if len(values) else None

    account = account or {}
    return Arrivals(
        rate=float(rate),
        lateness_p50_ms=float(np.percentile(measured, 50)) if len(measured) else None,
        lateness_p99_ms=float(np.percentile(measured, 99)) if len(measured) else None,
        ttft_from_arrival_p50_ms=median("ttft_ms"), e2e_from_arrival_p50_ms=median("e2e_ms"),
        scheduled=account.get("scheduled"), missed=account.get("missed"),
        achieved_rate=account.get("achieved_rate"), scheduled_rate=account.get("scheduled_rate"))


def _samples(frame: pd.DataFrame, rows: np.ndarray, good: np.ndarray | None) -> Samples:
    def col(name: str) -> np.ndarray:
        return frame[name].to_numpy(dtype=np.float64)[rows]

    return Samples(ttft_ms=col("ttft_ms"), tpot_ms=col("tpot_ms"),
                   output_tokens=np.nan_to_num(col("output_tokens")), e2e_s=col("e2e_ms") / 1000.0,
                   chunks=col("chunks"), accepted=col("spec_accepted_tokens"),
                   drafted=col("spec_draft_tokens"), good=None if good is None else good[rows])


def _next_starts(frame: pd.DataFrame, keys: np.ndarray) -> dict[float, float | None]:
    """Per level, the first start of the level that came after it (warm-up included): the ladder's change."""
    firsts = frame["start_unix_s"].groupby(keys).min().sort_values()
    levels, times = list(firsts.index), list(firsts.to_numpy())
    return {float(u): (float(times[i + 1]) if i + 1 < len(times) else None) for i, u in enumerate(levels)}


def measured(frame: pd.DataFrame) -> np.ndarray:
    """Rows a level's statistics use: past its warm-up and not cut off by the stop (ok or failed)."""
    error = frame["error"].cat
    interrupted = error.codes.isin(np.flatnonzero(error.categories.astype(str).str.startswith("interrupted")))
    return (frame["warmup"] != 1).to_numpy() & ~interrupted.to_numpy()


def run_levels(run: RunData, slo: Slo | None = None) -> dict[Level, RunLevel]:
    """Per level (users, or a Rate): requests, failures, exact latency percentiles, throughput over the
    level's window; with an SLO, the share of requests meeting it and the goodput (tokens of those requests
    per second); on a rate level, how its schedule was kept."""
    frame = run.requests
    error = frame["error"].cat
    used = measured(frame)
    failed = (error.codes >= 0).to_numpy()
    # Rows outside a group get key -1, so no filtered copy of a million-row frame is made.
    users_col, kind = level_keys(frame)
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
    tpot_p90 = ok_by["tpot_ms"].quantile(0.9)
    sums = ok_by[["output_tokens", "chunks", "spec_draft_tokens"]].sum()
    ok_tokens, ok_chunks, drafted = sums["output_tokens"], sums["chunks"], sums["spec_draft_tokens"]
    good = _slo_good(frame, slo)
    ok_rows = _by_level(ok_level.to_numpy())
    used_rows = _by_level(level.to_numpy()) if kind is Rate else {}
    next_start = _next_starts(frame, users_col)
    out = {}
    for users in sorted(requests.index):
        users = kind(users)
        itl = level_hist(run, users, "itl")
        gap = level_hist(run, users, "chunk_gap")
        wall = float(end[users] - start[users])
        chunks = float(ok_chunks.get(users, 0.0))
        rows = ok_rows.get(users, np.empty(0, dtype=np.int64))
        samples = _samples(frame, rows, good)
        slo_share = goodput = None
        if samples.good is not None and wall > 0:
            slo_share = float(samples.good.sum()) / int(requests[users])
            goodput = float(samples.output_tokens[samples.good].sum()) / wall
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
            tpot_p90_ms=_median(tpot_p90, users),
            chunk_gap_p99_ms=percentile_ms(gap, 99) if gap else None,
            slo_share=slo_share,
            goodput_tok_s=goodput,
            output_tokens=int(tokens[users]),
            itl_source="hdr" if itl else "rows",
        )
        arrivals = (_arrivals(frame, used_rows[users], rows, users, run.arrivals.get(users))
                    if kind is Rate else None)
        out[users] = RunLevel(users, metrics, float(start[users]), float(end[users]),
                              bool(drafted.get(users, 0.0) > 0), samples, next_start.get(users), arrivals)
    return out


# Per-request quantiles with an interval: metric key -> (Samples field, quantile).
QUANTILES = {"tpot_p50_ms": ("tpot_ms", 0.5), "tpot_p90_ms": ("tpot_ms", 0.9),
             "ttft_p50_ms": ("ttft_ms", 0.5)}
# Rates sum(amount) / sum(duration) over requests, with an interval.
RATES = ("output_tok_s", "goodput_tok_s", "tokens_per_chunk", "step_ms")
# Shown beside the deciding metrics without an interval: token-weighted, from histograms, not per request.
CONTEXT = ("itl_p50_ms", "itl_p95_ms", "chunk_gap_p50_ms", "chunk_gap_p99_ms", "slo_share")


def _rate_parts(samples: Samples, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The (amount, duration) per request whose ratio of sums is the rate `key`."""
    if key == "output_tok_s":
        return samples.output_tokens, samples.e2e_s
    if key == "goodput_tok_s":
        return (None if samples.good is None else
                (samples.output_tokens * samples.good, samples.e2e_s))
    if key == "tokens_per_chunk":
        return samples.output_tokens, samples.chunks
    # step time: the stream's time after its first chunk per later chunk (the server's decode step)
    return samples.e2e_s * 1000.0 - samples.ttft_ms, samples.chunks - 1


def _stacked(levels: Sequence[RunLevel], pick) -> tuple[list[np.ndarray], np.ndarray] | None:
    parts = [pick(lv.samples) for lv in levels if lv.samples is not None]
    if not parts or any(p is None for p in parts):
        return None
    groups = np.concatenate([np.full(len(p[0]) if isinstance(p, tuple) else len(p), i)
                             for i, p in enumerate(parts)])
    if isinstance(parts[0], tuple):
        return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))], groups
    return [np.concatenate(parts)], groups


def recentre(ci: stats.Interval, change: float | None) -> stats.Interval:
    """An interval moved (as a ratio) onto the change the report shows, which for repeats is the median of
    the runs rather than the bootstrap's pooled estimate."""
    if not ci.measured or change is None or ci.estimate is None or ci.estimate <= -100:
        return ci if change is None else stats.Interval(change, ci.lo, ci.hi, ci.confidence, ci.method,
                                                        ci.units)
    scale = (1 + change / 100) / (1 + ci.estimate / 100)
    lo, hi = ((1 + ci.lo / 100) * scale - 1) * 100, ((1 + ci.hi / 100) * scale - 1) * 100
    return stats.Interval(change, lo, hi, ci.confidence, ci.method, ci.units)


def change_intervals(base: Sequence[RunLevel], cand: Sequence[RunLevel], base_m: ArmMetrics,
                     cand_m: ArmMetrics) -> dict[str, stats.Interval]:
    """Every compared metric's change (candidate vs baseline, %) with its 95% interval where the per-request
    rows allow one (quantiles and rates, bootstrapped over requests and over runs); context metrics get
    their change alone."""
    out: dict[str, stats.Interval] = {}
    for key, (field_name, q) in QUANTILES.items():
        b = _stacked(base, lambda s, f=field_name: getattr(s, f))
        c = _stacked(cand, lambda s, f=field_name: getattr(s, f))
        change = stats.change_pct(getattr(base_m, key), getattr(cand_m, key))
        if b is None or c is None:
            out[key] = stats.Interval(change, None, None, method="no rows")
            continue
        ci = stats.change_ci(b[0][0], c[0][0], q, baseline_groups=b[1], candidate_groups=c[1])
        out[key] = recentre(ci, change)
    for key in RATES:
        b = _stacked(base, lambda s, k=key: _rate_parts(s, k))
        c = _stacked(cand, lambda s, k=key: _rate_parts(s, k))
        change = stats.change_pct(getattr(base_m, key), getattr(cand_m, key)) if key != "step_ms" else None
        if b is None or c is None:
            out[key] = stats.Interval(change, None, None, method="no rows")
            continue
        (bn, bd), (cn, cd) = b[0], c[0]
        bk, ck = bd > 0, cd > 0
        out[key] = stats.rate_change_ci(bn[bk], bd[bk], cn[ck], cd[ck], baseline_groups=b[1][bk],
                                        candidate_groups=c[1][ck], point_change=change)
    for key in CONTEXT:
        out[key] = stats.Interval(stats.change_pct(getattr(base_m, key), getattr(cand_m, key)), None, None,
                                  method="context")
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


def bracket(snapshots: Sequence[Snapshot], level: RunLevel) -> list[Snapshot]:
    """The scrapes that bracket one level, per URL: from the last at or before its first measured request
    (the scrape at its warm-up end, or at the level change) to the first at or after its last request's
    end, or, when the next level started before then, the last one before the next level's first request.
    So the counters cover exactly the level's load, including its first seconds."""
    by_url: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        by_url.setdefault(snap.url, []).append(snap)
    out = []
    for snaps in by_url.values():
        snaps.sort(key=lambda s: s.timestamp_unix_s)
        times = np.array([s.timestamp_unix_s for s in snaps])
        first = int(np.searchsorted(times, level.start_unix_s, side="right")) - 1
        first = max(first, 0)
        after_end = int(np.searchsorted(times, level.end_unix_s, side="left"))
        last = min(after_end, len(snaps) - 1)
        if level.next_level_unix_s is not None:
            before_next = int(np.searchsorted(times, level.next_level_unix_s, side="right")) - 1
            if before_next > first:
                last = min(last, before_next)
        out.extend(snaps[first:last + 1])
    return out


def _spec(window: counters.SpecWindow) -> SpecStats:
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


def spec_stats(run: RunData, level: RunLevel) -> SpecStats | None:
    """The candidate's counters over the level's bracketing scrapes; None without two of them."""
    if not run.snapshots:
        return None
    window = counters.spec_window(bracket(run.snapshots, level), -np.inf, np.inf, run.models)
    if window.scrapes < 2:
        return None
    return _spec(window)


# The counters an acceptance unit needs (drafts names the server's schema), and their `_created` series
# (restart detection), and the process start time (restart detection without them).
UNIT_COUNTERS = frozenset(f"{prefix}:{name}" for prefix in counters.V1_SCHEMA
                          for name in (counters.DRAFTS, counters.DRAFT_TOKENS, counters.ACCEPTED))
UNIT_SERIES = UNIT_COUNTERS | {counters.created_name(m) for m in UNIT_COUNTERS} | {counters.PROCESS_START}


def interval_units(snapshots: Sequence[Snapshot],
                   models: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(accepted, drafted) token increases of `models` per scrape interval, every URL's intervals in turn.
    Only the two counters are kept from each scrape, so a long run's thousands of intervals stay cheap."""
    by_url: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        kept = tuple(s for s in snap.samples if s.metric in UNIT_SERIES)
        by_url.setdefault(snap.url, []).append(Snapshot(snap.timestamp_unix_s, snap.url, kept))
    accepted, drafted = [], []
    for snaps in by_url.values():
        snaps.sort(key=lambda s: s.timestamp_unix_s)
        for a, b in zip(snaps, snaps[1:], strict=False):
            w = counters.spec_window([a, b], -np.inf, np.inf, models)
            accepted.append(w.accepted or 0.0)
            drafted.append(w.draft_tokens or 0.0)
    return np.array(accepted), np.array(drafted)


def acceptance_ci(runs: Sequence[RunData], levels: Sequence[RunLevel], point: float | None,
                  seed: int = stats.SEED) -> stats.Interval | None:
    """Acceptance's interval, resampling requests (their own speculative stats) when at least two drafted,
    else the scrape intervals of the level's bracket: never tokens, which are not independent.

    The per-request interval is scaled onto the counters' acceptance, which stays the estimate."""
    acc = [lv.samples.accepted for lv in levels if lv.samples is not None]
    dft = [lv.samples.drafted for lv in levels if lv.samples is not None]
    groups = [np.full(len(a), i) for i, a in enumerate(acc)]
    if acc:
        a, d, g = np.concatenate(acc), np.concatenate(dft), np.concatenate(groups)
        keep = np.isfinite(a) & np.isfinite(d)
        if int((d[keep] > 0).sum()) >= 2:
            ci = stats.ratio_ci(a[keep], d[keep], groups=g[keep], seed=seed)
            if ci.measured and point is not None and ci.estimate:
                scale = point / ci.estimate
                return stats.Interval(point, max(0.0, ci.lo * scale), min(1.0, ci.hi * scale),
                                      method="bootstrap, requests", units=ci.units)
            if ci.measured and point is not None and not ci.estimate and not point:
                return stats.Interval(point, ci.lo, ci.hi, method="bootstrap, requests", units=ci.units)
    units = [interval_units(bracket(run.snapshots, lv), run.models)
             for run, lv in zip(runs, levels, strict=True) if run.snapshots]
    if not units:
        return None
    a = np.concatenate([u[0] for u in units])
    d = np.concatenate([u[1] for u in units])
    g = np.concatenate([np.full(len(u[0]), i) for i, u in enumerate(units)])
    ci = stats.ratio_ci(a, d, groups=g, seed=seed)
    return stats.Interval(point, ci.lo, ci.hi, method="bootstrap, scrape intervals", units=ci.units)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cumulative, q * cumulative[-1])), len(values) - 1)])


def server_batch(snapshots: Sequence[Snapshot]) -> Batch | None:
    """Time-weighted running and waiting requests over the scrapes given (summed over URLs and engines):
    each scrape's value holds until the next scrape. None when the server exposes neither gauge."""
    current: dict[str, tuple[float, float]] = {}
    times, running, waiting = [], [], []
    seen = False
    for snap in sorted(snapshots, key=lambda s: s.timestamp_unix_s):
        run = wait = 0.0
        for sample in snap.samples:
            if sample.metric == counters.RUNNING:
                run += sample.value
                seen = True
            elif sample.metric == counters.WAITING:
                wait += sample.value
        current[snap.url] = (run, wait)
        times.append(snap.timestamp_unix_s)
        running.append(sum(r for r, _ in current.values()))
        waiting.append(sum(w for _, w in current.values()))
    if not seen or len(times) < 2:
        return None
    weights = np.diff(np.array(times))
    run_v, wait_v = np.array(running[:-1]), np.array(waiting[:-1])
    if weights.sum() <= 0:
        return None
    return Batch(running_p50=_weighted_quantile(run_v, weights, 0.5), running_max=float(max(running)),
                 waiting_p50=_weighted_quantile(wait_v, weights, 0.5), waiting_max=float(max(waiting)),
                 samples=len(times), running_mean=mean_running(snapshots, times[0], times[-1]))


def arm_batch(pairs: Sequence[tuple[RunData, RunLevel]]) -> Batch | None:
    """One arm's batch at a level over its runs: the median of the runs' means and p50s, the largest max."""
    present = [b for run, level in pairs if run.snapshots
               if (b := server_batch(bracket(run.snapshots, level))) is not None]
    if not present:
        return None
    means = [b.running_mean for b in present if b.running_mean is not None]
    return Batch(running_mean=float(statistics.median(means)) if means else None,
                 running_p50=float(statistics.median(b.running_p50 for b in present)),
                 running_max=max(b.running_max for b in present),
                 waiting_p50=float(statistics.median(b.waiting_p50 for b in present)),
                 waiting_max=max(b.waiting_max for b in present),
                 samples=sum(b.samples for b in present))


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


def merged_itl_cdf(runs: Sequence[RunData], users: Level) -> tuple[tuple[float, float], ...]:
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
