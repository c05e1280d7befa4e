"""Exact latency distributions: HDR histograms (µs) per (metric, prompt class, level): merge, encode."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson
from hdrh.histogram import HdrHistogram

from locust_spec.runfiles import LATENCY_SCHEMA
from locust_spec.timing import RequestTiming

METRICS = ("ttft", "itl", "chunk_gap", "tpot", "e2e")
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
ALL_LEVELS = -1  # the level key of the histograms that include every request, warm-up too

Key = tuple[str, str, int]


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def record_ms(hist: HdrHistogram, values_ms: Iterable[float]) -> None:
    """Record float-ms values at µs resolution.

    Computes the counts index inline (for lowest value 1) because the library's per-value
    `record_value` costs ~17 µs and a request can carry hundreds of ITL values.
    """
    counts = hist.counts
    mask = hist.sub_bucket_mask
    half_mag = hist.sub_bucket_half_count_magnitude
    base = hist.sub_bucket_half_count
    lo, hi, n = hist.min_value, hist.max_value, 0
    for ms in values_ms:
        v = min(max(int(ms * 1000.0 + 0.5), LOWEST_US), HIGHEST_US)
        bucket = (v | mask).bit_length() - half_mag - 1
        counts[((bucket + 1) << half_mag) + (v >> bucket) - base] += 1
        lo = min(lo, v)
        hi = max(hi, v)
        n += 1
    hist.total_count += n
    hist.min_value, hist.max_value = lo, hi


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
    """Several percentiles in one pass over the counts (the library walks the array once per call)."""
    targets = sorted((hist.get_target_count_at_percentile(p), i) for i, p in enumerate(pcts))
    result = [0] * len(targets)
    if not hist.total_count:
        return result
    total, t = 0, 0
    for index, count in enumerate(hist.counts):
        if not count:
            continue
        total += count
        while t < len(targets) and total >= targets[t][0]:
            result[targets[t][1]] = hist.get_highest_equivalent_value(hist.get_value_from_index(index))
            t += 1
        if t == len(targets):
            break
    return result


class LatencyHistograms:
    """Histograms per (metric, prompt class, level); created on first use, so memory grows with
    classes x levels, never with run length. Level ALL_LEVELS holds every request (warm-up too);
    a level's own histograms exclude warm-up requests."""

    def __init__(self) -> None:
        self._hists: dict[Key, HdrHistogram] = {}

    def _get(self, key: Key) -> HdrHistogram:
        hist = self._hists.get(key)
        if hist is None:
            hist = self._hists[key] = new_histogram()
        return hist

    def record(self, metric: str, cls: str, level: int, values_ms: Iterable[float], warmup: bool) -> None:
        values = values_ms if isinstance(values_ms, (list, tuple)) else list(values_ms)
        if not values:
            return
        record_ms(self._get((metric, cls, ALL_LEVELS)), values)
        if not warmup:
            record_ms(self._get((metric, cls, level)), values)

    def record_timing(self, timing: RequestTiming, cls: str, level: int, warmup: bool) -> None:
        """A finished request's measurements; failed requests are recorded by the caller only if wanted."""
        for metric, values in (
            ("ttft", () if timing.ttft_ms is None else (timing.ttft_ms,)),
            ("itl", timing.itl_ms),
            ("chunk_gap", timing.chunk_gaps_ms),
            ("tpot", () if timing.tpot_ms is None else (timing.tpot_ms,)),
            ("e2e", (timing.e2e_ms,)),
        ):
            self.record(metric, cls, level, values, warmup)

    def encode(self) -> dict[str, str]:
        """Every histogram as `metric|class|level` -> HdrHistogram base64, for shipping between runners."""
        return dict(self.encode_items())

    def encode_items(self) -> Iterator[tuple[str, str]]:
        """`encode()` one histogram at a time, so a caller on the event loop can yield between them."""
        for (m, c, lv), h in list(self._hists.items()):
            yield f"{m}|{c}|{lv}", h.encode().decode("ascii")

    def get(self, metric: str, cls: str, level: int = ALL_LEVELS) -> HdrHistogram | None:
        return self._hists.get((metric, cls, level))

    def classes(self) -> list[str]:
        """The prompt classes recorded so far, sorted."""
        return sorted({c for _, c, _ in self._hists})

    def merge_encoded(self, encoded: dict[str, str]) -> None:
        """Add histograms produced by `encode()` (e.g. a worker's) into these."""
        for name, blob in encoded.items():
            metric, cls, level = name.split("|")
            self._get((metric, cls, int(level))).add(HdrHistogram.decode(blob))

    def merge(self, other: LatencyHistograms) -> None:
        for key, hist in other._hists.items():
            self._get(key).add(hist)

    def clear(self) -> None:
        self._hists.clear()

    def to_json(self) -> dict:
        """The PREFIX_latency.json document (schema runfiles.LATENCY_SCHEMA)."""
        metrics: dict[str, dict] = {}
        levels: dict[str, dict] = {}
        for level in sorted({lv for _, _, lv in self._hists}):
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
        """Write atomically, so a reader never sees half a file."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2))
        os.replace(tmp, path)
