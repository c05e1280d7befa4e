"""spec-ab's and spec-tune's sessions: the runs that share one clock, started together, watched, and
stopped in order.

Under the interleaved and simultaneous designs (core/design.py) a session is every arm of one repeat:
their Locust processes start together and climb the ladder on one clock, each told its slot, and each
run's design is written beside its files (PREFIX_design.json) for spec-verdict. Sequential, a session is
one arm alone, as spec-ab always ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from locust_spec.ab import children, progress
from locust_spec.ab.children import ARMS
from locust_spec.core.design import (
    CLOCK_DIR_ENV,
    CLOCK_FILE,
    READY_FILE,
    READY_MARGIN_S,
    READY_WAIT_S,
    Design,
)
from locust_spec.core.runfiles import RunFiles
from locust_spec.wiring.shape import LadderSettings

POLL_S = 0.5
LATE_S = 300.0
"""A session still running this long after its ladder's end is stuck: its children are stopped."""


@dataclass(frozen=True)
class Run:
    """One sweep of one arm: its place in the A/B and its Locust `--csv` prefix."""

    arm: str
    repeat: int
    prefix: Path


def schedule(repeats: int, out: Path, arms: Sequence[str] = ARMS) -> list[Run]:
    """Arms alternate ABBA...: in the given order in even repeats, reversed in odd ones (ABC CBA with more).

    Sequential, that spreads slow drift over every arm; interleaved, it alternates which arm takes the
    first block of each level."""
    runs = []
    for repeat in range(repeats):
        order = tuple(arms) if repeat % 2 == 0 else tuple(arms)[::-1]
        runs += [Run(arm, repeat, out / arm / f"r{repeat}") for arm in order]
    return runs


@dataclass(frozen=True)
class Session:
    """Runs on one clock, in slot order; `design` is the plan (slot 0, no clock yet)."""

    position: int
    total: int
    runs: tuple[Run, ...]
    design: Design

    @property
    def arms(self) -> tuple[str, ...]:
        return tuple(r.arm for r in self.runs)

    @property
    def repeat(self) -> int:
        return self.runs[0].repeat


def sessions(runs: Sequence[Run], design: Design) -> list[Session]:
    """Sequential: every run alone, in the schedule's order; blocked designs: the runs of each repeat
    together, in the schedule's order (so the arm taking the first block alternates between repeats)."""
    if not design.blocked:
        groups = [(run,) for run in runs]
    else:
        by_repeat: dict[int, list[Run]] = {}
        for run in runs:
            by_repeat.setdefault(run.repeat, []).append(run)
        groups = [tuple(group) for group in by_repeat.values()]
    return [Session(i, len(groups), group, design) for i, group in enumerate(groups)]


def design_path(run: Run) -> Path:
    return RunFiles(str(run.prefix)).design


def run_files(run: Run) -> list[Path]:
    return sorted(run.prefix.parent.glob(run.prefix.name + "_*")) + [run.prefix.with_suffix(".log")]


class SessionError(Exception):
    """A run of the session ended badly: one line with the reason from its log."""


Command = Callable[[Run, Design], tuple[list[str], dict[str, str]]]
"""A run's Locust command line and environment, given its design (slot and clock included)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a blocked session after its first `levels` levels had ended on the shared
    clock: their files are kept (every arm's blocks of those levels are in them, paired)."""

    def __init__(self, session: Session, levels: int) -> None:
        super().__init__()
        self.session = session
        self.levels = levels

    def line(self) -> str:
        design = self.session.design
        steps = ", ".join(f"{s:g}" for s in design.steps[:self.levels]) + (" req/s" if design.rates else "")
        return (f"the {self.levels} level(s) of {'+'.join(self.session.arms)} r{self.session.repeat} that "
                f"had ended ({steps})")


def interrupted_line(tool: str, out: Path, done: Sequence[Run], exc: KeyboardInterrupt, stopped: str) -> str:
    """What an interrupt kept (`done`: the finished sessions' runs) and how to go on."""
    kept = ", ".join(f"{r.arm} r{r.repeat}" for r in done)
    if not isinstance(exc, Interrupted):
        return (f"{tool}: interrupted; {stopped} stopped, kept {kept or 'nothing'} in {out}"
                + ("; the same command with --resume measures the rest" if done else ""))
    return (f"{tool}: interrupted; {stopped} stopped, kept {kept + ' and ' if kept else ''}{exc.line()} in "
            f"{out} (spec-verdict {out} judges what was measured); the same command with --resume measures "
            "the rest, the interrupted session again whole")


def finished_levels(plan: Design, clock: float | None, now: float) -> int:
    """How many of a blocked session's levels had ended on its clock by `now` (0 before its clock, or
    sequential: each run's Locust keeps its own time there)."""
    if clock is None or not plan.blocked:
        return 0
    return max(0, min(len(plan.steps), math.floor((now - clock) / plan.stage_s)))


