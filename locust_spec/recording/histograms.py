"""Exact latency distributions: HDR histograms (µs) per (metric, prompt class, level): merge, encode."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import orjson
from hdrh.histogram import HdrHistogram

from locust_spec.client.timing import RequestTiming
from locust_spec.core.level import LevelKey, key_order, parse_key
from locust_spec.core.runfiles import LATENCY_SCHEMA
from locust_spec.recording.writes import write_whole

METRICS = ("ttft", "itl", "chunk_gap", "tpot", "e2e", "lateness", "ttft_from_arrival", "e2e_from_arrival")
"""The last three only on rate levels (open loop): how late each request went out after its intended
start, and TTFT and E2E counted from that intended start, which is what a user arriving then waited."""
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
ALL_LEVELS = -1  # the level key of the histograms that include every request, warm-up too

Key = tuple[str, str, LevelKey]


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


VECTOR_MIN = 16
"""From this many values on, a batch is indexed with numpy (a fixed ~15 us, then little a value); below it the
plain loop (~0.7 us a value and histogram) is cheaper. A stream's ITLs and chunk gaps are its hundreds of
values: this is the load generator's per-chunk hot path."""


def record_ms(hist: HdrHistogram, values_ms: Iterable[float]) -> None:
    """Record float-ms values at µs resolution."""
    record_many((hist,), values_ms if isinstance(values_ms, (list, tuple)) else list(values_ms))


def record_many(hists: Sequence[HdrHistogram], values_ms: Sequence[float]) -> None:
    """Record the same float-ms values into each of `hists` (all made by `new_histogram`), indexed once.

    The counts index is computed here (for lowest value 1), not by the library's per-value `record_value`
    (~17 µs a value)."""
    if not values_ms:
        return
    first = hists[0]
    mask, half_mag = first.sub_bucket_mask, first.sub_bucket_half_count_magnitude
    base = first.sub_bucket_half_count
    if len(values_ms) < VECTOR_MIN:
        index: list[int] = []
        lo, hi = HIGHEST_US, LOWEST_US
        for ms in values_ms:
            v = min(max(int(ms * 1000.0 + 0.5), LOWEST_US), HIGHEST_US)
            bucket = (v | mask).bit_length() - half_mag - 1
            index.append(((bucket + 1) << half_mag) + (v >> bucket) - base)
            lo = min(lo, v)
            hi = max(hi, v)
        for hist in hists:
            counts = hist.counts
            for i in index:
                counts[i] += 1
            _account(hist, len(index), lo, hi)
        return
    us = np.fmin(np.fmax(np.floor(np.asarray(values_ms, dtype=np.float64) * 1000.0 + 0.5), LOWEST_US),
                 HIGHEST_US).astype(np.int64)
    # bit_length(x) is frexp's exponent, exact for integers below 2**53
    bucket = np.frexp((us | mask).astype(np.float64))[1].astype(np.int64) - half_mag - 1
    index_array = ((bucket + 1) << half_mag) + (us >> bucket) - base
    lo, hi = int(us.min()), int(us.max())
    start = int(index_array.min())
    # counted once per batch, added to each histogram as a slice (at most the 23,552 counts: ~40 us)
    added = np.bincount(index_array - start).astype(np.uint64)
    for hist in hists:
        counts = np.frombuffer(hist.counts, dtype=np.uint64)  # a view: the histogram's counts change in place
        counts[start:start + len(added)] += added
        _account(hist, len(us), lo, hi)


def _empty(hist: HdrHistogram) -> None:
    """HdrHistogram.reset in one numpy write instead of a Python loop over its 23,552 counts."""
    np.frombuffer(hist.counts, dtype=np.uint64)[:] = 0
    hist.total_count = 0
    hist.min_value = sys.maxsize
    hist.max_value = 0
    hist.start_time_stamp_msec = sys.maxsize
    hist.end_time_stamp_msec = 0


def _account(hist: HdrHistogram, n: int, lo: int, hi: int) -> None:
    hist.total_count += n
    hist.min_value = min(hist.min_value, lo)
    hist.max_value = max(hist.max_value, hi)


