"""Does a verdict's confidence hold? An A/A test on a drifting machine, then a real effect.

Usage:
  python benchmarks/aa.py aa   [--runs 3] [--levels 1,16] [--stage-time 30s] [--design interleaved]
  python benchmarks/aa.py real [--runs 1] [--levels 1,64] [--stage-time 30s] [--design interleaved]

aa: two identical spec-sim servers (both n-gram k=4, same flags) on core 0 and spec-ab comparing them,
while a CPU hog on core 0 switches on and off every 2 to 8 s (seeded), a neighbour the servers share.
Identical arms: at most about one compared quantity in twenty (TPOT p50, TPOT p90, output tok/s per
level) may come out better or worse, and no level may be judged ship.
real: the demo's pair (speculation off against n-gram k=4, spec-ab's own simulators) under the same
hog: ship at 1 user and off at 64 must still be found.

Prints one table row per run, level and quantity, then the totals, with the load average before and
after. Each run's files stay in --out (default: a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from locust_spec.ab import children  # noqa: E402
from locust_spec.ab.cli import DEMO_GPU, SIM_SPECULATIVE_CONFIG  # noqa: E402

SPEC_AB = Path(sys.executable).parent / "spec-ab"
DECIDING = ("tpot_p50_ms", "tpot_p90_ms", "output_tok_s")


class Hog:
    """A busy loop pinned to the servers' core, stopped and continued on a seeded random schedule."""

    def __init__(self, seed: int, low_s: float = 2.0, high_s: float = 8.0) -> None:
        self.proc = subprocess.Popen(children.pinned([sys.executable, "-c", "while True: pass"],
                                                     children.SERVER_CPU))
        self.rng = random.Random(seed)
        self.low_s, self.high_s = low_s, high_s
        self.stop = threading.Event()
        self.switches = 0
        self.thread = threading.Thread(target=self._toggle, daemon=True)
        self.thread.start()

    def _toggle(self) -> None:
        on = True
        while not self.stop.wait(self.rng.uniform(self.low_s, self.high_s)):
            on = not on
            self.proc.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            self.switches += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.proc.send_signal(signal.SIGCONT)
        children.stop(self.proc)


def spec_ab(args: argparse.Namespace, out: Path, urls: tuple[str, str] | None) -> dict:
    cmd = [str(SPEC_AB), "--out", str(out), "--levels", args.levels, "--stage-time", args.stage_time,
           "--warmup", args.warmup, "--design", args.design]
    if args.block_time:
        cmd += ["--block-time", args.block_time]
    if urls is not None:
        cmd += ["--baseline", urls[0], "--candidate", urls[1], "--skip-preflight"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=REPO)
    if not (out / "verdict.json").is_file():
        raise SystemExit(f"spec-ab failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    doc = json.loads((out / "verdict.json").read_text())
    doc["_seconds"] = time.monotonic() - started
    return doc


def rows(run: int, doc: dict) -> list[tuple]:
    out = []
    for level in doc["levels"]:
        for key in DECIDING:
            m = level["metrics"].get(key)
            if m is None:
                continue
            ci = m["ci95_pct"]
            shown = "n/a" if m["change_pct"] is None else f"{m['change_pct']:+.1f}%"
            shown += f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else " (no interval)"
            mde = level["mde_pct"].get(key)
            out.append((run, level["users"], key, shown, m["direction"], "-" if mde is None else f"{mde:.1f}",
                        level["verdict"]))
    return out


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("aa", "real"))
    ap.add_argument("--runs", type=int)
    ap.add_argument("--levels")
    ap.add_argument("--stage-time", default="30s", help="each arm's time per level (spec-ab's)")
    ap.add_argument("--warmup", default="3s")
    ap.add_argument("--design", default="interleaved")
    ap.add_argument("--block-time", default="5s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-hog", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.runs = args.runs or (3 if args.mode == "aa" else 1)
    args.levels = args.levels or ("1,16" if args.mode == "aa" else "1,64")
    out = args.out or Path(tempfile.mkdtemp(prefix="locust-spec-aa-"))
    print(f"{args.mode}: {args.runs} run(s), levels {args.levels}, {args.stage_time} per arm and level, "
          f"{args.design}, blocks {args.block_time}, hog {'off' if args.no_hog else 'on core 0, 2-8 s'}; "
          f"load average {load_average()}", flush=True)
    sims: list[subprocess.Popen] = []
    table: list[tuple] = []
    verdicts = []
    try:
        urls = None
        if args.mode == "aa":
            extra = ("--per-request-spec-decode-metrics", "detailed")
            for name in ("a", "b"):
                out.mkdir(parents=True, exist_ok=True)
                proc, url = children.start_sim(out / f"sim-{name}.log", 1.0, DEMO_GPU, SIM_SPECULATIVE_CONFIG,
                                               extra)
                sims.append(proc)
                urls = (url, url) if urls is None else (urls[0], url)
        for run in range(args.runs):
            hog = None if args.no_hog else Hog(args.seed + run)
            try:
                doc = spec_ab(args, out / f"run{run}", urls)
            finally:
                if hog is not None:
                    hog.close()
            table += rows(run, doc)
            verdicts.append({lv["users"]: lv["verdict"] for lv in doc["levels"]})
            print(f"run {run}: {doc['_seconds']:.0f}s, verdict {doc['verdict']}, levels "
                  f"{verdicts[-1]}, hog switches {hog.switches if hog else 0}", flush=True)
    finally:
        for proc in sims:
            children.stop(proc)
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print(f"\n{'run':>3}  {'users':>5}  {'metric':<12}  {'change [95% CI]':<28}  {'direction':<12}  "
          f"{'MDE %':>6}  level verdict")
    for run, users, key, shown, direction, mde, verdict in table:
        print(f"{run:>3}  {users:>5}  {key:<12}  {shown:<28}  {direction:<12}  {mde:>6}  {verdict}")
    claimed = sum(r[4] in ("better", "worse") for r in table)
    print(f"\nclaimed better/worse: {claimed} of {len(table)} compared quantities "
          f"({claimed / max(len(table), 1):.1%}); levels judged ship: "
          f"{sum(v == 'ship' for run in verdicts for v in run.values())} of "
          f"{sum(len(run) for run in verdicts)}; load average {load_average()}")


if __name__ == "__main__":
    main()
