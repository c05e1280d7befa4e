"""How the arms of an A/B (or spec-tune's k arms) share time: the design of a run (pure).

- `sequential`: each arm climbs the whole ladder on its own, one after the other (the old way). Anything
  that drifts between the arms' times (machine load, a neighbour on the GPU, caches) is part of the
  difference, and no interval can see it.
- `interleaved` (spec-ab's default): every arm runs the same ladder on one shared clock, and within each
  level the arms take turns in short blocks, forward then backward (ABBA ABBA..., ABC CBA... with more
  arms). Slow drift then hits every arm alike: a linear trend cancels within each cycle. Each run's
  Locust has the level's users all level long; a user sends only during its arm's blocks (a request in
  flight at a block's end finishes), so each block starts from the same state on every arm.
- `simultaneous`: every arm runs the ladder on the shared clock at the same time, each with the level's
  users: the strongest design when the arms are different servers on different hardware.

Blocks of one level that hold every arm once (AB, BA; ABC, CBA) form a *group*: the independent unit
that analysis resamples, pairing the arms by it. The design of each run is written beside its files
(PREFIX_design.json, docs/contracts.md) so spec-verdict reads it back; a run without one is sequential.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import orjson

SEQUENTIAL, INTERLEAVED, SIMULTANEOUS = "sequential", "interleaved", "simultaneous"
KINDS = (INTERLEAVED, SIMULTANEOUS, SEQUENTIAL)
SCHEMA = 1
DEFAULT_BLOCK_S = 5.0
"""Target block length: short enough for several groups per level, long enough for a request or two."""
READY_MARGIN_S = 1.0
"""The arms' shared clock starts this long after the last of their Locust processes says it is up (its
imports done, ab/sessions.py and wiring/shared_clock.py): it then builds its runner and spawns its users."""
READY_WAIT_S = 30.0
"""The longest the clock waits for a process to say so (Locust imports in 1 to 4 s on a busy two-core
machine): its zero, then, is this long after the spawn, and a process still not up joins late, losing that
time of its first block. A `--blocks` design carries this zero until the processes have heard the real one."""
CLOCK_DIR_ENV = "LOCUST_SPEC_CLOCK_DIR"
"""Where spec-ab and an arm's Locust meet: the process creates READY_FILE there, spec-ab writes CLOCK_FILE."""
READY_FILE = "ready-{slot}"
CLOCK_FILE = "clock"


@dataclass(frozen=True)
class Block:
    """One block of one level, in unix seconds: which arm (slot) it belongs to and its group."""

    level_index: int
    level: float
    """The level's users, or its rate (open loop, requests per second)."""
    index: int
    start_unix_s: float
    end_unix_s: float
    slot: int
    group: int


def blocks_per_level(kind: str, stage_s: float, target_block_s: float, arms: int) -> int:
    """Interleaved: a whole number of forward-and-back cycles (2 x arms blocks), at least two, so every
    level is balanced (see `Design.slot_of`); simultaneous: as many blocks as fit the target length, at
    least two."""
    if kind == INTERLEAVED:
        cycle = 2 * arms
        return cycle * max(2, round(stage_s / (cycle * target_block_s)))
    return max(2, round(stage_s / target_block_s))


def balanced_order(blocks: int, arms: int) -> tuple[int, ...]:
    """The slot of each of a level's blocks: cycles forward then backward (ABBA, ABC CBA), the level's
    last cycle backward then forward for two arms (ABBA ... BAAB).

    A block that follows its own arm's block starts with that arm's request still in flight, more often
    a long one (the inspection paradox: long requests are the ones a boundary cuts), while one after
    another arm's starts afresh. ABBA cycles alone give the second arm one such block more per level (two
    arms, ABBA ABBA ABBA: B follows B three times, A follows A twice), a bias seen in A/A runs (the second
    arm's throughput 3 to 14% lower in six runs out of six); ending on BAAB gives both arms as many, keeps
    each arm's mean position in the level equal (a linear drift still cancels), and ends the level on
    the arm that does not start the next one. With three or more arms each cycle starts one arm further
    (ABC CBA, BCA ACB, CAB BAC): every arm follows itself once per N cycles."""
    cycle = 2 * arms
    out = []
    for index in range(blocks):
        c, p = divmod(index, cycle)
        forward = p if p < arms else cycle - 1 - p
        if arms == 2:
            last = c == blocks // cycle - 1 and blocks >= 2 * cycle
            out.append(arms - 1 - forward if last else forward)
        else:
            out.append((forward + c) % arms)
    return tuple(out)


