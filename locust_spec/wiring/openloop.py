"""Open-loop load: requests start on a schedule of arrivals at `--rate` requests per second for the whole
test, whether earlier ones have finished or not, the way a service's users arrive.

Locust's users become the slots a request can be in flight in: each free user takes the next arrival of its
process's share (core/arrivals.py), sleeps until it is due (Locust's `wait_time`, see wiring/user.py) and
runs its task, whose first request starts for that arrival. When every user is busy, the next arrival waits
for one to free: it is sent late, and the row says by how much (`lateness_ms`); it never vanishes. The
master (or the single process) plans each rate level once, with the processes that share it in slot order,
and the plan travels with the level message, so no message is sent per arrival.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import gevent.event
from locust.runners import MasterRunner, WorkerRunner

from locust_spec.core.arrivals import (
    ARRIVALS,
    MAX_BURSTINESS,
    MAX_RATE,
    MIN_BURSTINESS,
    POISSON,
    ArrivalPlan,
    arrivals,
    check_burstiness,
    check_level_arrivals,
    check_rate,
    level_seed,
)
from locust_spec.core.design import INTERLEAVED, Design
from locust_spec.core.level import Arrival, Level
from locust_spec.wiring.options import validated

log = logging.getLogger(__name__)

LOCAL_SLOT = "local"
"""The slot name of a process that is not a worker (a local runner holds the one slot)."""
LEAD_S = 0.5
"""A test's first arrivals come this long after every process said its users are ready (connected, prompts
checked against the server's context), time for the plan to reach every worker."""
WAKE_EARLY_S = 0.0015
"""A user waking for an arrival sleeps until this long before it and the client holds the send until it is
due (client.hold_until): gevent's timers wait in whole milliseconds (epoll), so a user asked to wake at the
arrival wakes up to a millisecond after it, every time."""
READY = "locust_spec_ready"
"""worker -> master, once per test: all this worker's users are ready to send."""
READY_WAIT_S = 60.0
"""The first plan waits at most this long for every process to be ready; then it starts anyway (a process
still preparing sends its first arrivals late, and the summary says so)."""


