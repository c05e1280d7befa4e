"""A user's turn under an interleaved or simultaneous design (core/design.py): wait for this arm's block,
and start every block on its group's prompt order, so the arms of a group send the same prompts. In an
open loop the arrival schedule already keeps to the arm's blocks (wiring/openloop.py): a user then only
enters its arrival's block, without waiting."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent

from locust_spec.core.design import Design, block_seed

MAX_SLEEP_S = 1.0
"""A waiting user looks at the clock at least this often (a stop is noticed at once anyway)."""
MAX_WAITS = 100_000
"""Bound on one wait's sleeps: far beyond any ladder (a day of one-second sleeps is 86,400)."""


class Turns:
    """The gate every ChatCompletionUser of the run passes before drawing its next prompt."""

    def __init__(self, design: Design, run_seed: int, reseed: Callable[[int], None],
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = gevent.sleep) -> None:
        self.design = design
        self.run_seed = run_seed
        self.reseed = reseed
        self.clock = clock
        self.sleep = sleep
        self._seeded: tuple[int, int] | None = None

    def wait(self) -> bool:
        """True once this run's block is open (the prompt order reseeded when the block is a new group's);
        False when the design is over."""
        for _ in range(MAX_WAITS):
            now = self.clock()
            start = self.design.next_own_start(now)
            if start is None:
                return False
            if start <= now:
                self._seed(self.design.block_at(now), moved=lambda key: key != self._seeded)
                return True
            self.sleep(min(start - now, MAX_SLEEP_S))
        return False

    def enter(self, unix_s: float) -> None:
        """Open loop: a request for the arrival due at `unix_s` goes out now. Its block's group's prompt
        order starts when it is the first of a later group; one sent late, after a later group's first,
        takes the next prompt of that order (going back would draw the later group's prompts twice)."""
        self._seed(self.design.block_at(unix_s), moved=lambda key: self._seeded is None or key > self._seeded)

    def _seed(self, block, moved: Callable[[tuple[int, int]], bool]) -> None:
        if block is None:
            return
        key = (block.level_index, block.group)
        if moved(key):  # no other greenlet runs between the test and the set
            self._seeded = key
            self.reseed(block_seed(self.run_seed, *key))
