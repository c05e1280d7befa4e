"""`--processes auto` (spec-ab, spec-tune): how many load-generating processes the ladder's top level needs on
this machine, planned from measured costs per token chunk (recording/budget.py).

A process's cost per chunk falls as it serves more streams (on a CI-class 2-core VM ~55 us at 64 streams,
~50 at 128, ~37 at 256): each cost is kept with the streams it was measured at, and the plan bounds the
share of a core a process would use at the streams the plan gives it (`budget.share_bound`): the cost at
the top level's users would under-plan, since a split top level puts fewer streams on each process.

The costs are this machine's, measured: the previous runs' in the same folder (the budgets in their
PREFIX_summary.json files), else (or where they measured no process with as few streams as the plan gives
one) a calibration run: the pacer (a fixed-step server speaking vLLM's stream) and one headless Locust
process of the plugin, each on a core of its own where there are two, CALIBRATION_USERS streams for
CALIBRATION_STAGE. 64 streams stay under half a core even at the worst cost on a slow machine, so that
measurement is safe to plan from; where it says a process could serve at least twice as many, a second
run measures at that count (`next_calibration`), capped at CALIBRATION_MAX_USERS, so that a fast machine's
plan is not that of 64 streams. A run and a calibration count alike; a load that stays under half a core
even at the worst cost measures nothing.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from locust_spec.ab import children, keep
from locust_spec.recording import budget
from locust_spec.recording.budget import Cost

CALIBRATION_USERS = 64
CALIBRATION_MAX_USERS = 256
"""What the pacer on one core sends on time and one Locust process serves on another on a 2-core VM."""
CALIBRATION_STAGE, CALIBRATION_WARMUP = "6s", "1s"
CALIBRATION_STEP_MS = 10.0
CALIBRATION_TOKENS = 64
CALIBRATION_DIR = keep.CALIBRATION
PREFIX, SECOND_PREFIX = "r1", "r2"
PREFIXES = (PREFIX, SECOND_PREFIX)
"""The calibration runs' files in CALIBRATION_DIR (spec-ab and spec-tune record them as their own)."""
START_S = 30.0
RUN_S = 120.0

PROCESSES_HELP = ("Locust --processes: load generator processes (-1: one per core; auto: enough to keep "
                  "each under half a core at the top level's expected chunk rate (open loop: at "
                  "--max-concurrency streams), at this machine's measured CPU per chunk at the streams each "
                  "would serve: the previous runs' in --out, else a ~10 s calibration (~20 s on a fast "
                  "machine); at most the cores, less one for servers on this machine (loopback), shared by "
                  "the arms of a simultaneous design; said at the start).")

Command = Callable[[str, Path, int], list[str]]
"""(host, run file prefix, users) -> the Locust command line of a one-level run (ab.cli.locust_command)."""


class CalibrationError(Exception):
    """The calibration run could not measure (one line)."""


def cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def plan(max_users: int, simulated: bool, out: Path, command: Command, say: Callable[[str], None],
         runs_at_once: int = 1, local: bool = False) -> tuple[int, str]:
    """(process count of each run, why, in one line with the figures) for a ladder topping at `max_users`
    streams, `runs_at_once` runs loading the machine together (a simultaneous design's arms). `local`: the
    servers run on this machine too; a core is left to them (a load generator beside a server takes the
    CPU it serves with, and its reads wait on the server's steps: docs/fidelity.md)."""
    if simulated:
        return 1, "1 load-generating process: it is pinned to one core beside the simulators"
    available = cores()
    if len(available) == 1:
        return 1, "1 load-generating process: this machine gives it one core"
    usable = len(available) - 1 if local else len(available)
    beside = (f"the servers are on this machine (loopback URLs): {len(available) - usable} of the "
              f"{len(available)} cores this client may use left to them")
    if usable == 1:
        return 1, f"1 load-generating process: {beside}"
    if budget.one_process_enough(max_users):
        return 1, (f"1 load-generating process: {max_users} streams stay under half a core even at "
                   f"{budget.WORST_US_PER_CHUNK:g} us of CPU per chunk")
    costs = previous_costs(out)
    count, reason, bound = budget.processes_for(max_users, usable, costs, runs_at_once=runs_at_once)
    if bound.cost is None and not any(c.streams <= max(bound.streams, CALIBRATION_USERS) for c in costs):
        # Nothing measured a process with as few streams as this plan gives one, nor as the calibration's.
        costs += calibrations(max_users, out / CALIBRATION_DIR, command, available, say)
        count, reason, bound = budget.processes_for(max_users, usable, costs, runs_at_once=runs_at_once)
    return count, f"{reason}; {beside}" if local else reason


