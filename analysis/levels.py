"""Split a run by concurrency level (warm-up excluded) and measure each arm per level."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram

from locust_spec.core.design import INTERLEAVED, SIMULTANEOUS, Design
from locust_spec.core.slo import Slo, meets_slo
from locust_spec.metrics import counters, level_window
from locust_spec.metrics.batch import mean_running
from locust_spec.metrics.exposition import Snapshot

from . import stats
from .blocks import LevelBlocks, interrupted, level_keys, run_blocks
from .model import METRIC_KEYS, ArmMetrics, Batch, ClassStats, Level, Rate, RateDelivery, SpecStats
from .runs import InputError, RunData

# locust_spec.recording.histograms records whole microseconds.
HDR_UNITS_PER_MS = 1000.0
SUMMED = ("requests", "failures")


@dataclass(frozen=True, eq=False)
class Samples:
    """One run's completed measured requests at one level, one entry per request (with its block and
    prompt), and the level's blocks: what intervals resample."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    output_tokens: np.ndarray
    e2e_s: np.ndarray
    chunks: np.ndarray
    accepted: np.ndarray
    drafted: np.ndarray
    block: np.ndarray
    prompt: np.ndarray
    blocks: LevelBlocks
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
    design: Design | None = None
    arrivals: RateDelivery | None = None
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
    """Per row: the request met the SLO (core/slo.py: failed rows never do)."""
    if slo is None:
        return None

    def col(name: str) -> np.ndarray:
        return frame[name].to_numpy(dtype=np.float64)

    return meets_slo(slo, frame["error"].isna().to_numpy(), col("ttft_ms"), col("tpot_ms"), col("e2e_ms"))


def _by_level(keys: np.ndarray) -> dict[float, np.ndarray]:
    """Row positions per level key (-1 left out), from one stable sort instead of a mask per level."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    return {float(part_keys[0]): idx for part_keys, idx in zip(np.split(sorted_keys, bounds),
                                                                  np.split(order, bounds), strict=True)
            if len(idx) and part_keys[0] >= 0}


def _arrivals(frame: pd.DataFrame, rows: np.ndarray, ok: np.ndarray, rate: Rate,
              account: dict | None) -> RateDelivery:
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
    return RateDelivery(
        rate=float(rate),
        lateness_p50_ms=float(np.percentile(measured, 50)) if len(measured) else None,
        lateness_p99_ms=float(np.percentile(measured, 99)) if len(measured) else None,
        ttft_from_arrival_p50_ms=median("ttft_ms"), e2e_from_arrival_p50_ms=median("e2e_ms"),
        scheduled=account.get("scheduled"), missed=account.get("missed"),
        achieved_rate=account.get("achieved_rate"), scheduled_rate=account.get("scheduled_rate"))


def _samples(frame: pd.DataFrame, rows: np.ndarray, good: np.ndarray | None, blocks: LevelBlocks) -> Samples:
    def col(name: str) -> np.ndarray:
        return frame[name].to_numpy(dtype=np.float64)[rows]

    block = np.empty(len(frame), dtype=np.int64)
    block[blocks.rows] = blocks.block
    return Samples(ttft_ms=col("ttft_ms"), tpot_ms=col("tpot_ms"),
                   output_tokens=np.nan_to_num(col("output_tokens")), e2e_s=col("e2e_ms") / 1000.0,
                   chunks=col("chunks"), accepted=col("spec_accepted_tokens"),
                   drafted=col("spec_draft_tokens"), block=block[rows],
                   prompt=frame["prompt_id"].cat.codes.to_numpy()[rows], blocks=blocks,
                   good=None if good is None else good[rows])


def _next_starts(frame: pd.DataFrame, keys: np.ndarray) -> dict[float, float | None]:
    """Per level, the first start of the level that came after it (warm-up included): the ladder's change."""
    firsts = frame["start_unix_s"].groupby(keys).min().sort_values()
    levels, times = list(firsts.index), list(firsts.to_numpy())
    return {float(u): (float(times[i + 1]) if i + 1 < len(times) else None) for i, u in enumerate(levels)}


def measured(frame: pd.DataFrame) -> np.ndarray:
    """Rows a level's statistics use in a run without a design: past its warm-up and not cut off by the
    stop (ok or failed)."""
    return (frame["warmup"] != 1).to_numpy() & ~interrupted(frame)


