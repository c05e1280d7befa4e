"""The live page's time series (pure): what the run looked like over time, in bounded memory.

Two series, each a `Series` of fixed capacity whatever the run's length:

- client points, one per tick (2 s): TTFT p50, TPOT p50/p99 and output tokens/s over the requests reported
  in the last WINDOW_S (a sliding window of HDR histograms, one per tick), the users running, and the worst
  load generator's share of late event-loop wake-ups and its share of a core (its budget's CPU time) since
  the previous tick; open loop, also the rate asked, the requests per second sent on schedule and their
  lateness p99 over the window;
- server points, one per /metrics scrape: acceptance rate, mean acceptance length and per-position
  acceptance from the counters' increase since the previous scrape, requests running and waiting (gauges),
  generated tokens/s.

Level changes are kept as (time, level) marks: users, or a rate key (`4/s`). Nothing here reads a clock or
does I/O: the caller passes the time, the requests, the scrapes and the load generators' client summaries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from locust_spec.core.level import LevelKey
from locust_spec.metrics import power
from locust_spec.metrics.counters import RUNNING, WAITING, Snapshot, WindowAccumulator
from locust_spec.recording.histograms import HIGHEST_US, LOWEST_US, percentiles_us, record_ms
from locust_spec.recording.task_board import TaskBoard

TICK_S = 2.0
WINDOW_S = 10.0  # Locust's own charts use a 10 s window too; 2 s at one user holds one or two requests
RECENT_POINTS = 300  # ten minutes at one point per tick, as taken
OLDER_POINTS = 200  # everything before, thinned to fit
MAX_LEVELS = 256  # a ladder has a handful; past this many only the latest are kept
# A counter increase over less than this (a level's scrape just after a regular one) says little: the
# baseline snapshot is kept until the next scrape is this far from it.
MIN_SPAN_S = 1.0
# Two significant figures (1 %) is plenty for a chart and keeps a histogram at 3328 counts (26 KB).
LIVE_SIGNIFICANT_FIGURES = 2

CLIENT_FIELDS = ("t", "users", "requests", "errors", "tok_s", "ttft_p50", "tpot_p50", "tpot_p99", "lag_pct",
                 "cpu_pct", "rate_target", "rate_sent", "late_p99", "itl_p50", "itl_p99")
SERVER_FIELDS = ("t", "acceptance", "mean_len", "per_position", "running", "waiting", "gen_tok_s", "power_w")


class Series:
    """Points in time order: the last `recent` as taken, the older ones thinned into at most `older`.

    When the older part is full, every other point of it is dropped and from then on only every
    `stride`-th point leaving the recent part is kept, so the older part stays spread evenly over the
    run's beginning. A kept point is still exactly what was measured over its own interval.
    """

    def __init__(self, recent: int = RECENT_POINTS, older: int = OLDER_POINTS) -> None:
        if recent < 1 or older < 2:
            raise ValueError("a series needs room for at least one recent and two older points")
        self._recent: deque[tuple] = deque(maxlen=recent)
        self._older: list[tuple] = []
        self._older_cap = older
        self._stride = 1
        self._skipped = 0

    def append(self, point: tuple) -> None:
        if len(self._recent) == self._recent.maxlen:
            self._age(self._recent[0])
        self._recent.append(point)

    def _age(self, point: tuple) -> None:
        self._skipped += 1
        if self._skipped < self._stride:
            return
        self._skipped = 0
        self._older.append(point)
        if len(self._older) > self._older_cap:
            self._older = self._older[::2]
            self._stride *= 2

    def points(self) -> list[tuple]:
        return self._older + list(self._recent)

    def __len__(self) -> int:
        return len(self._older) + len(self._recent)

    def clear(self) -> None:
        self._recent.clear()
        self._older = []
        self._stride = 1
        self._skipped = 0


def _live_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, LIVE_SIGNIFICANT_FIGURES)


def _counts(hist: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(hist.counts)


class _Slot:
    """One tick's requests: TTFT and TPOT histograms, the requests' own ITL p50 and p99, output tokens and
    counts."""

    def __init__(self) -> None:
        self.ttft = _live_histogram()
        self.tpot = _live_histogram()
        self.late = _live_histogram()
        self.itl_p50 = _live_histogram()
        self.itl_p99 = _live_histogram()
        self.started_unix_s = 0.0
        self.tokens = 0
        self.requests = 0
        self.errors = 0
        self.arrivals = 0

    def hists(self) -> tuple[HdrHistogram, ...]:
        return self.ttft, self.tpot, self.late, self.itl_p50, self.itl_p99

    def reset(self, now_unix_s: float) -> None:
        for hist in self.hists():
            _counts(hist)[:] = 0
            hist.total_count = 0
        self.started_unix_s = now_unix_s
        self.tokens = self.requests = self.errors = self.arrivals = 0


class SlidingWindow:
    """Requests reported over the last `slots` ticks: totals kept beside the per-tick slots, so a
    percentile costs one walk of one histogram and a tick one subtraction of the slot that expires."""

    def __init__(self, slots: int) -> None:
        self._slots: deque[_Slot] = deque()
        self.slots = slots
        self._total = _Slot()
        self._free: list[_Slot] = []

    def start(self, now_unix_s: float) -> None:
        self._free.extend(self._slots)
        self._slots.clear()
        self._total.reset(now_unix_s)
        self._open(now_unix_s)

    def _open(self, now_unix_s: float) -> None:
        slot = self._free.pop() if self._free else _Slot()
        slot.reset(now_unix_s)
        self._slots.append(slot)

    def add(self, ttft_ms: float | None, tpot_ms: float | None, output_tokens: int | None, ok: bool,
            lateness_ms: float | None = None,
            itl_ms: tuple[float | None, float | None] = (None, None)) -> None:
        """One request; `itl_ms` its own inter-token latency p50 and p99 (a request's gaps are not kept)."""
        if not self._slots:
            return
        for slot in (self._slots[-1], self._total):
            slot.requests += 1
            if lateness_ms is not None:  # sent for an arrival (open loop), failed or not
                slot.arrivals += 1
                record_ms(slot.late, (max(lateness_ms, 0.0),))
            if not ok:
                slot.errors += 1
                continue
            slot.tokens += output_tokens or 0
            if ttft_ms is not None:
                record_ms(slot.ttft, (ttft_ms,))
            if tpot_ms is not None:
                record_ms(slot.tpot, (tpot_ms,))
            for hist, value in zip((slot.itl_p50, slot.itl_p99), itl_ms, strict=True):
                if value is not None:
                    record_ms(hist, (value,))

    def rotate(self, now_unix_s: float) -> None:
        """Close the current tick; the oldest leaves the window once it holds `slots` ticks."""
        if len(self._slots) >= self.slots:
            old = self._slots.popleft()
            for mine, theirs in zip(self._total.hists(), old.hists(), strict=True):
                _counts(mine)[:] -= _counts(theirs)
                mine.total_count -= theirs.total_count
            self._total.tokens -= old.tokens
            self._total.requests -= old.requests
            self._total.errors -= old.errors
            self._total.arrivals -= old.arrivals
            self._free.append(old)
        self._open(now_unix_s)

    def summary(self, now_unix_s: float) -> dict:
        """requests, errors, tok_s, ttft_p50, tpot_p50, tpot_p99, itl_p50 (the median of the requests' ITL
        p50), itl_p99 (the p99 of their ITL p99), and (open loop) rate_sent, late_p99 over the window (None
        when undefined)."""
        total = self._total
        span = now_unix_s - self._slots[0].started_unix_s if self._slots else 0.0
        ttft = _ms(total.ttft, (50.0,))
        tpot = _ms(total.tpot, (50.0, 99.0))
        return {"requests": total.requests, "errors": total.errors,
                "tok_s": total.tokens / span if span > 0 else None,
                "ttft_p50": ttft[0], "tpot_p50": tpot[0], "tpot_p99": tpot[1],
                "rate_sent": total.arrivals / span if span > 0 and total.arrivals else None,
                "late_p99": _ms(total.late, (99.0,))[0],
                "itl_p50": _ms(total.itl_p50, (50.0,))[0], "itl_p99": _ms(total.itl_p99, (99.0,))[0]}


def _ms(hist: HdrHistogram, pcts: Sequence[float]) -> list[float | None]:
    if not hist.total_count:
        return [None] * len(pcts)
    return [v / 1000.0 for v in percentiles_us(hist, pcts)]


class WorstShare:
    """The worst load generator's share over the last interval, from two cumulative counts in its client
    summary (`counts(summary) -> (whole, part)`): part's increase over whole's since the previous call.

    A local run has one generator, a distributed run one per worker; a generator whose whole did not grow
    adds nothing, and one whose counts went back (restarted) counts from zero again."""

    def __init__(self, counts: Callable[[Mapping], tuple[float, float]]) -> None:
        self._counts = counts
        self._prev: dict[str, tuple[float, float]] = {}

    def reset(self, summaries: Mapping[str, Mapping]) -> None:
        self._prev = {name: self._counts(s) for name, s in summaries.items()}

    def share(self, summaries: Mapping[str, Mapping]) -> float | None:
        worst: float | None = None
        previous, self._prev = self._prev, {}  # generators gone since are forgotten
        for name, summary in summaries.items():
            whole, part = self._counts(summary)
            before = previous.get(name, (0, 0))
            self._prev[name] = (whole, part)
            if whole < before[0]:  # a restarted generator counts from zero again
                before = (0, 0)
            new = whole - before[0]
            if new > 0:
                share = (part - before[1]) / new
                worst = share if worst is None else max(worst, share)
        return worst


def lag_counts(summary: Mapping) -> tuple[int, int]:
    """Event-loop wake-ups sampled and those late (lag.py)."""
    return int(summary.get("loop_lag_samples") or 0), int(summary.get("loop_lag_late_samples") or 0)


def cpu_counts(summary: Mapping) -> tuple[float, float]:
    """Wall and CPU seconds the generator's budget measured, all levels together (budget.py)."""
    wall = cpu = 0.0
    for spent in (summary.get("budget_by_level") or {}).values():
        seconds = float(spent.get("wall_s") or 0.0)
        wall += seconds
        cpu += seconds * float(spent.get("cpu_share") or 0.0)
    return wall, cpu


@dataclass(frozen=True)
class ServerPoint:
    t: float
    acceptance: float | None
    mean_len: float | None
    per_position: tuple[float, ...]
    running: float | None
    waiting: float | None
    gen_tok_s: float | None
    power_w: float | None = None


def _watts(pairs: Sequence[tuple[Snapshot, Snapshot]]) -> float | None:
    """The GPUs' mean power between each URL's previous scrape and this one (a DCGM exporter's energy
    counter, else its power gauge), summed over URLs; None when no URL exposes GPU power."""
    total, seen = 0.0, False
    for before, snap in pairs:
        t0, t1 = before.timestamp_unix_s, snap.timestamp_unix_s
        joules = power.window_joules(power.curves([before, snap]), np.array([t0]), np.array([t1]))
        if joules is not None:
            total += float(joules[0]) / (t1 - t0)
            seen = True
    return total if seen else None


def server_point(previous: Mapping[str, Snapshot], taken: Sequence[Snapshot]) -> ServerPoint | None:
    """One scrape round against the previous snapshot of each URL: counters' increases and gauges now."""
    if not taken:
        return None
    acc = WindowAccumulator()
    pairs = []
    for snap in taken:
        before = previous.get(snap.url)
        if before is not None and snap.timestamp_unix_s - before.timestamp_unix_s >= MIN_SPAN_S:
            acc.add(before)
            acc.add(snap)
            pairs.append((before, snap))
    window = acc.window() if acc.scrapes else None
    span = window.end_unix_s - window.start_unix_s if window is not None else 0.0
    gen = window.generation_tokens if window is not None else None
    return ServerPoint(
        t=max(s.timestamp_unix_s for s in taken),
        acceptance=window.acceptance_rate if window is not None else None,
        mean_len=window.mean_acceptance_length if window is not None else None,
        per_position=window.per_position if window is not None else (),
        running=_gauge(taken, RUNNING),
        waiting=_gauge(taken, WAITING),
        gen_tok_s=gen / span if gen is not None and span > 0 else None,
        power_w=_watts(pairs),
    )


def _gauge(snaps: Iterable[Snapshot], metric: str) -> float | None:
    values = [s.value for snap in snaps for s in snap.samples if s.metric == metric]
    return sum(values) if values else None


class Timeline:
    """One test's live series; `start` begins afresh, everything stays readable after `stop`."""

    def __init__(self, tick_s: float = TICK_S, window_s: float = WINDOW_S, recent: int = RECENT_POINTS,
                 older: int = OLDER_POINTS) -> None:
        self.tick_s = tick_s
        self.client = Series(recent, older)
        self.server = Series(recent, older)
        self.levels: deque[tuple[float, LevelKey]] = deque(maxlen=MAX_LEVELS)
        self.window = SlidingWindow(max(1, round(window_s / tick_s)))
        self.lag = WorstShare(lag_counts)
        self.cpu = WorstShare(cpu_counts)
        self.tasks = TaskBoard()
        """The current level's per-task table (task_board.py), fed with the rows by web/live.py."""
        self.started_unix_s: float | None = None
        self.stopped_unix_s: float | None = None
        self._last_snapshots: dict[str, Snapshot] = {}

    def start(self, now_unix_s: float, lag_summaries: Mapping[str, Mapping] | None = None) -> None:
        self.client.clear()
        self.server.clear()
        self.levels.clear()
        self.window.start(now_unix_s)
        self.lag.reset(lag_summaries or {})
        self.cpu.reset(lag_summaries or {})
        self.tasks.clear()
        self.started_unix_s = now_unix_s
        self.stopped_unix_s = None
        self._last_snapshots = {}

    @property
    def running(self) -> bool:
        return self.started_unix_s is not None and self.stopped_unix_s is None

    def request(self, ttft_ms: float | None, tpot_ms: float | None, output_tokens: int | None,
                ok: bool, lateness_ms: float | None = None,
                itl_ms: tuple[float | None, float | None] = (None, None)) -> None:
        """A request reported (finished, failed or interrupted) since the last tick; open loop, how late it
        went out; its own ITL p50 and p99."""
        if self.running:
            self.window.add(ttft_ms, tpot_ms, output_tokens, ok, lateness_ms, itl_ms)

    def scrape(self, taken: Sequence[Snapshot]) -> None:
        """A round of /metrics scrapes (one snapshot per URL that answered)."""
        if self.started_unix_s is None:
            return
        point = server_point(self._last_snapshots, taken)
        for snap in taken:
            before = self._last_snapshots.get(snap.url)
            if before is None or snap.timestamp_unix_s - before.timestamp_unix_s >= MIN_SPAN_S:
                self._last_snapshots[snap.url] = snap
        if point is not None:
            self.server.append((point.t, point.acceptance, point.mean_len, list(point.per_position),
                                point.running, point.waiting, point.gen_tok_s, point.power_w))

    def level(self, now_unix_s: float, users: LevelKey) -> None:
        """The ladder's level (or the target user count, or a rate key) as of now: marked when it changes (a
        count of 0, before the first users are asked for, is no level)."""
        if self.started_unix_s is not None and (isinstance(users, str) or users > 0) and (
                not self.levels or self.levels[-1][1] != users):
            self.levels.append((now_unix_s, users))

    def tick(self, now_unix_s: float, users: int, lag_summaries: Mapping[str, Mapping],
             rate: float | None = None) -> None:
        """Close the tick: one client point over the last window, then a new tick begins. `rate`: the
        requests per second asked (open loop)."""
        if not self.running:
            return
        self._point(now_unix_s, users, lag_summaries, rate)
        self.window.rotate(now_unix_s)

    def stop(self, now_unix_s: float, users: int, lag_summaries: Mapping[str, Mapping],
             rate: float | None = None) -> None:
        """The last point (requests drained at stop included); the picture stays until the next start."""
        if not self.running:
            return
        self._point(now_unix_s, users, lag_summaries, rate)
        self.stopped_unix_s = now_unix_s

    def _point(self, now_unix_s: float, users: int, lag_summaries: Mapping[str, Mapping],
               rate: float | None) -> None:
        s = self.window.summary(now_unix_s)
        lag, cpu = self.lag.share(lag_summaries), self.cpu.share(lag_summaries)
        self.client.append((now_unix_s, users, s["requests"], s["errors"], s["tok_s"], s["ttft_p50"],
                            s["tpot_p50"], s["tpot_p99"], None if lag is None else lag * 100.0,
                            None if cpu is None else cpu * 100.0, rate, s["rate_sent"], s["late_p99"],
                            s["itl_p50"], s["itl_p99"]))

    def to_json(self) -> dict:
        """What the page draws: columns named once, points as lists (times in unix seconds)."""
        return {
            "tick_s": self.tick_s,
            "window_s": self.window.slots * self.tick_s,
            "started": self.started_unix_s,
            "stopped": self.stopped_unix_s,
            "levels": [list(mark) for mark in self.levels],
            "client": {"fields": CLIENT_FIELDS, "points": [list(p) for p in self.client.points()]},
            "server": {"fields": SERVER_FIELDS, "points": [list(p) for p in self.server.points()]},
            "tasks": self.tasks.to_json(),
        }
