"""The load generator's own budget per ladder level: token chunks it handled per second and the share of a
core it used doing so, so that a reader of PREFIX_summary.json sees whether the client had headroom (the
numbers it reports were not capped by it) or was the bottleneck; and how many processes a load needs.
Also per level: the time its users were held back because the server refused them (429/503, an answer
any request would get, refused connects: client/backoff.py), during which the server had fewer users
than the level's.

The cost per chunk depends on the machine (benchmarks/capacity.py: ~15 us on a fast one, ~30 on a slow
2-core VM, everything a Locust process does included) and on how many streams a process serves (its one
reading loop serves more of them per wake-up the more there are: on that VM ~55 us at 64 streams, ~50 at 128,
~37 at 256), so a plan takes it from measurements, each at the streams a process had: a run's own budget
(`measured_costs`) or a short calibration run (ab/capacity.py), and bounds a process's share of a core at the
streams it would serve (`share_bound`). A process is given half a core's worth of chunks so that its event
loop stays free to read and stamp arrivals on time (a loop busy more than half the time makes late stamps
the rule, not the exception).

The cost per chunk is counted over the time the process was loaded: under spec-ab's interleaved design a
run's Locust keeps its users through the other arm's blocks, idle, and the CPU it spends then (its scraper,
Locust's own ticks) belongs to no chunk; counted, it made an interleaved run's quiet levels read up to half
again dearer than a sequential run's (docs/fidelity.md).
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
    """What one load-generating process spends per token chunk on this machine while it serves `streams`
    streams, and where that was seen."""

    us_per_chunk: float
    source: str
    streams: int = 1
    """Streams per process when measured (1 where not known, e.g. an open loop's rate level: then it
    bounds a process of any count)."""


@dataclass(frozen=True)
class Bound:
    """The most of a core a process serving `streams` streams uses, and the measurement that says so
    (`cost` None: the worst case, nothing measured at or below that count)."""

    streams: int
    share: float
    cost: Cost | None
    from_above: bool = False
    """Bounded by a measurement at more streams (a process's CPU does not fall with more streams)."""


def share_bound(streams: int, costs: Sequence[Cost],
                stream_chunks_per_s: float = STREAM_CHUNKS_PER_S) -> Bound:
    """The share of a core a process serving `streams` streams uses at most, from measured costs. Its
    cost per chunk falls as it serves more streams (more of them read per wake-up) while its CPU does not:
    a cost measured at m <= streams bounds it by streams x rate x that cost (the nearest m the tightest),
    one at m >= streams by m x rate x that cost; the worst cost per chunk bounds it always."""
    rate = streams * stream_chunks_per_s * 1e-6
    best = Bound(streams, rate * WORST_US_PER_CHUNK, None)
    for cost in costs:
        if cost.streams <= streams:
            found = Bound(streams, rate * cost.us_per_chunk, cost)
        else:
            found = Bound(streams, cost.streams * stream_chunks_per_s * 1e-6 * cost.us_per_chunk, cost, True)
        if found.share < best.share:
            best = found
    return best


def processes_for(max_users: int, cores: int, costs: Sequence[Cost],
                  stream_chunks_per_s: float = STREAM_CHUNKS_PER_S, runs_at_once: int = 1
                  ) -> tuple[int, str, Bound]:
    """(process count of one run, the reason in one line, with the figures, and the bound that decided
    it) for a load of `max_users` streams on `cores` cores: the fewest processes that keep each under half
    a core at the top level (each serving its share of the streams), at most the cores. `runs_at_once` runs
    load at the same time (a simultaneous design's arms) and share the cores."""
    rate = max_users * stream_chunks_per_s
    wanted, bound = 1, share_bound(max_users, costs, stream_chunks_per_s)
    # Bounded: at max_users / wanted <= 62 streams even the worst cost per chunk stays under half a core.
    while bound.share > HALF_CORE and wanted < max_users:
        wanted += 1
        bound = share_bound(math.ceil(max_users / wanted), costs, stream_chunks_per_s)
    runs_at_once = max(runs_at_once, 1)
    cores_each = max(cores // runs_at_once, 1)
    chosen = min(wanted, cores_each)
    reason = (f"{chosen} load-generating process{'es' if chosen > 1 else ''}: up to {max_users} streams x "
              f"{stream_chunks_per_s:g} chunks/s = {rate:,.0f} chunks/s; " + _bound_text(bound, wanted))
    if chosen < wanted:
        shared = f", {runs_at_once} runs at once" if runs_at_once > 1 else ""
        reason += (f"; {wanted} wanted, capped at the cores available ({cores}{shared}): expect the client "
                   "to lag at the top level")
    return chosen, reason, bound


def _bound_text(bound: Bound, wanted: int) -> str:
    """Why `wanted` processes of `bound.streams` streams each stay under half a core."""
    these = f"{wanted} process{'es' if wanted > 1 else ''} of {bound.streams} streams"
    cost = bound.cost
    if cost is None:
        return (f"{these} stay under {HALF_CORE:.0%} of a core even at {WORST_US_PER_CHUNK:g} us of CPU per "
                "chunk")
    if bound.from_above:
        return (f"a process costs {cost.us_per_chunk:.1f} us of CPU per chunk here at {cost.streams} streams "
                f"({cost.source}): {bound.share:.0%} of a core, and no more with fewer streams: {these}")
    per_process = HALF_CORE / (cost.us_per_chunk * 1e-6)
    at = f" at {cost.streams} streams" if cost.streams > 1 else ""  # not known: taken for any count
    return (f"a process costs {cost.us_per_chunk:.1f} us of CPU per chunk here{at} ({cost.source}), no more "
            f"with more streams, so {per_process:,.0f} chunks/s keep it under "
            f"{HALF_CORE:.0%} of a core: {these}, {bound.share:.0%} of a core each at most")


def one_process_enough(max_users: int, stream_chunks_per_s: float = STREAM_CHUNKS_PER_S) -> bool:
    """Whether even the worst cost per chunk keeps this load under half a core (nothing to measure)."""
    return max_users * stream_chunks_per_s * WORST_US_PER_CHUNK * 1e-6 <= HALF_CORE


def measured_costs(summary: Mapping, source: str) -> list[Cost]:
    """The costs per chunk a run's PREFIX_summary.json measured: at each level with at least MIN_CHUNKS
    chunks, the dearest of its processes, at the streams each served (the level's users over the processes,
    as Locust spreads them; an open loop's rate level: streams not known)."""
    client = summary.get("client") if isinstance(summary, Mapping) else None
    generators = client.get("generators", client) if isinstance(client, Mapping) else None
    processes = generators.get("by_process") if isinstance(generators, Mapping) else None
    processes = processes if isinstance(processes, Mapping) else {}
    dearest: dict[str, float] = {}
    for part in processes.values():
        by_level = part.get("budget_by_level") if isinstance(part, Mapping) else None
        for users, spent in (by_level if isinstance(by_level, Mapping) else {}).items():
            us = spent.get("cpu_us_per_chunk") if isinstance(spent, Mapping) else None
            chunks = spent.get("chunks") if isinstance(spent, Mapping) else None
            if isinstance(us, int | float) and us > 0 and isinstance(chunks, int) and chunks >= MIN_CHUNKS:
                dearest[str(users)] = max(float(us), dearest.get(str(users), 0.0))
    return [Cost(us, source, math.ceil(int(users) / len(processes)) if users.isdigit() else 1)
            for users, us in dearest.items()]


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
    __slots__ = ("chunks", "cpu_s", "wall_s", "loaded_cpu_s", "loaded_s", "loaded_chunks", "drain_cpu_s",
                 "holds", "held_s", "merged")

    def __init__(self) -> None:
        self.chunks = 0
        self.merged = 0
        """Token chunks that arrived in the read of the one before them (RequestTiming.merged_chunks)."""
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.loaded_cpu_s = 0.0
        self.loaded_s = 0.0
        self.drain_cpu_s = 0.0  # the stop's partial sample: a cost of chunks, no part of the level's time
        self.loaded_chunks = 0
        """The chunks handled within this level's loaded samples (whichever level their requests started
        at): the cost per chunk is over the time of its CPU. `chunks` counts by the requests' level, and
        more: a level's spawning second holds chunks but no sample."""
        self.holds = 0
        self.held_s = 0.0

    def summary(self) -> dict:
        share = self.cpu_s / self.wall_s if self.wall_s else 0.0
        loaded_share = self.loaded_cpu_s / self.loaded_s if self.loaded_s else 0.0
        chunks = self.loaded_chunks
        cost = round((self.loaded_cpu_s + self.drain_cpu_s) / chunks * 1e6, 2) if chunks else None
        return {"chunks": self.chunks, "wall_s": round(self.wall_s, 3),
                "chunks_per_s": round(self.chunks / self.wall_s, 1) if self.wall_s else 0.0,
                "cpu_share": round(share, 4), "cpu_headroom": round(max(0.0, 1.0 - share), 4),
                "cpu_us_per_chunk": cost,
                "loaded_s": round(self.loaded_s, 3),
                "loaded_cpu_share": round(loaded_share, 4),
                "holds": self.holds, "held_s": round(self.held_s, 3),
                "merged_chunks": self.merged}


class ClientBudget:
    """Chunks handled (counted as each request is processed) and this process's CPU time (sampled every
    `sample_s` while `active()`), both per ladder level (`level()` users at that moment). A sample is also
    loaded time when `loaded()` at its start or its end (under a blocked design: in this arm's block), or
    when it handled chunks (a block's last requests finish after it); the cost per chunk is the loaded
    samples' CPU over the chunks handled within them, the processor's drain at stop included."""

    def __init__(self, active: Callable[[], bool] = lambda: True, level: Callable[[], LevelKey] = lambda: 0,
                 sample_s: float = SAMPLE_S, loaded: Callable[[], bool] = lambda: True) -> None:
        self.active = active
        self.level = level
        self.loaded = loaded
        self.sample_s = sample_s
        self.by_level: dict[LevelKey, LevelBudget] = {}
        self._pending = 0  # chunks handled since the last sample
        self._greenlet: gevent.Greenlet | None = None
        self._cpu = self._wall = 0.0  # the last sample's end

    def _at(self, users: LevelKey) -> LevelBudget | None:
        found = self.by_level.get(users)
        if found is None and len(self.by_level) < MAX_LEVELS:
            found = self.by_level[users] = LevelBudget()
        return found

    def add_chunks(self, users: LevelKey, chunks: int, merged: int = 0) -> None:
        self._pending += chunks
        at = self._at(users)
        if at is not None:
            at.chunks += chunks
            at.merged += merged

    def add_held(self, users: LevelKey, seconds: float) -> None:
        """A request at `users` was sent `seconds` late: its user waited as the server asked."""
        at = self._at(users)
        if at is not None:
            at.holds += 1
            at.held_s += seconds

    def add_time(self, users: LevelKey, cpu_s: float, wall_s: float, loaded: bool = True) -> None:
        """A sample at `users`, which ends the one under way; `loaded`: the process had load then, so its
        CPU is the cost of the chunks handled in it."""
        at = self._at(users)
        if at is not None:
            at.cpu_s += cpu_s
            at.wall_s += wall_s
            if loaded:
                at.loaded_cpu_s += cpu_s
                at.loaded_s += wall_s
                at.loaded_chunks += self._pending
        self._pending = 0

    def add_last(self, users: LevelKey, cpu_s: float) -> None:
        """The stop's partial sample, when it handled chunks: a saturated process leaves requests to the
        processor's drain at stop, whose CPU is theirs. A cost only: no part of the level's time."""
        at = self._at(users)
        if at is not None and self._pending:
            at.drain_cpu_s += cpu_s
            at.loaded_chunks += self._pending
        self._pending = 0

    def start(self) -> None:
        if self._greenlet is None:
            self._cpu, self._wall = time.process_time(), time.perf_counter()
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """After the processor's drain (wiring/run.py), so that its CPU and chunks count."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
            self.add_last(self.level(), time.process_time() - self._cpu)

    def _run(self) -> None:
        while True:
            was_active, was_loaded = self.active(), self.loaded()
            gevent.sleep(self.sample_s)
            cpu, wall = time.process_time(), time.perf_counter()
            if was_active and self.active():
                # A sample across a block's edge counts whole: its idle part costs little, and missing the
                # loaded part would make the chunks cheaper than they were.
                loaded = was_loaded or self.loaded() or self._pending > 0
                self.add_time(self.level(), cpu - self._cpu, wall - self._wall, loaded)
            else:
                self._pending = 0  # spawning or stopping: no CPU sample, so none of its chunks is costed
            self._cpu, self._wall = cpu, wall

    def summary(self) -> dict:
        return {str(users): b.summary() for users, b in in_level_order(self.by_level)}


def combine(parts: Sequence[Mapping[str, dict]]) -> dict:
    """Per level over every process: the busiest process's share and chunk rate (it is the one whose
    stamps a lack of headroom would delay), the highest share while loaded, and the chunks, merged chunks
    and holds of all."""
    out: dict[str, dict] = {}
    for by_level in parts:
        for users, b in by_level.items():
            seen = out.get(str(users))
            total = int(b.get("chunks") or 0) + (seen["chunks_all_processes"] if seen else 0)
            holds = int(b.get("holds") or 0) + (seen["holds"] if seen else 0)
            merged = int(b.get("merged_chunks") or 0) + (seen["merged_chunks_all_processes"] if seen else 0)
            held = float(b.get("held_s") or 0.0) + (seen["held_s"] if seen else 0.0)
            loaded = max(float(b.get("loaded_cpu_share") or 0.0), seen["loaded_cpu_share"] if seen else 0.0)
            if seen is None or float(b.get("cpu_share") or 0.0) > seen["cpu_share"]:
                seen = out[str(users)] = {**b, "cpu_share": float(b.get("cpu_share") or 0.0)}
            seen["chunks_all_processes"], seen["holds"], seen["held_s"] = total, holds, round(held, 3)
            seen["merged_chunks_all_processes"], seen["loaded_cpu_share"] = merged, loaded
    return dict(in_level_order(out))


def merged_share(spent: Mapping[str, object]) -> float | None:
    """The share of a level's token chunks (all processes) that arrived in the read of the one before them;
    None where the summary does not count them (before they were counted)."""
    merged = spent.get("merged_chunks_all_processes", spent.get("merged_chunks"))
    chunks = int(spent.get("chunks_all_processes") or spent.get("chunks") or 0)
    if not isinstance(merged, int) or not chunks:
        return None
    return merged / chunks


def held_share(users: int, spent: Mapping[str, object]) -> float | None:
    """The share of a level's user time (users x its wall time) its users spent held back; None unknown."""
    wall = float(spent.get("wall_s") or 0.0)
    return float(spent.get("held_s") or 0.0) / (users * wall) if users > 0 and wall > 0 else None