def run_levels(run: RunData, slo: Slo | None = None) -> dict[Level, RunLevel]:
    """Per level (users, or a Rate): requests, failures, exact latency percentiles, throughput over the
    level's blocks (tokens that arrived in the arm's measured windows over their seconds); with an SLO, the
    share of requests meeting it and the goodput (tokens of those requests per second); on a rate level,
    how its schedule was kept."""
    frame = run.requests
    error = frame["error"].cat
    failed = (error.codes >= 0).to_numpy()
    good = _slo_good(frame, slo)
    found = run_blocks(frame, run.design, good)
    # Rows outside a level get key -1, so no filtered copy of a million-row frame is made.
    level = pd.Series(found.level_key, index=frame.index)
    ok_level = pd.Series(np.where(failed, -1, found.level_key), index=frame.index)
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
    ok_rows = _by_level(ok_level.to_numpy())
    keys, kind = level_keys(frame)
    used_rows = _by_level(found.level_key) if kind is Rate else {}
    next_start = _next_starts(frame, keys)
    out = {}
    for users in sorted(requests.index):
        users = kind(users)
        blocks = found.levels[users]
        itl = level_hist(run, users, "itl")
        gap = level_hist(run, users, "chunk_gap")
        seconds = float(blocks.window_s.sum())
        chunks = float(ok_chunks.get(users, 0.0))
        rows = ok_rows.get(users, np.empty(0, dtype=np.int64))
        samples = _samples(frame, rows, good, blocks)
        slo_share = goodput = None
        if samples.good is not None and seconds > 0:
            slo_share = float(samples.good.sum()) / int(requests[users])
            goodput = float(blocks.good_tokens.sum()) / seconds
        metrics = ArmMetrics(
            requests=int(requests[users]),
            failures=int(failures[users]),
            ttft_p50_ms=_median(medians["ttft_ms"], users),
            itl_p50_ms=percentile_ms(itl, 50) if itl else _median(medians["itl_p50_ms"], users),
            itl_p95_ms=percentile_ms(itl, 95) if itl else None,
            tpot_p50_ms=_median(medians["tpot_ms"], users),
            chunk_gap_p50_ms=percentile_ms(gap, 50) if gap else _median(medians["chunk_gap_p50_ms"], users),
            output_tok_s=float(blocks.tokens.sum()) / seconds if seconds > 0 and len(rows) else None,
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
                              bool(drafted.get(users, 0.0) > 0), samples, next_start.get(users), run.design,
                              arrivals)
    return out


# Per-request quantiles with an interval: metric key -> (Samples field, quantile).
QUANTILES = {"tpot_p50_ms": ("tpot_ms", 0.5), "tpot_p90_ms": ("tpot_ms", 0.9),
             "ttft_p50_ms": ("ttft_ms", 0.5)}
# Rates: a ratio of sums over the units (throughput: tokens over the windows' seconds), with an interval.
RATES = ("output_tok_s", "goodput_tok_s", "tokens_per_chunk", "step_ms")
# Shown beside the deciding metrics without an interval: token-weighted, from histograms, not per request.
CONTEXT = ("itl_p50_ms", "itl_p95_ms", "chunk_gap_p50_ms", "chunk_gap_p99_ms", "slo_share")


@dataclass(frozen=True, eq=False)
class Layout:
    """A level's units: the runs of both arms paired by their shared clock (every block group one unit,
    both arms' blocks in it), or each arm's blocks on their own; per request and per block, its unit."""

    base: stats.Units
    cand: stats.Units | None
    """None: paired, the candidate's unit codes index `base`."""
    base_requests: np.ndarray
    cand_requests: np.ndarray
    base_blocks: np.ndarray
    cand_blocks: np.ndarray
    design: str

    @property
    def paired(self) -> bool:
        return self.cand is None


def _partners(base: Sequence[RunLevel], cand: Sequence[RunLevel]) -> list[tuple[int, int]] | None:
    """(base run, candidate run) pairs that shared one clock under a blocked design; None unless every run
    of both arms has exactly one partner."""
    def clock(lv: RunLevel) -> float | None:
        d = lv.design
        return d.clock_unix_s if d is not None and d.blocked else None

    clocks_b, clocks_c = [clock(lv) for lv in base], [clock(lv) for lv in cand]
    if None in clocks_b or None in clocks_c or len(set(clocks_b)) != len(clocks_b) or \
            sorted(clocks_b) != sorted(clocks_c):
        return None
    index = {c: j for j, c in enumerate(clocks_c)}
    return [(i, index[c]) for i, c in enumerate(clocks_b)]