def summarize(hist: HdrHistogram) -> dict:
    """The contract's H: count, p50/p90/p95/p99/max in float ms, and the encoded histogram."""
    out: dict = {"count": hist.total_count}
    values = percentiles_us(hist, PERCENTILES)
    for pct, value in zip(PERCENTILES, values, strict=True):
        out[f"p{pct:g}"] = value / 1000.0 if hist.total_count else None
    out["max"] = hist.get_max_value() / 1000.0 if hist.total_count else None
    out["hdr"] = hist.encode().decode("ascii")
    return out


def percentiles_us(hist: HdrHistogram, pcts: Iterable[float]) -> list[int]:
    """Several percentiles from one cumulative sum of the counts: each the first bucket whose running count
    reaches the percentile's target, as the library finds it (it walks the 23,552 counts in Python, once per
    call: ~3.6 ms a histogram here, and a run's latency.json summarizes dozens on the event loop)."""
    pcts = list(pcts)
    if not hist.total_count:
        return [0] * len(pcts)
    running = np.cumsum(np.frombuffer(hist.counts, dtype=np.uint64))
    targets = np.array([hist.get_target_count_at_percentile(p) for p in pcts], dtype=np.uint64)
    found = np.minimum(np.searchsorted(running, targets, side="left"), len(running) - 1)
    # the library's convention: the top of the bucket, but its bottom for the 0th percentile
    return [(hist.get_highest_equivalent_value if p else hist.get_lowest_equivalent_value)(
        hist.get_value_from_index(int(index))) for p, index in zip(pcts, found, strict=True)]


PENDING_VALUES = 16384
"""Values recorded but not yet counted into the histograms, at most (128 KiB): indexing a batch costs a fixed
~15 numpy calls whatever its size, so a stream's ITLs wait for many other streams' and are indexed with them,
once (before anything reads the histograms)."""


