"""`--processes auto` (spec-ab, spec-tune): how many load-generating processes the ladder's top level needs on
this machine, planned from a measured cost per token chunk (recording/budget.py).

The cost is this machine's, measured: the previous run's in the same folder (the budgets in its
PREFIX_summary.json files), else a calibration run: the pacer (a fixed-step server speaking vLLM's stream)
and one headless Locust process of the plugin, each on a core of its own where there are two,
CALIBRATION_USERS streams for CALIBRATION_STAGE, and the figure is what that run's own budget measured. A run
and a calibration count alike; a load that stays under half a core even at the worst cost measures nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from locust_spec.ab import children, keep
from locust_spec.recording import budget
from locust_spec.recording.budget import Cost

CALIBRATION_USERS = 64
CALIBRATION_STAGE, CALIBRATION_WARMUP = "6s", "1s"
CALIBRATION_STEP_MS = 10.0
CALIBRATION_TOKENS = 64
CALIBRATION_DIR = keep.CALIBRATION
PREFIX = "r1"
START_S = 30.0
RUN_S = 120.0

PROCESSES_HELP = ("Locust --processes: load generator processes (-1: one per core; auto: enough to keep "
                  "each under half a core at the top level's expected chunk rate (open loop: at "
                  "--max-concurrency streams), at this machine's measured CPU per chunk: the previous run's "
                  "in --out, else a ~10 s calibration; at most the cores, less one for servers on this "
                  "machine (loopback), shared by the arms of a simultaneous design; said at the start).")

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
    cost = previous_cost(out)
    if cost is None:
        say(f"--processes auto: measuring this machine's client cost per chunk ({CALIBRATION_USERS} streams "
            f"for {CALIBRATION_STAGE}, into {out / CALIBRATION_DIR})")
        try:
            cost = calibrate(out / CALIBRATION_DIR, command, available)
        except (CalibrationError, children.ChildError) as e:
            cost = Cost(budget.WORST_US_PER_CHUNK, f"the worst case: the calibration failed, {e}")
    count, reason = budget.processes_for(max_users, usable, cost, runs_at_once=runs_at_once)
    return count, f"{reason}; {beside}" if local else reason


def previous_cost(out: Path) -> Cost | None:
    """The dearest cost per chunk any run summary left in `out` (a previous sweep or calibration) measured."""
    found = []
    for path in sorted(out.glob("*/*_summary.json")) if out.is_dir() else []:
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        cost = budget.measured_cost(summary, f"measured by the previous run, {path.relative_to(out)}")
        if cost is not None:
            found.append(cost)
    return max(found, key=lambda c: c.us_per_chunk) if found else None


def calibrate(work: Path, command: Command, available: list[int]) -> Cost:
    """Run the calibration (pacer and one Locust process, pinned apart) and return what it measured."""
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob(PREFIX + "_*"):
        old.unlink()
    client_cpu, server_cpu = str(available[-1]), str(available[0])
    port = children.free_port()
    host = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "locust_spec.sim.pacer", "--port", str(port), "--step-ms",
             f"{CALIBRATION_STEP_MS:g}"]
    pacer = children.spawn(children.pinned(serve, server_cpu), work / "pacer.log")
    run = None
    try:
        children.wait_ready(host, pacer, work / "pacer.log", START_S, name="the calibration's pacer")
        run = children.spawn(children.pinned(command(host, work / PREFIX, CALIBRATION_USERS), client_cpu),
                             work / f"{PREFIX}.log", ahead=True)
        run.wait(RUN_S)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"the calibration run took over {RUN_S:g} s (see {work})") from None
    finally:
        if run is not None:
            children.stop(run)
        children.stop(pacer)
    summary_file = work / f"{PREFIX}_summary.json"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        raise CalibrationError(f"the calibration run left no summary (exit {run.returncode}; see "
                               f"{work / (PREFIX + '.log')})") from None
    how = (f"calibrated: {CALIBRATION_USERS} streams x {CALIBRATION_STEP_MS:g} ms steps for "
           f"{CALIBRATION_STAGE} on core {client_cpu}")
    cost = budget.measured_cost(summary, how)
    if cost is None:
        raise CalibrationError(f"the calibration run measured too few chunks (see {summary_file})")
    return cost
