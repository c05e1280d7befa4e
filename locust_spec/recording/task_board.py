"""The live page's per-task table (pure): for the current ladder level, each prompt class's acceptance,
TPOT p50 and tokens/s per stream, each with a 95% interval, in memory that does not grow with the run.

Per task and level it keeps sums (and sums of squares) of each request's accepted and drafted tokens, its
output tokens and seconds, and an HDR histogram of TPOT. The intervals are closed forms a page can afford
every poll: a ratio of sums over requests (acceptance, tokens over request time) by the delta method, with
requests as the independent units, never tokens; the median by its order statistics (the ranks
n/2 -+ 1.96 sqrt(n)/2 bracket it with 95% confidence whatever the distribution). spec-verdict's are
bootstrap intervals over the run files; these say how settled a number on the page is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from locust_spec.core.runfiles import RequestRow
from locust_spec.recording.histograms import HIGHEST_US, LOWEST_US, percentiles_us, record_ms

Z95 = 1.959964
MAX_TASKS = 32
"""Classes beyond this many (a file with a category per row) share one row, OTHER."""
OTHER = "(other classes)"
MAX_LEVELS = 2
"""The level being measured and the one before it: its last requests still arrive after the change."""
FIELDS = ("task", "requests", "errors", "acceptance", "acceptance_lo", "acceptance_hi", "tpot_p50",
          "tpot_p50_lo", "tpot_p50_hi", "tok_s", "tok_s_lo", "tok_s_hi")


@dataclass
class Ratio:
    """sum(a) / sum(b) over units, with the sums the delta method's variance needs."""

    n: int = 0
    a: float = 0.0
    b: float = 0.0
    aa: float = 0.0
    bb: float = 0.0
    ab: float = 0.0

    def add(self, a: float, b: float) -> None:
        self.n += 1
        self.a += a
        self.b += b
        self.aa += a * a
        self.bb += b * b
        self.ab += a * b

    def interval(self) -> tuple[float | None, float | None, float | None]:
        """(estimate, lo, hi); no interval with fewer than two units."""
        if self.n == 0 or self.b <= 0:
            return None, None, None
        r = self.a / self.b
        if self.n < 2:
            return r, None, None
        residual = max(0.0, self.aa - 2 * r * self.ab + r * r * self.bb) / (self.n - 1)
        half = Z95 * math.sqrt(residual * self.n) / self.b
        return r, r - half, r + half


def median_interval(hist: HdrHistogram) -> tuple[float | None, float | None, float | None]:
    """The median (ms) and the order statistics around it that hold it with 95% confidence."""
    n = hist.total_count
    if n == 0:
        return None, None, None
    half = Z95 * math.sqrt(n) / 2
    lo_rank, hi_rank = max(0.0, n / 2 - half), min(float(n), n / 2 + half + 1)
    pcts = (50.0, max(lo_rank / n * 100, 1e-9), min(hi_rank / n * 100, 100.0))
    mid, lo, hi = (v / 1000.0 for v in percentiles_us(hist, pcts))
    return (mid, lo, hi) if n >= 6 else (mid, None, None)


@dataclass
class TaskStats:
    requests: int = 0
    errors: int = 0
    acceptance: Ratio = field(default_factory=Ratio)
    rate: Ratio = field(default_factory=Ratio)
    tpot: HdrHistogram = field(default_factory=lambda: HdrHistogram(LOWEST_US, HIGHEST_US, 2))

    def add(self, row: RequestRow) -> None:
        self.requests += 1
        if row.error is not None:
            self.errors += 1
            return
        if row.spec_draft_tokens:
            self.acceptance.add(float(row.spec_accepted_tokens or 0), float(row.spec_draft_tokens))
        if row.e2e_ms and row.output_tokens is not None:
            self.rate.add(float(row.output_tokens), row.e2e_ms / 1000.0)
        if row.tpot_ms is not None:
            record_ms(self.tpot, (row.tpot_ms,))

    def row(self, task: str) -> list:
        clipped = [None if v is None else min(1.0, max(0.0, v)) for v in self.acceptance.interval()]
        return [task, self.requests, self.errors, *clipped, *median_interval(self.tpot),
                *self.rate.interval()]


class TaskBoard:
    """Requests by level and task, past their level's warm-up (as the verdict counts them). The table shows
    the level whose first request started last; a straggler of a level no longer kept is left out."""

    def __init__(self) -> None:
        self.levels: dict[int, dict[str, TaskStats]] = {}
        self.first_start: dict[int, float] = {}

    @property
    def latest(self) -> int | None:
        return max(self.first_start, key=self.first_start.__getitem__) if self.first_start else None

    def clear(self) -> None:
        self.levels.clear()
        self.first_start.clear()

    def request(self, row: RequestRow) -> None:
        if row.warmup or (row.error or "").startswith("interrupted"):
            return
        level = self.levels.get(row.level_users)
        if level is None:
            if self.first_start and row.start_unix_s < max(self.first_start.values()):
                return  # the last requests of a level two changes back
            while len(self.levels) >= MAX_LEVELS:
                oldest = min(self.first_start, key=self.first_start.__getitem__)
                del self.levels[oldest], self.first_start[oldest]
            level = self.levels[row.level_users] = {}
            self.first_start[row.level_users] = row.start_unix_s
        task = row.prompt_class if row.prompt_class in level or len(level) < MAX_TASKS else OTHER
        level.setdefault(task, TaskStats()).add(row)

    def to_dict(self) -> dict:
        """The table of the latest level: one row per task (FIELDS)."""
        latest = self.latest
        tasks = sorted(self.levels[latest].items()) if latest is not None else []
        rows = [stats.row(task) for task, stats in tasks]
        return {"level": latest, "fields": FIELDS, "rows": rows}
