"""Open-loop arrivals: one schedule of request arrivals for the whole test, the same on every process.

A rate level's plan (its rate, arrival process, seed, start and end, and the processes that share it) is
fixed once, by the master or the single process, and travels with the level (core/level.py). Every
load-generating process computes the same arrival times from it and takes its share, arrival j on slot
j mod N, so the shares together are exactly the process asked for, with no message per arrival. Pure: the
times are a function of the plan alone (numpy's PCG64 seeded from it), drawn in fixed blocks so memory
does not grow with the run's length.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

POISSON, CONSTANT, GAMMA = "poisson", "constant", "gamma"
ARRIVALS = (POISSON, CONSTANT, GAMMA)
TRACE = "trace"
"""A plan whose arrivals are a trace's times (`times`), not drawn (docs/traces.md)."""
BLOCK = 4096
"""Arrival gaps are drawn this many at a time: a long run's schedule is never held whole."""
MAX_RATE = 10_000.0
"""Requests per second, the most a rate may ask: a load generator process sends a few hundred to a few
thousand a second, so more is a typo; and counting a level's arrivals holds the event loop for as long
as they take to draw (`--rate 1e9`: minutes, the run deaf to SIGTERM)."""
MIN_BURSTINESS, MAX_BURSTINESS = 0.05, 1000.0
"""Gamma's shape: 0.05 is gaps with a coefficient of variation of 4.5, far burstier than any traffic
measured; below, the gaps underflow to zero and a level's count has no useful bound (1e-9 drew 68.5
million arrivals for a 10 req/s, 5 s level). 1000 is already constant gaps within 3%."""
MAX_LEVEL_ARRIVALS = 5_000_000
"""Arrivals one level may schedule (rate x the level's seconds): counting them takes about a second."""


@dataclass(frozen=True)
class ArrivalPlan:
    """One rate level's arrivals: `rate` per second over the whole test from `start_unix_s` (the first
    arrival is then) until `end_unix_s`, gaps exponential (poisson), equal (constant) or gamma-distributed
    with shape `burstiness` (below 1 burstier than Poisson, above 1 smoother; 1 is Poisson), drawn from
    `seed`. `slots` names the processes sharing it in slot order: arrival j goes to slots[j % len]."""

    rate: float
    arrival: str = POISSON
    burstiness: float = 1.0
    seed: int = 0
    start_unix_s: float = 0.0
    end_unix_s: float = math.inf
    slots: tuple[str, ...] = ("",)
    windows: tuple[tuple[float, float, int], ...] = ()
    """An arm's own blocks of the level under spec-ab's interleaved design (core/design.py), as (start,
    end, group) in unix seconds, in order: arrivals fall only inside them, each window's drawn from the
    seed and its group with times counted from its start, so every arm's block of a group gets the same
    arrivals (as it gets the same prompts). Empty: the whole plan."""
    times: tuple[float, ...] = ()
    """A trace's arrivals (arrival TRACE): seconds from the start, in order; `rate` is then their mean rate.
    After the last, none comes."""

    def __post_init__(self) -> None:
        check_rate(self.rate)
        if self.arrival not in (*ARRIVALS, TRACE):
            raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, not {self.arrival!r}")
        if (self.arrival == TRACE) != bool(self.times) or (self.times and self.windows):
            raise ValueError("a trace's plan has its times and no windows; a drawn plan has no times")
        if any(b < a for a, b in zip(self.times, self.times[1:], strict=False)) or \
                (self.times and not (self.times[0] >= 0 and math.isfinite(self.times[-1]))):
            raise ValueError("a trace's times are finite seconds of 0 or more, in order")
        check_burstiness(self.burstiness)
        if not self.slots:
            raise ValueError("an arrival plan needs at least one slot")
        pairs = zip(self.windows, self.windows[1:], strict=False)
        if any(not end > start for start, end, _ in self.windows) or any(b[0] < a[1] for a, b in pairs):
            raise ValueError("an arrival plan's windows must be non-empty and in order, without overlap")

    def open_s(self, from_unix_s: float, until_unix_s: float) -> float:
        """Seconds of [from, until) in which the plan sends: inside its windows, or all of them."""
        if not self.windows:
            return max(until_unix_s - from_unix_s, 0.0)
        return sum(max(min(end, until_unix_s) - max(start, from_unix_s), 0.0)
                   for start, end, _ in self.windows)

    def window_end(self, unix_s: float) -> float:
        """When the window holding `unix_s` closes (the plan's end when it has none, or none holds it)."""
        return next((end for start, end, _ in self.windows if start <= unix_s < end), self.end_unix_s)

    def slot_of(self, name: str) -> int | None:
        """The slot of the process called `name`, None when it holds none (it joined after the plan)."""
        return self.slots.index(name) if name in self.slots else None

    def to_message(self) -> dict:
        return {"rate": self.rate, "arrival": self.arrival, "burstiness": self.burstiness, "seed": self.seed,
                "start_unix_s": self.start_unix_s,
                "end_unix_s": None if math.isinf(self.end_unix_s) else self.end_unix_s,
                "slots": list(self.slots), "windows": [list(w) for w in self.windows],
                "times": list(self.times)}

    @classmethod
    def from_message(cls, data: dict) -> ArrivalPlan:
        end = data.get("end_unix_s")
        return cls(float(data["rate"]), str(data["arrival"]), float(data["burstiness"]), int(data["seed"]),
                   float(data["start_unix_s"]), math.inf if end is None else float(end),
                   tuple(str(s) for s in data["slots"]),
                   tuple((float(a), float(b), int(g)) for a, b, g in data.get("windows") or ()),
                   tuple(float(t) for t in data.get("times") or ()))