def run(session: Session, command: Command, display: progress.Display) -> None:
    """Start every run of the session, show progress until all end; on any failure or interrupt stop
    them all and discard the session's files but its logs (finished sessions are kept; a failure's line
    names the log that says more). An interrupt after a blocked session's first levels ended keeps its
    files and raises Interrupted: the measured levels are not thrown away."""
    plan = session.design
    # under a blocked design the clock's zero is provisional until every process has said it is up
    provisional = time.time() + READY_WAIT_S if plan.blocked else None
    meeting = Path(tempfile.mkdtemp(prefix="locust-spec-clock-")) if plan.blocked else None
    procs: list[subprocess.Popen] = []
    watches = []
    started = time.monotonic()
    clock = None
    try:
        for slot, r in enumerate(session.runs):
            design = plan.for_slot(slot, provisional) if plan.blocked else plan
            r.prefix.parent.mkdir(parents=True, exist_ok=True)
            if not plan.blocked:  # a blocked run's design is written once its clock's zero is known
                write_design(r, design)
            cmd, env = command(r, design)
            if meeting is not None:
                env = {**(os.environ if env is None else env), CLOCK_DIR_ENV: str(meeting)}
            procs.append(children.spawn(cmd, r.prefix.with_suffix(".log"), env, ahead=True))
            watches.append(progress.Watch(r.prefix))
        clock = _start_clock(session, procs, meeting, provisional) if meeting is not None else None
        _watch(session, procs, watches, clock, started, display)
    except BaseException as exc:
        ended = finished_levels(plan, clock, time.time()) if isinstance(exc, KeyboardInterrupt) else 0
        display.finish()
        for proc in procs:
            # SIGINT: Locust ends its run and writes its files (its SIGTERM handler never takes hold in
            # these children: SIGTERM kills them at once, rows still buffered, no summary); SIGTERM where
            # nothing is kept
            children.stop(proc, signal.SIGINT if ended else signal.SIGTERM)
        if ended:
            raise Interrupted(session, ended) from None
        for r in session.runs:
            for path in run_files(r):
                if path != r.prefix.with_suffix(".log"):
                    path.unlink(missing_ok=True)
        raise
    finally:
        if meeting is not None:
            shutil.rmtree(meeting, ignore_errors=True)
    display.finish()
    lives = [w.poll(time.monotonic()) for w in watches]
    took = time.monotonic() - started
    done = "; ".join(f"{r.arm} {live.requests} requests, {live.failures} failed"
                     for r, live in zip(session.runs, lives, strict=True))
    display.say(f"[{session.position + 1}/{session.total}] {'+'.join(session.arms)} r{session.repeat} done "
                f"in {took:.0f}s ({done}) -> {session.runs[0].prefix.parent.parent}/*/r{session.repeat}_*")


def _start_clock(session: Session, procs: list[subprocess.Popen], meeting: Path, provisional: float) -> float:
    """The shared clock's zero: READY_MARGIN_S after the last run's Locust has said it is up (a file in
    `meeting`), or the provisional zero when one has not by then (it joins late). Written for the processes,
    which wait for it (wiring/shared_clock.py), and into each run's design file."""
    ready = [meeting / READY_FILE.format(slot=slot) for slot in range(len(session.runs))]
    while not all(path.exists() for path in ready) and time.time() < provisional - READY_MARGIN_S:
        _check(session, procs)
        time.sleep(0.02)
    zero = min(time.time() + READY_MARGIN_S, provisional)
    for slot, r in enumerate(session.runs):
        write_design(r, session.design.for_slot(slot, zero))
    written = meeting / f"{CLOCK_FILE}.new"
    written.write_text(repr(zero))
    os.replace(written, meeting / CLOCK_FILE)  # whole, for processes reading it meanwhile
    return zero


def write_design(run: Run, design: Design) -> None:
    design_path(run).write_text(json.dumps(design.to_dict()) + "\n")


def _check(session: Session, procs: list[subprocess.Popen]) -> None:
    for r, p in zip(session.runs, procs, strict=True):
        if p.poll() is not None and not _ok(r, p):
            raise SessionError(_failure(r, p))


def _watch(session: Session, procs: list[subprocess.Popen], watches: list[progress.Watch],
           clock: float | None, started: float, display: progress.Display) -> None:
    plan = session.design
    ladder = LadderSettings(plan.levels, plan.stage_s, plan.warmup_s, plan.rates,
                            design=plan.for_slot(0, clock) if clock is not None else None)
    sweep = progress.Sweep(session.position, session.total, session.arms, session.repeat, ladder)
    lead = max(0.0, clock - time.time()) if clock is not None else 0.0
    deadline = time.monotonic() + lead + plan.seconds + LATE_S
    display.start(sweep.seconds)
    while any(p.poll() is None for p in procs):
        _check(session, procs)
        if time.monotonic() > deadline:
            raise SessionError(f"{'+'.join(session.arms)} r{session.repeat} still running "
                               f"{LATE_S:g}s after the ladder's end; stopped")
        elapsed = time.time() - clock if clock is not None else time.monotonic() - started
        now = time.monotonic()
        display.update(max(elapsed, 0.0), progress.line(sweep, elapsed, [w.poll(now) for w in watches]))
        time.sleep(POLL_S)
    for r, p in zip(session.runs, procs, strict=True):
        if not _ok(r, p):
            raise SessionError(_failure(r, p))


def _ok(r: Run, proc: subprocess.Popen) -> bool:
    # Locust exits 1 when any request failed; that is data for the verdict, not a broken run.
    return proc.returncode in (0, 1) and RunFiles(str(r.prefix)).requests.is_file()


def _failure(r: Run, proc: subprocess.Popen) -> str:
    log = r.prefix.with_suffix(".log")
    if proc.returncode < 0:  # a signal from outside (spec-ab stops its children only after a failure)
        how = f"killed by {children.signal_name(-proc.returncode)} mid-run (not by spec-ab: the kernel's " \
              "out-of-memory killer, or someone on this machine)"
    else:
        how = f"failed, exit {proc.returncode}: {children.reason(log)}"
    return f"locust ({r.arm} r{r.repeat}) {how} (log: {log})"