@dataclass(frozen=True)
class Design:
    """One run's place in its design. `block_s` is None when sequential; `clock_unix_s` is the shared
    zero of the ladder (None: the run's own start, as a sequential run has it)."""

    kind: str
    levels: tuple[int, ...]
    stage_s: float
    warmup_s: float
    block_s: float | None = None
    arms: int = 1
    slot: int = 0
    clock_unix_s: float | None = None
    order: tuple[int, ...] | None = None
    """Interleaved: the slot of each block of a level (`balanced_order`), as the run was measured."""
    rates: tuple[float, ...] = ()
    """Open loop: each level's arrival rate (requests per second); `levels` then holds no ladder of its
    own (the users are the slots, `--max-concurrency`)."""

    @classmethod
    def planned(cls, kind: str, levels: Sequence[int], stage_s: float, warmup_s: float, arms: int,
                target_block_s: float = DEFAULT_BLOCK_S, rates: Sequence[float] = ()) -> Design:
        """A design for `arms` runs; the block length is the stage divided into whole blocks. With `rates`
        (open loop) the ladder's levels are the rates."""
        if kind not in KINDS:
            raise ValueError(f"design must be one of {', '.join(KINDS)}, not {kind!r}")
        rates = tuple(float(r) for r in rates)
        if kind == SEQUENTIAL:
            return cls(kind, tuple(levels), stage_s, warmup_s, rates=rates)
        if target_block_s <= 0:
            raise ValueError("the block time must be above zero")
        n = blocks_per_level(kind, stage_s, target_block_s, arms)
        block_s = stage_s / n
        if warmup_s >= block_s:
            raise ValueError(f"the warm-up ({warmup_s:g}s) must be shorter than a block ({block_s:g}s: "
                             f"{n} blocks per {stage_s:g}s level); lengthen --stage-time or --block-time")
        order = balanced_order(n, arms) if kind == INTERLEAVED else None
        return cls(kind, tuple(levels), stage_s, warmup_s, block_s, arms, order=order, rates=rates)

    def for_slot(self, slot: int, clock_unix_s: float) -> Design:
        return replace(self, slot=slot, clock_unix_s=clock_unix_s)

    @property
    def blocked(self) -> bool:
        return self.kind != SEQUENTIAL and self.block_s is not None

    @property
    def paired(self) -> bool:
        """Arms measured in the same groups, at the same or adjacent times."""
        return self.blocked

    @property
    def steps(self) -> tuple[float, ...]:
        """What the ladder climbs: its rates in an open loop, else its user counts."""
        return self.rates or self.levels

    @property
    def n_blocks(self) -> int:
        return round(self.stage_s / self.block_s) if self.blocked else 1

    @property
    def seconds(self) -> float:
        return len(self.steps) * self.stage_s

    def slot_of(self, index: int) -> int:
        """The arm of block `index` within a level (every block is this run's when simultaneous)."""
        if self.kind == SIMULTANEOUS or self.order is None:
            return self.slot
        return self.order[index]

    def group_of(self, index: int) -> int:
        return index // self.arms if self.kind == INTERLEAVED else index

    def level_start(self, level_index: int) -> float:
        return (self.clock_unix_s or 0.0) + level_index * self.stage_s

    def block(self, level_index: int, index: int) -> Block:
        start = self.level_start(level_index) + index * self.block_s
        return Block(level_index, self.steps[level_index], index, start, start + self.block_s,
                     self.slot_of(index), self.group_of(index))

    def block_at(self, unix_s: float) -> Block | None:
        """The block running at `unix_s` (whichever arm's); None before the clock's zero or after the end."""
        if not self.blocked or self.clock_unix_s is None:
            return None
        elapsed = unix_s - self.clock_unix_s
        if elapsed < 0 or elapsed >= self.seconds:
            return None
        level = min(int(elapsed // self.stage_s), len(self.steps) - 1)
        index = min(int((elapsed - level * self.stage_s) // self.block_s), self.n_blocks - 1)
        return self.block(level, index)

    def own_blocks(self, level_index: int) -> list[Block]:
        """This run's blocks at one level, in time order."""
        return [self.block(level_index, j) for j in range(self.n_blocks) if self.slot_of(j) == self.slot]

    def next_own_start(self, unix_s: float) -> float | None:
        """`unix_s` when this run's block is open then, else when its next block starts; None when the
        design is over (or has no clock)."""
        if not self.blocked or self.clock_unix_s is None:
            return None
        first = max(0, math.floor((unix_s - self.clock_unix_s) / self.block_s))
        for k in range(first, len(self.steps) * self.n_blocks):
            level, j = divmod(k, self.n_blocks)
            if self.slot_of(j) == self.slot:
                return max(unix_s, self.level_start(level) + j * self.block_s)
        return None

    def warmup_until(self, level_index: int) -> float:
        """The end of this run's warm-up at a level: the warm-up runs from the start of its first block
        there (interleaved), or of the level; every arm warms up at each level the same way."""
        first = self.own_blocks(level_index)[0].start_unix_s if self.blocked else self.level_start(
            level_index)
        return first + self.warmup_s

    def to_dict(self) -> dict:
        out = asdict(self)
        out["levels"] = list(self.levels)
        out["order"] = None if self.order is None else list(self.order)
        out["rates"] = list(self.rates)
        return {"schema": SCHEMA, **out}

    @classmethod
    def from_dict(cls, data: object) -> Design:
        """ValueError naming what is wrong (a hand-edited or foreign file)."""
        if not isinstance(data, dict):
            raise ValueError("a design is a JSON object")
        if type(data.get("schema")) is not int or data["schema"] != SCHEMA:
            raise ValueError(f"unknown design schema {data.get('schema')!r} (this reads {SCHEMA})")
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"design kind {kind!r} is not one of {', '.join(KINDS)}")
        levels = data.get("levels")
        if not (isinstance(levels, list) and levels and all(_count(u) and u > 0 for u in levels)):
            raise ValueError("design levels must be a list of user counts")
        rates = data.get("rates") or []
        if not (isinstance(rates, list) and all(_finite(r) and r > 0 for r in rates)):
            raise ValueError("design rates must be a list of positive requests per second")
        numbers = {k: data.get(k) for k in ("stage_s", "warmup_s", "block_s", "clock_unix_s")}
        for key, value in numbers.items():
            if value is not None and not _finite(value):
                raise ValueError(f"design {key} is not a non-negative number: {str(value)[:20]!r}")
        if not numbers["stage_s"] or numbers["warmup_s"] is None:
            raise ValueError("design needs stage_s above zero and warmup_s")
        arms, slot = data.get("arms", 1), data.get("slot", 0)
        if not (_count(arms) and arms >= 1 and _count(slot) and slot < arms):
            raise ValueError("design arms must be a count of at least 1 and slot one of them")
        if kind != SEQUENTIAL:
            block_s, stage_s = numbers["block_s"], numbers["stage_s"]
            if not block_s or numbers["clock_unix_s"] is None:
                raise ValueError(f"a {kind} design needs block_s above zero and clock_unix_s")
            n = stage_s / block_s
            if abs(n - round(n)) > 1e-6 or round(n) > 100_000:
                raise ValueError("design block_s must divide stage_s into whole blocks")
        order = data.get("order")
        if kind == INTERLEAVED:
            n = round(numbers["stage_s"] / numbers["block_s"])
            if not (isinstance(order, list) and len(order) == n and all(_count(x) and x < arms for x in order)
                    and all(sorted(order[g:g + arms]) == list(range(arms)) for g in range(0, n, arms))):
                raise ValueError(f"an interleaved design needs order: each of its {n} blocks' slot, every "
                                 f"{arms} blocks holding each arm once")
        return cls(kind, tuple(levels), float(numbers["stage_s"]), float(numbers["warmup_s"]),
                   None if numbers["block_s"] is None else float(numbers["block_s"]), arms, slot,
                   None if numbers["clock_unix_s"] is None else float(numbers["clock_unix_s"]),
                   tuple(order) if kind == INTERLEAVED else None, tuple(float(r) for r in rates))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
        value >= 0


def block_seed(run_seed: int, level_index: int, group: int) -> int:
    """The prompt order's seed for one group of one level: every arm's block in the group draws the same
    prompts in the same order, so the arms compare like with like (the faster arm only gets further)."""
    digest = hashlib.sha256(f"{run_seed}:{level_index}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def parse_blocks(text: str) -> Design | None:
    """Locust's `--blocks`: a run's design as JSON (spec-ab passes it), or empty for none; ValueError."""
    if not text:
        return None
    try:
        return Design.from_dict(orjson.loads(text))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"--blocks is not JSON: {exc}") from None