def parse_rate(text: str) -> float:
    """Requests per second: a positive number, at most core/arrivals.py's MAX_RATE."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"a rate must be a positive number of requests per second: {text!r}") from None
    return check_rate(value)


def users_refusal(users: int, processes: int) -> str | None:
    """Why an open loop cannot run `users` on `processes` load generators, or None. Every process takes a
    share of the arrivals, but Locust gives a process no user when there are fewer users than processes:
    that process never sends its share, and never says it is ready (a run sent 0 requests, exit 0)."""
    if processes <= 1 or users >= processes:
        return None
    return (f"--rate sends through Locust's users, and each of the {processes} processes sends a share of "
            f"the arrivals: {users} user{'s' if users != 1 else ''} leave{'s' if users == 1 else ''} a "
            f"process none; give -u {processes} or more")


def check_run(options) -> None:
    """Refuse a plain `--rate` whose one level (the whole `-t`) would schedule too many arrivals."""
    rate, run_time = getattr(options, "rate", None), getattr(options, "run_time", None)
    if rate and run_time and not getattr(options, "rates", None):
        check_level_arrivals(parse_rate(str(rate)), float(run_time))


def check_processes(options, master: bool) -> None:
    """A headless plain `--rate` on several processes (`--processes N`: the master and each worker it forks
    know N, so all stop at once; a master's `--expect-workers N`): refuse at start when its users cannot
    reach every process (users_refusal)."""
    if not getattr(options, "rate", None) or getattr(options, "rates", None) or not options.headless:
        return
    processes = getattr(options, "processes", None) or (
        getattr(options, "expect_workers", 1) if master else 1)
    why = users_refusal(int(getattr(options, "num_users", None) or 1), int(processes or 1))
    if why is not None:
        raise ValueError(why)


def parse_burstiness(text: str) -> float:
    """Gamma's shape, within core/arrivals.py's bounds."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"burstiness must be a number (1: Poisson): {text!r}") from None
    return check_burstiness(value)


@dataclass(frozen=True)
class OpenLoopSettings:
    """How arrivals are drawn: the process (`--arrival`), gamma's shape (`--burstiness`), the seed (`--seed`,
    which also orders the prompts)."""

    arrival: str = POISSON
    burstiness: float = 1.0
    seed: int = 0

    @classmethod
    def from_options(cls, options) -> OpenLoopSettings:
        return cls(getattr(options, "arrival", POISSON) or POISSON,
                   parse_burstiness(str(getattr(options, "burstiness", 1.0) or 1.0)),
                   int(getattr(options, "seed", 0) or 0))

    def plan(self, rate: float, level_index: int, start_unix_s: float, end_unix_s: float,
             slots: tuple[str, ...], windows: tuple[tuple[float, float, int], ...] = ()) -> ArrivalPlan:
        """One level's plan, seeded from `--seed` and its place in the sweep: the same on every arm."""
        return ArrivalPlan(rate, self.arrival, self.burstiness, level_seed(self.seed, level_index),
                           start_unix_s, end_unix_s, slots, windows)


def open_loop(options) -> bool:
    """Whether the run's options ask for arrivals at a rate (`--rate`, or `--rates` on the ladder) or at a
    trace's times (`--trace`, wiring/replay.py)."""
    return bool(getattr(options, "rate", None) or getattr(options, "rates", None)
                or getattr(options, "trace", None))


def slot_name(runner) -> str:
    """This process's name in a plan's slots: a worker's Locust client id, else LOCAL_SLOT."""
    return runner.client_id if isinstance(runner, WorkerRunner) else LOCAL_SLOT


def slots(runner) -> tuple[str, ...]:
    """The processes that take a share of a level planned now: on a master its connected workers in
    Locust's worker-index order (a worker that connects later takes no share until the next level)."""
    if isinstance(runner, MasterRunner):
        workers = runner.clients.ready + runner.clients.spawning + runner.clients.running
        return tuple(sorted((w.id for w in workers), key=runner.get_worker_index)) or (LOCAL_SLOT,)
    return (LOCAL_SLOT,)


def rate_level(runner, settings: OpenLoopSettings, rate: float, level_index: int, users: int,
               warmup_s: float = 0.0, duration_s: float = math.inf, lead_s: float = 0.0) -> Level:
    """A rate level starting `lead_s` from now on `runner`: its plan for the processes present, its warm-up
    by the clock."""
    start = time.time() + lead_s
    plan = settings.plan(rate, level_index, start, start + duration_s, slots(runner))
    return Level(users, start + warmup_s, plan)


def designed_rate_level(runner, settings: OpenLoopSettings, design: Design, level_index: int,
                        users: int) -> Level:
    """A rate level on spec-ab's shared clock (core/design.py): every arm plans it alike from the clock.
    Simultaneous, the arms' arrivals coincide. Interleaved, an arm's arrivals fall in its own blocks only,
    at the level's rate, each block's drawn from its group, so the arms' blocks of a group get the same
    arrivals (and prompts) from their starts: an arrival in another arm's block is not this arm's, never due
    here, so neither missed nor late. The warm-up is the design's (the start of the arm's first block)."""
    start = design.level_start(level_index)
    windows = tuple((b.start_unix_s, b.end_unix_s, b.group) for b in design.own_blocks(level_index)) \
        if design.kind == INTERLEAVED else ()
    plan = settings.plan(design.steps[level_index], level_index, start, start + design.stage_s, slots(runner),
                         windows)
    return Level(users, design.warmup_until(level_index), plan)


class Readiness:
    """Whether every load-generating process is ready for the test's first arrivals: the local process's
    users all prepared, or on a master every worker that takes a share having said so (READY)."""

    def __init__(self) -> None:
        self.prepared = 0
        self.workers: set[str] = set()
        self._waiting_since: float | None = None

    def reset(self) -> None:
        self.prepared = 0
        self.workers.clear()
        self._waiting_since = None

    def user_prepared(self, runner) -> bool:
        """A user of this process is ready; True when it is the last one Locust asked this process for."""
        self.prepared += 1
        return self.prepared == int(getattr(runner, "target_user_count", 0) or 0)

    def ready(self, runner) -> bool:
        if isinstance(runner, MasterRunner):
            waiting = [w for w in slots(runner) if w not in self.workers]
        else:
            target = int(getattr(runner, "target_user_count", 0) or 0)
            waiting = [LOCAL_SLOT] if target == 0 or self.prepared < target else []
        if not waiting:
            return True
        now = time.monotonic()
        self._waiting_since = self._waiting_since or now
        if now - self._waiting_since < READY_WAIT_S:
            return False
        log.warning("locust-spec: %s not ready after %g s; the arrivals start anyway (theirs go out late)",
                    ", ".join(waiting), READY_WAIT_S)
        return True


class ArrivalQueue:
    """This process's share of the run's arrivals, handed out in order to whichever user is free.

    Plans come with the levels (`level_changed`, a LevelBoard listener); each is taken in turn, a plan's
    arrivals stopping at its end or where the next plan starts. `take` blocks while no arrival is planned.
    Holds one plan's position in its schedule and the plans waiting: nothing grows with the run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pending: deque[tuple[Level, int]] = deque()
        self._level: Level | None = None
        self._share: Iterator[tuple[int, float]] | None = None
        self._ready = gevent.event.Event()
        self.taken = 0

    def level_changed(self, level: Level) -> None:
        if level.plan is None:
            return
        slot = level.plan.slot_of(self.name)
        if slot is None:
            log.warning("locust-spec: this process (%s) joined after the %s level was planned; it takes "
                        "arrivals from the next level on", self.name, level.key)
            return
        self._pending.append((level, slot))
        self._ready.set()

    def take(self) -> Arrival:
        """The next arrival of this process's share (possibly already due: it is then sent late)."""
        while True:
            if self._share is None and self._pending:
                self._level, slot = self._pending.popleft()
                self._share = arrivals(self._level.plan, slot)
            if self._share is not None:
                found = next(self._share, None)
                if found is not None and not (self._pending and
                                              found[1] >= self._pending[0][0].plan.start_unix_s):
                    self.taken += 1
                    return Arrival(self._level, found[0], found[1])
                self._share = None  # this plan is over: its end, or the next plan has started
                continue
            self._ready.clear()
            self._ready.wait()

    def reset(self) -> None:
        """The test stopped: its plans are over (a new test brings its own)."""
        self._pending.clear()
        self._share = None
        self._level = None


def add_options(parser) -> None:
    parser.add_argument("--rate", type=validated(parse_rate), default=None, include_in_web_ui=True,
                        help=f"Open loop: requests per second (at most {MAX_RATE:g}) for the whole test, "
                             "across every process, started on schedule whether earlier ones finished or "
                             "not; Locust's users are the requests that can be in flight at once (-u; on the "
                             "ladder "
                             "--max-concurrency)")
    parser.add_argument("--arrival", choices=ARRIVALS, default=POISSON, include_in_web_ui=True,
                        help="Open loop: how arrivals are spaced: poisson (exponential gaps), constant, or "
                             "gamma (with --burstiness) (default poisson)")
    parser.add_argument("--burstiness", type=validated(parse_burstiness), default="1", include_in_web_ui=True,
                        help="Open loop, --arrival gamma: the gaps' shape; below 1 burstier than Poisson, "
                             f"above 1 smoother, {MIN_BURSTINESS:g} to {MAX_BURSTINESS:g} (default 1)")