def check_rate(rate: float) -> float:
    if not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
        raise ValueError(f"a rate must be a positive number of requests per second, not {rate!r}")
    if rate > MAX_RATE:
        raise ValueError(f"a rate of {rate:g} requests per second is above the {MAX_RATE:g} allowed")
    return float(rate)


def check_burstiness(value: float) -> float:
    if not (isinstance(value, (int, float)) and MIN_BURSTINESS <= value <= MAX_BURSTINESS):
        raise ValueError(f"burstiness must be between {MIN_BURSTINESS:g} and {MAX_BURSTINESS:g} "
                         f"(1: Poisson), not {value!r}")
    return float(value)


def check_level_arrivals(rate: float, seconds: float) -> None:
    """Refuse a level that would schedule more than MAX_LEVEL_ARRIVALS (one line: what to lower)."""
    if rate * seconds > MAX_LEVEL_ARRIVALS:
        raise ValueError(f"{rate:g} requests per second for {seconds:g} s is {rate * seconds:,.0f} arrivals "
                         f"in one level, above the {MAX_LEVEL_ARRIVALS:,} allowed: lower the rate or shorten "
                         "the level")


def level_seed(seed: int, level_index: int) -> int:
    """The seed of one level's arrivals: each level of a sweep draws its own, both arms of an A/B the same."""
    return int(np.random.SeedSequence([abs(int(seed)), int(level_index)]).generate_state(1)[0])


def _gaps(rng: np.random.Generator, plan: ArrivalPlan, n: int) -> np.ndarray:
    mean = 1.0 / plan.rate
    if plan.arrival == POISSON:
        return rng.exponential(mean, n)
    # gamma with shape k and scale mean/k has the mean gap and a coefficient of variation of 1/sqrt(k)
    return rng.gamma(plan.burstiness, mean / plan.burstiness, n)


def window_seed(seed: int, group: int) -> int:
    """The seed of one window's arrivals: a level's blocks of one group draw the same on every arm."""
    return int(np.random.SeedSequence([abs(int(seed)), int(group), 1]).generate_state(1)[0])


def _windowed(plan: ArrivalPlan, block: int) -> Iterator[np.ndarray]:
    """`offsets` of a plan with windows: each window's own arrivals from its start to its end; after the
    last, one at infinity, forever (an arrival that never comes: the schedule is over)."""
    for start, end, group in plan.windows:
        shift = start - plan.start_unix_s
        for times in offsets(replace(plan, seed=window_seed(plan.seed, group), windows=()), block):
            inside = times[times < end - start]
            if len(inside):
                yield shift + inside
            if len(inside) < len(times):
                break
    while True:
        yield np.array([np.inf])


