"""What `--processes auto` plans from (ab/capacity.py, recording/budget.py): the cost per chunk a run's own
budget measures, by stream count, and under spec-ab's interleaved design against a sequential run.

Usage: .venv/bin/python benchmarks/chunk_cost.py streams [--streams 32,64,128,192,256] [--rounds 2]
       .venv/bin/python benchmarks/chunk_cost.py interleaved [--levels 16,64,128] [--sim] [--rounds 1]

- `streams`: the calibration's own recipe (the pacer on core 0, one headless Locust process of the plugin on
  core 1, ab.cli.locust_command with the calibration's load) at each stream count, the order reversed every
  other round. Per run: the budget's cost per chunk (now: loaded samples' CPU over the chunks handled in
  them, the drain at stop included), the old formula (all sampled CPU over all chunks), the process's CPU
  from its level's start to its exit over its chunks ("outside", shutdown included), and its share of a core.
- `interleaved`: two Locust processes (slots 0 and 1 of one interleaved design, on one clock) on core 1,
  each against its own server on core 0, then one sequential run of the same levels: per level, each run's
  cost per chunk now and by the old formula. `--sim`: spec-sim servers (`--fixed-step-ms 10`, a /metrics
  like vLLM's) instead of pacers (a tiny /metrics: idle blocks cost little there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from locust_spec.ab import capacity, children
from locust_spec.ab.cli import DEMO_PROMPTS, Ladder, Load, Run, locust_command
from locust_spec.core.design import INTERLEAVED, START_MARGIN_S, Design

SERVER_CPU, CLIENT_CPU = "0", "1"
RUN_TIMEOUT_S = 600.0


def serve(work: Path, name: str, sim: bool) -> tuple[str, object]:
    """(URL, process) of a server on the server core."""
    if sim:
        proc, url = children.start_sim(work / f"{name}.log", 1.0, "h100", None, ("--fixed-step-ms", "10"))
        return url, proc
    port = children.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "locust_spec.sim.pacer", "--port", str(port), "--step-ms", "10"]
    proc = children.spawn(children.pinned(cmd, SERVER_CPU), work / f"{name}.log")
    children.wait_ready(url, proc, work / f"{name}.log", capacity.START_S, name=name)
    return url, proc


def budgets(prefix: Path) -> dict[str, dict]:
    """The run's one process's budget per level, with the old formula beside the new."""
    summary = json.loads(prefix.with_name(prefix.name + "_summary.json").read_text())
    (part,) = summary["client"]["generators"]["by_process"].values()
    return {level: {**b, "old_us": round(b["cpu_share"] * b["wall_s"] / b["chunks"] * 1e6, 1)}
            for level, b in part["budget_by_level"].items()}


def by_streams(args: argparse.Namespace, out: Path) -> None:
    counts = [int(n) for n in args.streams.split(",")]
    load = Load(DEMO_PROMPTS, capacity.CALIBRATION_TOKENS, True, 1, "", 1)
    rows = []
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            work = out / f"streams-r{r}-{n}"
            work.mkdir(parents=True, exist_ok=True)
            url, pacer = serve(work, "pacer", False)
            ladder = Ladder(str(n), capacity.CALIBRATION_STAGE, capacity.CALIBRATION_WARMUP)
            cmd = locust_command(Run("calibration", 1, work / "r1"), url, ladder, load)
            load_avg = os.getloadavg()[0]
            run = children.spawn(children.pinned(cmd, CLIENT_CPU), work / "r1.log", ahead=True)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while "Ladder level 1/" not in (work / "r1.log").read_text(errors="replace"):
                    if time.monotonic() > deadline or run.poll() is not None:
                        raise SystemExit(f"the run at {n} streams did not start (see {work})")
                    time.sleep(0.01)
                times = psutil.Process(run.pid).cpu_times()
                cpu_at_level = times.user + times.system
                _, _, usage = os.wait4(run.pid, 0)  # the whole process's CPU, its drain and exit included
                run.returncode = 0
            finally:
                children.stop(pacer)
            b = budgets(work / "r1")[str(n)]
            outside = (usage.ru_utime + usage.ru_stime - cpu_at_level) / b["chunks"] * 1e6
            rows.append((n, b["cpu_us_per_chunk"], b["old_us"], round(outside, 1), b["cpu_share"], load_avg))
            print(f"round {r} {n} streams: {b['cpu_us_per_chunk']} us/chunk (old {b['old_us']}, outside "
                  f"{outside:.1f}), {b['cpu_share']:.0%} of a core, load {load_avg:.2f}", flush=True)
    print("\n| streams | us/chunk now | old formula | outside | share of a core |\n|---|---|---|---|---|")
    for n in counts:
        mine = [row for row in rows if row[0] == n]
        print(f"| {n} | " + " | ".join(" / ".join(f"{row[i]:g}" if i < 4 else f"{row[i]:.0%}" for row in mine)
                                       for i in (1, 2, 3, 4)) + " |")


def interleaved(args: argparse.Namespace, out: Path) -> None:
    levels = [int(n) for n in args.levels.split(",")]
    load = Load(DEMO_PROMPTS, 128, True, 1, "", 1)
    ladder = Ladder(args.levels, f"{args.arm_stage_s:g}s", "1s")
    design = Design.planned(INTERLEAVED, levels, args.arm_stage_s * 2, 1.0, 2, args.block_s)
    for r in range(args.rounds):
        work = out / f"interleaved-r{r}"
        work.mkdir(parents=True, exist_ok=True)
        load_from = os.getloadavg()[0]
        servers = [serve(work, f"server{slot}", args.sim) for slot in range(2)]
        clock = time.time() + START_MARGIN_S
        try:
            arms = [children.spawn(children.pinned(locust_command(
                Run(f"arm{slot}", 1, work / f"arm{slot}"), servers[slot][0], ladder, load,
                design.for_slot(slot, clock)), CLIENT_CPU), work / f"arm{slot}.log", ahead=True)
                for slot in range(2)]
            for arm in arms:
                arm.wait(RUN_TIMEOUT_S)
        finally:
            for _, proc in servers:
                children.stop(proc)
        url, proc = serve(work, "server-sequential", args.sim)
        try:
            cmd = locust_command(Run("sequential", 1, work / "sequential"), url, ladder, load)
            children.spawn(children.pinned(cmd, CLIENT_CPU), work / "sequential.log", ahead=True).wait(
                RUN_TIMEOUT_S)
        finally:
            children.stop(proc)
        got = {name: budgets(work / name) for name in ("arm0", "arm1", "sequential")}
        print(f"\nround {r}: load {load_from:.2f}-{os.getloadavg()[0]:.2f}; {design.n_blocks} blocks of "
              f"{design.block_s:g} s per level; us/chunk arm 0 / arm 1 / sequential\n"
              "| users | now (loaded time) | old formula (all time) | loaded s / wall s (arm 0) |\n"
              "|---|---|---|---|")
        for level in map(str, levels):
            now = " / ".join(f"{got[name][level]['cpu_us_per_chunk']}" for name in got)
            old = " / ".join(f"{got[name][level]['old_us']}" for name in got)
            a0 = got["arm0"][level]
            print(f"| {level} | {now} | {old} | {a0['loaded_s']} / {a0['wall_s']} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="a new folder for the runs' files (default: a temp one)")
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("streams")
    one.add_argument("--streams", default="32,64,128,192,256")
    one.add_argument("--rounds", type=int, default=2)
    two = sub.add_parser("interleaved")
    two.add_argument("--levels", default="16,64,128")
    two.add_argument("--arm-stage-s", type=float, default=10.0)
    two.add_argument("--block-s", type=float, default=2.5)
    two.add_argument("--sim", action="store_true")
    two.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="chunk-cost-"))
    out.mkdir(parents=True, exist_ok=not args.out)
    print(f"runs into {out}", flush=True)
    (by_streams if args.what == "streams" else interleaved)(args, out)


if __name__ == "__main__":
    main()