def _codes(keys: list[tuple]) -> tuple[dict[tuple, int], np.ndarray]:
    """Unit codes in (run, time) order, and each unit's run."""
    order = sorted(set(keys))
    return {k: i for i, k in enumerate(order)}, np.array([k[0] for k in order], dtype=np.int64)


def _arm_units(levels: Sequence[RunLevel], run_of: Sequence[int], code: dict[tuple, int]
               ) -> tuple[np.ndarray, np.ndarray]:
    requests, blocks = [], []
    for lv, r in zip(levels, run_of, strict=True):
        groups = lv.samples.blocks.groups
        per_block = np.array([code[(r, *groups[b])] for b in range(len(groups))], dtype=np.int64)
        blocks.append(per_block)
        requests.append(per_block[lv.samples.block] if len(lv.samples.block) else lv.samples.block)
    return np.concatenate(requests), np.concatenate(blocks)


def layout(base: Sequence[RunLevel], cand: Sequence[RunLevel]) -> Layout:
    """Paired by block group when the arms' runs shared clocks; else every arm's blocks on their own."""
    pairs = _partners(base, cand)
    kinds = {lv.design.kind if lv.design is not None else "sequential" for lv in (*base, *cand)}
    design = kinds.pop() if len(kinds) == 1 else "mixed"
    if pairs is not None:
        run_of_base = [p for p, _ in enumerate(pairs)]
        run_of_cand = [next(p for p, (_, j) in enumerate(pairs) if j == k) for k in range(len(cand))]
        keys = [(r, *g) for lv, r in zip((*base, *cand), (*run_of_base, *run_of_cand), strict=True)
                for g in lv.samples.blocks.groups]
        code, runs = _codes(keys)
        arms = max((lv.design.arms for lv in base), default=2)
        name = "block pairs" if arms == 2 or design == SIMULTANEOUS else "block groups"
        br, bb = _arm_units(base, run_of_base, code)
        cr, cb = _arm_units(cand, run_of_cand, code)
        return Layout(stats.Units(runs, name), None, br, cr, bb, cb, design)
    out = []
    for levels in (base, cand):
        run_of = list(range(len(levels)))
        code, runs = _codes([(r, *g) for lv, r in zip(levels, run_of, strict=True)
                             for g in lv.samples.blocks.groups])
        out.append((stats.Units(runs, "blocks"), *_arm_units(levels, run_of, code)))
    (bu, br, bb), (cu, cr, cb) = out
    return Layout(bu, cu, br, cr, bb, cb, design)


def with_requests(lay: Layout) -> Layout:
    """The layout without the units that hold no request of either arm: a task's rows (analysis/tasks.py)
    leave many of a level's blocks empty, and an empty unit is no evidence; counted, it would narrow the
    interval (more units, more degrees of freedom). Its blocks' codes are -1: rates per stream only."""
    def kept(units: stats.Units, *codes: np.ndarray) -> tuple[stats.Units, np.ndarray]:
        used = np.zeros(units.count, dtype=bool)
        for c in codes:
            used[c] = True
        return stats.Units(units.runs[used], units.name), np.where(used, np.cumsum(used) - 1, -1)

    if lay.paired:
        units, new = kept(lay.base, lay.base_requests, lay.cand_requests)
        return Layout(units, None, new[lay.base_requests], new[lay.cand_requests], new[lay.base_blocks],
                      new[lay.cand_blocks], lay.design)
    base, new_b = kept(lay.base, lay.base_requests)
    cand, new_c = kept(lay.cand, lay.cand_requests)
    return Layout(base, cand, new_b[lay.base_requests], new_c[lay.cand_requests], new_b[lay.base_blocks],
                  new_c[lay.cand_blocks], lay.design)


def _per_request(levels: Sequence[RunLevel], field_name: str) -> np.ndarray:
    return np.concatenate([getattr(lv.samples, field_name) for lv in levels])


