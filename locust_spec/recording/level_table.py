"""The table a headless run prints at its end: per level, what locust-spec measured, in a few lines.

Locust's own table rounds TPOT to whole ms and its Aggregated row is every request's E2E over all levels;
acceptance and exact percentiles were only in the run's files. `LevelTally` takes every request row as it is
reported (a local runner's processor, a master's collector: rows carry the float ms measured), so the table
is the same on a local run and on a master, with or without `--csv`; `table` lays it out (pure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from locust_spec.core.level import LevelKey, in_level_order
from locust_spec.core.runfiles import ErrorKind, RequestRow, error_kind
from locust_spec.metrics import level_window
from locust_spec.metrics.counters import SpecWindow
from locust_spec.recording.histograms import new_histogram, percentiles_us, record_ms

MAX_LEVELS = 64
"""A ladder has a handful; past this many, requests at new levels are left out of the table (it says so)."""


@dataclass(eq=False)
class _Level:
    """One level's requests outside warm-up (cut off at stop: neither)."""

    requests: int = 0
    failures: int = 0
    output_tokens: int = 0
    accepted: int = 0
    drafted: int = 0
    first_start_s: float = math.inf
    last_end_s: float = -math.inf
    ttft: HdrHistogram = field(default_factory=new_histogram)
    tpot: HdrHistogram = field(default_factory=new_histogram)


class LevelTally:
    """Per level: requests, failures, output tokens over the span they were sent in, the server's
    per-request draft counts when it sends them, and exact (HDR, µs) TTFT and TPOT distributions."""

    def __init__(self) -> None:
        self._levels: dict[LevelKey, _Level] = {}
        self.left_out = 0

    def clear(self) -> None:
        self._levels.clear()
        self.left_out = 0

    def add(self, row: RequestRow) -> None:
        kind = error_kind(row.error)
        if row.warmup or kind is ErrorKind.INTERRUPTED:
            return
        key = row.level_key  # users, or a rate level's `4/s`
        level = self._levels.get(key)
        if level is None:
            if len(self._levels) >= MAX_LEVELS:
                self.left_out += 1
                return
            level = self._levels[key] = _Level()
        level.requests += 1
        if row.error:
            level.failures += 1
            return
        level.output_tokens += row.output_tokens or 0
        level.accepted += row.spec_accepted_tokens or 0
        level.drafted += row.spec_draft_tokens or 0
        level.first_start_s = min(level.first_start_s, row.start_unix_s)
        level.last_end_s = max(level.last_end_s, row.start_unix_s + (row.e2e_ms or 0.0) / 1000.0)
        if row.ttft_ms is not None:
            record_ms(level.ttft, (row.ttft_ms,))
        if row.tpot_ms is not None:
            record_ms(level.tpot, (row.tpot_ms,))

    def lines(self, windows: Sequence[tuple[LevelKey, SpecWindow]],
              lag_by_level: Mapping[str, Mapping]) -> list[LevelLine]:
        """One line per level, in order. Acceptance from the server's counters over the level (its last
        window when the level came twice), else from the per-request draft counts, else None; `behind` is
        the worst load generator's share of the level's time its event loop was late (lag.py)."""
        accepted = {users: window.acceptance_rate for users, window in windows}
        out = []
        for users, level in in_level_order(self._levels):
            span = level.last_end_s - level.first_start_s
            rate = accepted.get(users)
            if rate is None and level.drafted:
                rate = level.accepted / level.drafted
            lag = lag_by_level.get(str(users)) or {}
            out.append(LevelLine(
                users, level.requests, level.failures, rate, *_p50_p99(level.ttft), *_p50_p99(level.tpot),
                level.output_tokens / span if span > 0 else None,
                float(lag["late_share"]) if lag.get("late_share") is not None else None))
        return out


@dataclass(frozen=True)
class LevelLine:
    users: LevelKey
    """The level: users, or a rate level's `4/s`."""
    requests: int
    failures: int
    acceptance: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    tok_s: float | None
    """Output tokens of the level's successful requests over the time they were sent in, all processes."""
    behind: float | None


def _p50_p99(hist: HdrHistogram) -> tuple[float | None, float | None]:
    if not hist.total_count:
        return None, None
    p50, p99 = percentiles_us(hist, (50.0, 99.0))
    return p50 / 1000.0, p99 / 1000.0


COLUMNS = (("level", 8, ""), ("requests", 9, "d"), ("failed", 7, "d"), ("acceptance", 11, ".3f"),
           ("TTFT p50", 10, ".3f"), ("TTFT p99", 10, ".3f"), ("TPOT p50", 10, ".3f"), ("TPOT p99", 10, ".3f"),
           ("tok/s", 9, ".1f"), ("behind", 7, ".1%"))


def table(lines: Sequence[LevelLine], left_out: int = 0) -> str:
    """The lines as a fixed-width table with a title and a key; "-" where a value is not known."""
    title = ("locust-spec, per level (warm-up and requests cut off at stop left out; TTFT and TPOT in ms, "
             "exact)")
    header = "".join(f"{name:>{width}}" for name, width, _ in COLUMNS)
    body = []
    for line in lines:
        values = (line.users, line.requests, line.failures, line.acceptance, line.ttft_p50_ms,
                  line.ttft_p99_ms, line.tpot_p50_ms, line.tpot_p99_ms, line.tok_s, line.behind)
        body.append("".join(f"{'-' if v is None else format(v, fmt):>{width}}"
                            for v, (_, width, fmt) in zip(values, COLUMNS, strict=True)))
    if not body:
        body.append("  no request was measured outside warm-up")
    key = [f"acceptance: the server's counters over the level, {level_window.LABEL} (else its per-request "
           "stats); tok/s: output tokens over the span",
           "of the level's requests; behind: share of the level's time a load generator's event loop was "
           "late (its timestamps too)"]
    tail = ([f"{left_out} requests at levels past the first {MAX_LEVELS} are not in this table"]
            if left_out else [])
    return "\n".join([title, header, *body, *key, *tail])