class LatencyHistograms:
    """Histograms per (metric, prompt class, level); created on first use, so memory grows with
    classes x levels, never with run length. Level ALL_LEVELS holds every request (warm-up too);
    a level's own histograms exclude warm-up requests.

    Recorded values are counted in batches (PENDING_VALUES); every method that reads the histograms counts
    what is pending first, so a reader never sees the difference."""

    def __init__(self) -> None:
        self._hists: dict[Key, HdrHistogram] = {}
        self._pending: dict[tuple[Key, ...], array] = {}  # per set of histograms taking the same values
        self._pending_values = 0

    def _get(self, key: Key) -> HdrHistogram:
        hist = self._hists.get(key)
        if hist is None:
            hist = self._hists[key] = new_histogram()
        return hist

    def record(self, metric: str, cls: str, level: LevelKey, values_ms: Iterable[float],
               warmup: bool) -> None:
        values = values_ms if isinstance(values_ms, (list, tuple)) else list(values_ms)
        self.record_together((metric,), cls, level, values, warmup)

    def record_timing(self, timing: RequestTiming, cls: str, level: LevelKey, warmup: bool,
                      lateness_ms: float | None = None) -> None:
        """A finished request's measurements; failed requests are recorded by the caller only if wanted.
        With `lateness_ms` (open loop), TTFT and E2E are also recorded from the intended start."""
        for metric, value in (("ttft", timing.ttft_ms), ("tpot", timing.tpot_ms), ("e2e", timing.e2e_ms)):
            if value is not None:
                self.record(metric, cls, level, (value,), warmup)
        if lateness_ms is not None:
            late = max(lateness_ms, 0.0)
            for metric, value in (("ttft_from_arrival", timing.ttft_ms), ("e2e_from_arrival", timing.e2e_ms)):
                if value is not None:
                    self.record(metric, cls, level, (value + late,), warmup)
        # One token per chunk (no speculation) makes ITLs and chunk gaps the same list: index it once.
        itl, gaps = timing.itl_ms, timing.chunk_gaps_ms
        if itl == gaps:
            self.record_together(("itl", "chunk_gap"), cls, level, itl, warmup)
        else:
            self.record("itl", cls, level, itl, warmup)
            self.record("chunk_gap", cls, level, gaps, warmup)

    def record_together(self, metrics: Sequence[str], cls: str, level: LevelKey, values_ms: Sequence[float],
                        warmup: bool) -> None:
        """The same values for several metrics, each into its all-levels and (after warm-up) level one."""
        if not values_ms:
            return
        keys = tuple((m, cls, ALL_LEVELS) for m in metrics)
        if not warmup:
            keys += tuple((m, cls, level) for m in metrics)
        pending = self._pending.get(keys)
        if pending is None:
            pending = self._pending[keys] = array("d")
        pending.extend(values_ms)
        self._pending_values += len(values_ms)
        if self._pending_values >= PENDING_VALUES:
            self._count_pending()

    def _count_pending(self) -> None:
        """Count every pending value into its histograms."""
        pending, self._pending, self._pending_values = self._pending, {}, 0
        for keys, values in pending.items():
            record_many([self._get(k) for k in keys], values)

    def encode(self) -> dict[str, str]:
        """Every histogram as `metric|class|level` -> HdrHistogram base64, for shipping between runners."""
        return dict(self.encode_items())

    def encode_items(self) -> Iterator[tuple[str, str]]:
        """`encode()` one histogram at a time, so a caller on the event loop can yield between them."""
        self._count_pending()
        for (m, c, lv), h in list(self._hists.items()):
            yield f"{m}|{c}|{lv}", h.encode().decode("ascii")

    def drain_items(self) -> Iterator[tuple[str, str]]:
        """Like `encode_items`, for the histograms holding values, each emptied in place as it is encoded.

        A worker ships what it recorded since its last batch every two seconds: emptying the same buffers
        (188 KB of counts each) instead of making a new set keeps its allocator from fragmenting. Encoding
        and emptying one histogram happen with no yield between them, so a value recorded while a caller
        yields lands whole in this batch or the next."""
        self._count_pending()
        for (m, c, lv), h in list(self._hists.items()):
            if h.total_count:
                blob = h.encode().decode("ascii")
                _empty(h)
                yield f"{m}|{c}|{lv}", blob

    def get(self, metric: str, cls: str, level: LevelKey = ALL_LEVELS) -> HdrHistogram | None:
        self._count_pending()
        return self._hists.get((metric, cls, level))

    def classes(self) -> list[str]:
        """The prompt classes recorded so far, sorted."""
        self._count_pending()
        return sorted({c for _, c, _ in self._hists})

    def merge_encoded(self, encoded: dict[str, str]) -> None:
        """Add histograms produced by `encode()` (e.g. a worker's) into these."""
        for name, blob in encoded.items():
            metric, cls, level = name.split("|")
            self._get((metric, cls, parse_key(level))).add(HdrHistogram.decode(blob))

    def merge(self, other: LatencyHistograms) -> None:
        other._count_pending()
        for key, hist in other._hists.items():
            self._get(key).add(hist)

    def clear(self) -> None:
        self._hists.clear()
        self._pending.clear()
        self._pending_values = 0

    def to_dict(self) -> dict:
        """The PREFIX_latency.json document (schema runfiles.LATENCY_SCHEMA)."""
        self._count_pending()
        metrics: dict[str, dict] = {}
        levels: dict[str, dict] = {}
        for level in sorted({lv for _, _, lv in self._hists}, key=key_order):
            target = metrics if level == ALL_LEVELS else levels.setdefault(str(level), {})
            for metric in METRICS:
                per_class = {c: h for (m, c, lv), h in self._hists.items() if m == metric and lv == level}
                if not per_class:
                    continue
                merged = new_histogram()
                for hist in per_class.values():
                    merged.add(hist)
                target[metric] = {"all": summarize(merged)}
                target[metric].update({c: summarize(h) for c, h in sorted(per_class.items())})
        return {"schema": LATENCY_SCHEMA, "unit": "ms", "metrics": metrics, "levels": levels}

    def write(self, path: Path) -> None:
        """Write atomically, so a reader never sees half a file (WriteFailed: the old one stays)."""
        write_whole(path, orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2))