def offsets(plan: ArrivalPlan, block: int = BLOCK) -> Iterator[np.ndarray]:
    """Seconds from the plan's start to each arrival, in order, `block` at a time, without end.

    The first arrival is at the start (of each window, with windows); constant gaps are exact multiples
    (no summed rounding)."""
    if plan.windows:
        yield from _windowed(plan, block)
        return
    if plan.times:
        times = np.asarray(plan.times, dtype=np.float64)
        for first in range(0, len(times), block):
            yield times[first:first + block]
        while True:
            yield np.array([np.inf])  # an arrival that never comes: the trace is over
    if plan.arrival == CONSTANT:
        first = 0
        while True:
            yield np.arange(first, first + block, dtype=np.float64) / plan.rate
            first += block
    rng = np.random.default_rng(plan.seed)
    nxt = 0.0  # the next arrival's offset: each block's last gap leads into the next block
    while True:
        cumulative = nxt + np.cumsum(_gaps(rng, plan, block))
        yield np.concatenate(([nxt], cumulative[:-1]))
        nxt = float(cumulative[-1])


def arrivals(plan: ArrivalPlan, slot: int = 0, until_unix_s: float = math.inf,
             block: int = BLOCK) -> Iterator[tuple[int, float]]:
    """(index, unix time) of every arrival in slot `slot`'s share, in order, before the plan's end and
    `until_unix_s`."""
    slots = len(plan.slots)
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} outside the plan's {slots} slot(s)")
    stop = min(plan.end_unix_s, until_unix_s)
    first = 0
    for times in offsets(plan, block):
        times = plan.start_unix_s + times
        index = np.arange(first, first + len(times))
        keep = (index % slots == slot) & (times < stop)
        yield from zip(index[keep].tolist(), times[keep].tolist(), strict=True)
        if len(times) and times[-1] >= stop:
            return
        first += len(times)


def count_by_slot(plan: ArrivalPlan, from_unix_s: float, until_unix_s: float) -> list[int]:
    """How many of the plan's arrivals fall in [from, until) (and before its end), per slot."""
    return SlotCounter(plan, from_unix_s).until(until_unix_s)


class SlotCounter:
    """`count_by_slot` for a window whose end moves on (a level still running): each call counts only the
    arrivals since the previous one, so asking every few seconds costs what arrived meanwhile."""

    def __init__(self, plan: ArrivalPlan, from_unix_s: float) -> None:
        self.plan = plan
        self.from_unix_s = from_unix_s
        self._restart()

    def _restart(self) -> None:
        self._blocks = offsets(self.plan)
        self._times = np.empty(0)
        self._first = 0  # the index of _times[0]
        self._counted_until = -math.inf
        self._counts = np.zeros(len(self.plan.slots), dtype=np.int64)

    def until(self, until_unix_s: float) -> list[int]:
        stop = min(self.plan.end_unix_s, until_unix_s)
        if not math.isfinite(stop):
            raise ValueError("counting arrivals needs an end")
        if stop < self._counted_until:
            self._restart()  # an end moved back: count again from the start
        slots = len(self.plan.slots)
        while True:
            if not len(self._times):
                self._times = self.plan.start_unix_s + next(self._blocks)
            inside = self._times < stop
            taken = int(inside.sum())  # the times are in order: the first `taken` are before the end
            index = np.arange(self._first, self._first + taken)[self._times[:taken] >= self.from_unix_s]
            self._counts += np.bincount(index % slots, minlength=slots)
            self._times, self._first = self._times[taken:], self._first + taken
            if len(self._times):  # an arrival at or past the end is left: this window is counted
                self._counted_until = stop
                return self._counts.tolist()


def coefficient_of_variation(times: Sequence[float]) -> float | None:
    """The gaps' standard deviation over their mean: 1 for Poisson arrivals, 0 for constant ones."""
    gaps = np.diff(np.sort(np.asarray(times, dtype=np.float64)))
    if len(gaps) < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std(ddof=1) / gaps.mean())