def calibrations(max_users: int, work: Path, command: Command, available: list[int],
                 say: Callable[[str], None]) -> list[budget.Cost]:
    """The costs the calibration runs measured: at CALIBRATION_USERS streams, then where that says a process
    could serve many more, at that count; the worst case when a run fails."""
    costs: list[budget.Cost] = []
    users: int | None = CALIBRATION_USERS
    for prefix in PREFIXES:
        if users is None:
            break
        say(f"--processes auto: measuring this machine's client cost per chunk ({users} streams for "
            f"{CALIBRATION_STAGE}, into {work})")
        try:
            costs.append(calibrate(work, command, available, users, prefix))
        except (CalibrationError, children.ChildError) as e:
            return costs or [Cost(budget.WORST_US_PER_CHUNK, f"the worst case: the calibration failed, {e}")]
        users = next_calibration(max_users, costs[-1])
    return costs


def next_calibration(max_users: int, cost: Cost) -> int | None:
    """The streams to measure next after `cost`: the most a process keeps under half a core at that cost,
    when at least twice the streams measured and fewer than the top level's (else None: a measurement there
    would not change the plan enough to pay for its seconds). At no more streams than that, the process
    stays under half a core (its cost per chunk only falls with streams), so the run measures unsaturated."""
    most = math.floor(budget.HALF_CORE / (budget.STREAM_CHUNKS_PER_S * cost.us_per_chunk * 1e-6))
    users = min(most, max_users, CALIBRATION_MAX_USERS)
    return users if users >= 2 * cost.streams and most < max_users else None


def previous_costs(out: Path) -> list[Cost]:
    """Every cost per chunk the run summaries in `out` (a previous sweep or calibration) measured."""
    found = []
    for path in sorted(out.glob("*/*_summary.json")) if out.is_dir() else []:
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found += budget.measured_costs(summary, f"measured by the previous run, {path.relative_to(out)}")
    return found


def calibrate(work: Path, command: Command, available: list[int], users: int = CALIBRATION_USERS,
              prefix: str = PREFIX) -> Cost:
    """Run a calibration (pacer and one Locust process, pinned apart) and return what it measured."""
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob(prefix + "_*"):
        old.unlink()
    client_cpu, server_cpu = str(available[-1]), str(available[0])
    port = children.free_port()
    host = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "locust_spec.sim.pacer", "--port", str(port), "--step-ms",
             f"{CALIBRATION_STEP_MS:g}"]
    pacer_log = work / f"{prefix}_pacer.log"
    pacer = children.spawn(children.pinned(serve, server_cpu), pacer_log)
    run = None
    try:
        children.wait_ready(host, pacer, pacer_log, START_S, name="the calibration's pacer")
        run = children.spawn(children.pinned(command(host, work / prefix, users), client_cpu),
                             work / f"{prefix}.log", ahead=True)
        run.wait(RUN_S)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"the calibration run took over {RUN_S:g} s (see {work})") from None
    finally:
        if run is not None:
            children.stop(run)
        children.stop(pacer)
    summary_file = work / f"{prefix}_summary.json"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        raise CalibrationError(f"the calibration run left no summary (exit {run.returncode}; see "
                               f"{work / (prefix + '.log')})") from None
    how = (f"calibrated: {users} streams x {CALIBRATION_STEP_MS:g} ms steps for "
           f"{CALIBRATION_STAGE} on core {client_cpu}")
    costs = budget.measured_costs(summary, how)
    if not costs:
        raise CalibrationError(f"the calibration run measured too few chunks (see {summary_file})")
    return max(costs, key=lambda c: c.us_per_chunk)