def _rate_sums(levels: Sequence[RunLevel], units: np.ndarray, blocks: np.ndarray, count: int,
               key: str, per_stream: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """Per unit, (amount, duration) whose ratio of sums is the rate `key`; `per_stream`, throughput and
    goodput are the requests' tokens over their own seconds (a task's, analysis/tasks.py)."""
    if per_stream and key in ("output_tok_s", "goodput_tok_s"):
        amount, den = _per_request(levels, "output_tokens"), _per_request(levels, "e2e_s")
        if key == "goodput_tok_s":
            goods = [lv.samples.good for lv in levels]
            if any(g is None for g in goods):
                return None
            amount = amount * np.concatenate(goods)
    elif key in ("output_tok_s", "goodput_tok_s"):
        parts = [lv.samples.blocks.tokens if key == "output_tok_s" else lv.samples.blocks.good_tokens
                 for lv in levels]
        if any(p is None for p in parts):
            return None
        seconds = np.concatenate([lv.samples.blocks.window_s for lv in levels])
        return (np.bincount(blocks, np.concatenate(parts), count), np.bincount(blocks, seconds, count))
    elif key == "tokens_per_chunk":
        amount, den = _per_request(levels, "output_tokens"), _per_request(levels, "chunks")
    else:  # step time: the stream's time after its first chunk per later chunk (the server's decode step)
        amount = _per_request(levels, "e2e_s") * 1000.0 - _per_request(levels, "ttft_ms")
        den = _per_request(levels, "chunks") - 1
    keep = np.isfinite(amount) & np.isfinite(den) & (den > 0)
    return (np.bincount(units[keep], amount[keep], count), np.bincount(units[keep], den[keep], count))


def change_intervals(base: Sequence[RunLevel], cand: Sequence[RunLevel], base_m: ArmMetrics,
                     cand_m: ArmMetrics, per_stream: bool = False) -> tuple[dict[str, stats.Interval], str]:
    """Every compared metric's change (candidate vs baseline, %) with its 95% interval over the level's
    units (block pairs when the design paired the arms, else each arm's blocks; runs as clusters), and
    the design's name; context metrics get their change alone. `per_stream` (a task's requests, which
    share the level's blocks with other tasks): throughput per stream, over the units holding them."""
    out: dict[str, stats.Interval] = {}
    base = [lv for lv in base if lv.samples is not None]
    cand = [lv for lv in cand if lv.samples is not None]
    if not base or not cand:
        for key in (*QUANTILES, *RATES, *CONTEXT):
            change = stats.change_pct(getattr(base_m, key, None), getattr(cand_m, key, None))
            out[key] = stats.Interval(change, None, None, method="no rows")
        return out, "sequential"
    lay = layout(base, cand)
    if per_stream:
        lay = with_requests(lay)
    cand_units = lay.base if lay.paired else lay.cand
    for field_name in ("tpot_ms", "ttft_ms"):
        keys = [k for k, (f, _) in QUANTILES.items() if f == field_name]
        found = stats.quantile_changes(
            _per_request(base, field_name), lay.base_requests, _per_request(cand, field_name),
            lay.cand_requests, [QUANTILES[k][1] for k in keys], lay.base, lay.cand,
            point_changes=[stats.change_pct(getattr(base_m, k), getattr(cand_m, k)) for k in keys])
        out.update(zip(keys, found, strict=True))
    for key in RATES:
        b = _rate_sums(base, lay.base_requests, lay.base_blocks, lay.base.count, key, per_stream)
        c = _rate_sums(cand, lay.cand_requests, lay.cand_blocks, cand_units.count, key, per_stream)
        change = stats.change_pct(getattr(base_m, key), getattr(cand_m, key)) if key != "step_ms" else None
        if b is None or c is None:
            out[key] = stats.Interval(change, None, None, method="no rows")
            continue
        out[key] = stats.ratio_change(b[0], b[1], c[0], c[1], lay.base, lay.cand, point_change=change)
    for key in CONTEXT:
        out[key] = stats.Interval(stats.change_pct(getattr(base_m, key), getattr(cand_m, key)), None, None,
                                  method="context")
    return out, lay.design


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
    """The scrapes of the level's counter window (metrics/level_window.py: the rule the live page and the
    end-of-run table use too)."""
    return level_window.bracket(snapshots, level.start_unix_s, level.end_unix_s, level.next_level_unix_s)


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


def _prompt_names(run: RunData, codes: np.ndarray) -> np.ndarray:
    """Prompt ids of a run's rows from their category codes (a missing id: empty)."""
    categories = np.asarray(run.requests["prompt_id"].cat.categories, dtype=object)
    if not len(categories):
        return np.full(len(codes), "", dtype=object)
    return np.where(codes >= 0, categories.take(np.maximum(codes, 0)), "")


def acceptance_ci(runs: Sequence[RunData], levels: Sequence[RunLevel], point: float | None,
                  seed: int = stats.SEED) -> stats.Interval | None:
    """Acceptance's interval over prompts (their requests' own speculative stats summed per prompt) when
    at least two prompts drafted, else over the scrape intervals of the level's bracket (runs as clusters):
    never over tokens, nor over requests of one prompt (at temperature 0 a prompt is accepted alike each
    time it is sent). Moved onto the counters' acceptance, which stays the estimate."""
    names, accepted, drafted = [], [], []
    for run, lv in zip(runs, levels, strict=True):
        if lv.samples is None:
            continue
        d = lv.samples.drafted
        keep = np.isfinite(d) & np.isfinite(lv.samples.accepted) & (d > 0)
        names.append(_prompt_names(run, lv.samples.prompt[keep]))
        accepted.append(lv.samples.accepted[keep])
        drafted.append(d[keep])
    if names:
        codes, _ = pd.factorize(np.concatenate(names))
        if len(codes) and codes.max() >= 1:
            count = int(codes.max()) + 1
            ci = stats.ratio_interval(np.bincount(codes, np.concatenate(accepted), count),
                                      np.bincount(codes, np.concatenate(drafted), count),
                                      stats.Units.single(count, "prompts"), point=point, clip=(0.0, 1.0),
                                      seed=seed)
            if ci.measured:
                return ci
    units = [interval_units(bracket(run.snapshots, lv), run.models)
             for run, lv in zip(runs, levels, strict=True) if run.snapshots]
    if not units:
        return None
    a = np.concatenate([u[0] for u in units])
    d = np.concatenate([u[1] for u in units])
    runs_of = np.concatenate([np.full(len(u[0]), i) for i, u in enumerate(units)])
    return stats.ratio_interval(a, d, stats.Units(runs_of, "scrape intervals"), point=point, clip=(0.0, 1.0),
                                seed=seed)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cumulative, q * cumulative[-1])), len(values) - 1)])


