"""The load generator's own budget per ladder level: token chunks it handled per second and the share of a
core it used doing so, so that a reader of PREFIX_summary.json sees whether the client had headroom (the
numbers it reports were not capped by it) or was the bottleneck; and how many processes a load needs.
Also per level: the time its users were held back because the server refused them (429/503, refused
connects: client/backoff.py), during which the server had fewer users than the level's.

The cost per chunk depends on the machine (benchmarks/capacity.py: ~15 us on a fast one, ~30 on a slow
2-core VM, everything a Locust process does included), so a plan takes it from a measurement: a run's own
budget (`measured_cost`) or a short calibration run (ab/capacity.py). A process is given half a core's
worth of chunks so that its event loop stays free to read and stamp arrivals on time (a loop busy more than
half the time makes late stamps the rule, not the exception).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import gevent

from locust_spec.core.level import LevelKey, in_level_order

HALF_CORE = 0.5
"""The share of a core a process is planned for at the top level (its event loop free half the time)."""
WORST_US_PER_CHUNK = 80.0
"""A cost per chunk above any measured (~40 us on a slow CI-class machine under load): a load this figure
keeps under half a core needs one process, whatever this machine costs, and no calibration."""
# A stream's chunk rate when nothing better is known: one token chunk per 10 ms decode step, about what a
# current GPU gives a small model with hundreds of streams (a slower server only makes the plan roomier).
STREAM_CHUNKS_PER_S = 100.0
MIN_CHUNKS = 5_000  # a level's budget counts as a measurement of the cost from this many chunks on
SAMPLE_S = 1.0
MAX_LEVELS = 64  # as the lag monitor: a ladder has a handful of levels


@dataclass(frozen=True)
class Cost:
    """What one load-generating process spends per token chunk on this machine, and where that was seen."""

    us_per_chunk: float
    source: str


def processes_for(max_users: int, cores: int, cost: Cost,
                  stream_chunks_per_s: float = STREAM_CHUNKS_PER_S, runs_at_once: int = 1) -> tuple[int, str]:
    """(process count of one run, the reason in one line, with the figures) for a load of `max_users`
    streams on `cores` cores: enough processes that each stays under half a core at the top level.
    `runs_at_once` runs load at the same time (a simultaneous design's arms) and share the cores."""
    rate = max_users * stream_chunks_per_s
    per_process = HALF_CORE / (cost.us_per_chunk * 1e-6)
    wanted = max(1, math.ceil(rate / per_process))
    runs_at_once = max(runs_at_once, 1)
    cores_each = max(cores // runs_at_once, 1)
    chosen = min(wanted, cores_each)
    reason = (f"{chosen} load-generating process{'es' if chosen > 1 else ''}: up to {max_users} streams x "
              f"{stream_chunks_per_s:g} chunks/s = {rate:,.0f} chunks/s; a process costs "
              f"{cost.us_per_chunk:.1f} us of CPU per chunk here ({cost.source}), so {per_process:,.0f} "
              f"chunks/s keep it under {HALF_CORE:.0%} of a core")
    if chosen < wanted:
        shared = f", {runs_at_once} runs at once" if runs_at_once > 1 else ""
        reason += (f"; {wanted} wanted, capped at the cores available ({cores}{shared}): expect the client "
                   "to lag at the top level")
    return chosen, reason


def one_process_enough(max_users: int, stream_chunks_per_s: float = STREAM_CHUNKS_PER_S) -> bool:
    """Whether even the worst cost per chunk keeps this load under half a core (nothing to measure)."""
    return max_users * stream_chunks_per_s * WORST_US_PER_CHUNK * 1e-6 <= HALF_CORE


def measured_cost(summary: Mapping, source: str) -> Cost | None:
    """The cost per chunk a run's PREFIX_summary.json measured: its processes' highest over the levels
    with at least MIN_CHUNKS chunks (the busiest levels read many streams per wake-up and cost least per
    chunk; the plan takes the dearest); None when no level measured enough."""
    client = summary.get("client") if isinstance(summary, Mapping) else None
    generators = client.get("generators", client) if isinstance(client, Mapping) else None
    processes = generators.get("by_process") if isinstance(generators, Mapping) else None
    costs = []
    for part in (processes or {}).values():
        for spent in ((part or {}).get("budget_by_level") or {}).values():
            us = spent.get("cpu_us_per_chunk") if isinstance(spent, Mapping) else None
            if isinstance(us, int | float) and us > 0 and int(spent.get("chunks") or 0) >= MIN_CHUNKS:
                costs.append(float(us))
    return Cost(max(costs), source) if costs else None


def processes_advice(spent: Mapping) -> str:
    """For a level whose busiest process was over half a core: how many processes its chunk rate needs at
    the cost per chunk it measured ("" when unknown)."""
    us, wall = spent.get("cpu_us_per_chunk"), float(spent.get("wall_s") or 0.0)
    chunks = int(spent.get("chunks_all_processes") or spent.get("chunks") or 0)
    if not us or wall <= 0 or not chunks:
        return ""
    rate = chunks / wall
    wanted = max(1, math.ceil(rate * float(us) * 1e-6 / HALF_CORE))
    return (f"; at the {float(us):.1f} us per chunk measured here, {rate:,.0f} chunks/s want --processes "
            f"{wanted} to keep each under {HALF_CORE:.0%} of a core")


class LevelBudget:
    __slots__ = ("chunks", "cpu_s", "wall_s", "holds", "held_s")

    def __init__(self) -> None:
        self.chunks = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.holds = 0
        self.held_s = 0.0

    def summary(self) -> dict:
        share = self.cpu_s / self.wall_s if self.wall_s else 0.0
        return {"chunks": self.chunks, "wall_s": round(self.wall_s, 3),
                "chunks_per_s": round(self.chunks / self.wall_s, 1) if self.wall_s else 0.0,
                "cpu_share": round(share, 4), "cpu_headroom": round(max(0.0, 1.0 - share), 4),
                "cpu_us_per_chunk": round(self.cpu_s / self.chunks * 1e6, 2) if self.chunks else None,
                "holds": self.holds, "held_s": round(self.held_s, 3)}


class ClientBudget:
    """Chunks handled (counted as each request is processed) and this process's CPU time (sampled every
    `sample_s` while `active()`), both per ladder level (`level()` users at that moment)."""

    def __init__(self, active: Callable[[], bool] = lambda: True, level: Callable[[], LevelKey] = lambda: 0,
                 sample_s: float = SAMPLE_S) -> None:
        self.active = active
        self.level = level
        self.sample_s = sample_s
        self.by_level: dict[LevelKey, LevelBudget] = {}
        self._greenlet: gevent.Greenlet | None = None

    def _at(self, users: LevelKey) -> LevelBudget | None:
        found = self.by_level.get(users)
        if found is None and len(self.by_level) < MAX_LEVELS:
            found = self.by_level[users] = LevelBudget()
        return found

    def add_chunks(self, users: LevelKey, chunks: int) -> None:
        at = self._at(users)
        if at is not None:
            at.chunks += chunks

    def add_held(self, users: LevelKey, seconds: float) -> None:
        """A request at `users` was sent `seconds` late: its user waited as the server asked."""
        at = self._at(users)
        if at is not None:
            at.holds += 1
            at.held_s += seconds

    def add_time(self, users: LevelKey, cpu_s: float, wall_s: float) -> None:
        at = self._at(users)
        if at is not None:
            at.cpu_s += cpu_s
            at.wall_s += wall_s

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        while True:
            was_active = self.active()
            gevent.sleep(self.sample_s)
            cpu1, wall1 = time.process_time(), time.perf_counter()
            if was_active and self.active():
                self.add_time(self.level(), cpu1 - cpu, wall1 - wall)
            cpu, wall = cpu1, wall1

    def summary(self) -> dict:
        return {str(users): b.summary() for users, b in in_level_order(self.by_level)}


def combine(parts: Sequence[Mapping[str, dict]]) -> dict:
    """Per level over every process: the busiest process's share and chunk rate (it is the one whose
    stamps a lack of headroom would delay), and the chunks and holds of all."""
    out: dict[str, dict] = {}
    for by_level in parts:
        for users, b in by_level.items():
            seen = out.get(str(users))
            total = int(b.get("chunks") or 0) + (seen["chunks_all_processes"] if seen else 0)
            holds = int(b.get("holds") or 0) + (seen["holds"] if seen else 0)
            held = float(b.get("held_s") or 0.0) + (seen["held_s"] if seen else 0.0)
            if seen is None or float(b.get("cpu_share") or 0.0) > seen["cpu_share"]:
                seen = out[str(users)] = {**b, "cpu_share": float(b.get("cpu_share") or 0.0)}
            seen["chunks_all_processes"], seen["holds"], seen["held_s"] = total, holds, round(held, 3)
    return dict(in_level_order(out))


def held_share(users: int, spent: Mapping[str, object]) -> float | None:
    """The share of a level's user time (users x its wall time) its users spent held back; None unknown."""
    wall = float(spent.get("wall_s") or 0.0)
    return float(spent.get("held_s") or 0.0) / (users * wall) if users > 0 and wall > 0 else None