def _overlap(starts: np.ndarray, ends: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per interval [start, end), its seconds inside the windows (non-overlapping)."""
    ws, we = windows
    return np.clip(np.minimum(ends[:, None], we[None, :]) - np.maximum(starts[:, None], ws[None, :]), 0.0,
                   None).sum(axis=1)


def server_batch(snapshots: Sequence[Snapshot],
                 windows: tuple[np.ndarray, np.ndarray] | None = None) -> Batch | None:
    """Time-weighted running and waiting requests over the scrapes given (summed over URLs and engines):
    each scrape's value holds until the next scrape. None when the server exposes neither gauge.

    `windows` (starts, ends): only the time inside them counts (an arm's own blocks under the interleaved
    design; its server idles in the others'); the mean running is then the caller's to say."""
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
    t = np.array(times)
    weights = np.diff(t) if windows is None else _overlap(t[:-1], t[1:], windows)
    run_v, wait_v = np.array(running[:-1]), np.array(waiting[:-1])
    if weights.sum() <= 0:
        return None
    mean = mean_running(snapshots, times[0], times[-1]) if windows is None else None
    inside = weights > 0
    return Batch(running_p50=_weighted_quantile(run_v, weights, 0.5),
                 running_max=float(run_v[inside].max()), waiting_p50=_weighted_quantile(wait_v, weights, 0.5),
                 waiting_max=float(wait_v[inside].max()), samples=len(times), running_mean=mean)


def own_windows(level: RunLevel) -> tuple[np.ndarray, np.ndarray] | None:
    """The arm's own block windows under the interleaved design (None otherwise: the whole bracket)."""
    blocks = level.samples.blocks if level.samples is not None else None
    if blocks is None or level.design is None or level.design.kind != INTERLEAVED:
        return None
    return blocks.starts, blocks.starts + blocks.window_s


def level_batch(run: RunData, level: RunLevel) -> Batch | None:
    """The batch one run's level ran at. Interleaved, over the arm's own blocks, its mean from the arm's
    own requests in flight there: the running-time counter grows as requests finish, so it would count the
    ones that ran on after their block, and the gauge aliases when synchronized requests finish together
    (a scrape read 0 running at 64 users). The gauges' p50 and max are still read over those blocks."""
    windows = own_windows(level)
    found = server_batch(bracket(run.snapshots, level), windows) if run.snapshots else None
    blocks = level.samples.blocks if level.samples is not None else None
    if found is None or windows is None or blocks is None or blocks.in_flight_s is None:
        return found
    seconds = float(blocks.window_s.sum())
    return replace(found, running_mean=float(blocks.in_flight_s.sum()) / seconds if seconds > 0 else None)


def arm_batch(pairs: Sequence[tuple[RunData, RunLevel]]) -> Batch | None:
    """One arm's batch at a level over its runs: the median of the runs' means and p50s, the largest max."""
    present = [b for run, level in pairs if run.snapshots
               if (b := level_batch(run, level)) is not None]
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
