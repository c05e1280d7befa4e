"""Open-loop arrivals: does `--rate` deliver the asked arrival process across worker processes, on time?

Usage: python benchmarks/arrivals.py [--rate 40] [--seconds 60] [--processes 2] [--max-tokens 64]
                                     [--capacity-users 4] [--out DIR]
spec-sim on core 0; `locust -f locustfiles/chat.py --rate R --processes N` on core 1 (a master and N workers).
Three runs: Poisson and constant arrivals at R for SECONDS, then Poisson at R with only --capacity-users
users (past the client's capacity). For each it prints, from the request rows, side by side with what was
asked: the arrivals due in the schedule's first SECONDS, the coefficient of variation of their intended
gaps and of the real sends' gaps, lateness p50/p99/max, arrivals started twice (two workers taking the same
one), arrival indices missing before the last one sent, each worker's share, rows vs Locust's requests (E2E
+ Interrupted), and the summary's verdict on the level (flagged, achieved rate). Run it under the bench lock:
`flock /tmp/locust-spec-bench.lock python benchmarks/arrivals.py`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from locust_spec.ab import children  # noqa: E402
from locust_spec.core.arrivals import coefficient_of_variation  # noqa: E402

BIN = Path(sys.executable).parent
START_S = 6.0
"""Locust's start, the spawn and the schedule's lead before the first arrival: each run is longer by it."""


def locust_requests(prefix: Path) -> int:
    with Path(f"{prefix}_stats.csv").open(newline="") as f:
        return sum(int(r["Request Count"]) for r in csv.DictReader(f) if r["Type"] in ("E2E", "Interrupted"))


def run(name: str, host: str, out: Path, args: argparse.Namespace, arrival: str, users: int,
        seconds: float) -> dict:
    prefix = out / name
    port = children.free_port()
    cmd = children.pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"), "--headless",
                   "--host", host, "--rate", f"{args.rate:g}", "--arrival", arrival, "-u", str(users),
                   "-r", str(users), "-t", f"{round(seconds + START_S)}s", "--processes", str(args.processes),
                   # a port of its own: another --processes run on the machine must not get our workers
                   "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                   "--master-port", str(port), "--max-tokens", str(args.max_tokens),
                   "--prompts", "code", "--csv", str(prefix), "--seed", "1"], children.CLIENT_CPU)
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=seconds + 120)
    if proc.returncode not in (0, 1):
        sys.exit(f"arrivals: locust ({name}) exited with {proc.returncode}, see {out / name}.log")
    with Path(f"{prefix}_requests.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    (key, level), = summary["arrivals"].items()
    intended = np.array([float(r["intended_unix_s"]) for r in rows])
    sent = np.array([float(r["start_unix_s"]) for r in rows])
    late = np.array([float(r["lateness_ms"]) for r in rows])
    index = np.array([int(r["arrival"]) for r in rows])
    t0 = intended.min()
    due = intended < t0 + seconds  # the schedule's first SECONDS
    order = np.argsort(intended[due])
    return {
        "name": name, "arrival": arrival, "users": users, "level": key, "rows": len(rows),
        "locust_requests": locust_requests(prefix), "due": int(due.sum()),
        "cv_intended": coefficient_of_variation(intended[due][order]),
        "cv_sent": coefficient_of_variation(sent[due]),
        "late_p50": float(np.percentile(late[due], 50)), "late_p99": float(np.percentile(late[due], 99)),
        "late_max": float(late[due].max()), "twice": int(len(index) - len(set(index.tolist()))),
        "gaps": int(index.max() + 1 - len(set(index.tolist()))),
        "shares": [int((index % args.processes == s).sum()) for s in range(args.processes)],
        "flagged": level["flagged"], "why": level["why"], "achieved": level["achieved_rate"],
        "scheduled_rate": level["scheduled_rate"], "summary_p99": (level["lateness_ms"] or {}).get("p99"),
        "scheduled": level["scheduled"], "started": level["started"], "missed": level["missed"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--users", type=int, default=256, help="users (slots) under capacity")
    p.add_argument("--capacity-users", type=int, default=4, help="users in the past-capacity run")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="arrivals-"))
    out.mkdir(parents=True, exist_ok=True)
    sim, host = children.start_sim(out / "sim.log", 1.0, "h100", None)  # spec-sim's defaults, core 0
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}; files in {out}", flush=True)
        results = [run("poisson", host, out, args, "poisson", args.users, args.seconds),
                   run("constant", host, out, args, "constant", args.users, args.seconds),
                   run("past_capacity", host, out, args, "poisson", args.capacity_users, args.seconds / 3)]
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        children.stop(sim)
    for r in results:
        seconds = args.seconds if r["name"] != "past_capacity" else args.seconds / 3
        asked = args.rate * seconds
        print(f"\n{r['name']}: --rate {args.rate:g} --arrival {r['arrival']}, {args.processes} worker "
              f"processes, -u {r['users']}, level {r['level']}")
        print(f"  arrivals sent, due in the first {seconds:g} s: {r['due']}, asked {asked:,.0f} "
              f"({(r['due'] / asked - 1) * 100:+.1f}%)")
        print(f"  CV of the gaps: intended {r['cv_intended']:.3f}, sent {r['cv_sent']:.3f}")
        print(f"  lateness ms p50/p99/max   {r['late_p50']:.2f} / {r['late_p99']:.2f} / {r['late_max']:.2f}")
        print(f"  started twice {r['twice']}, indices skipped {r['gaps']}, started per worker {r['shares']}")
        print(f"  rows {r['rows']}, Locust requests (E2E + Interrupted) {r['locust_requests']}")
        print(f"  summary (whole level): {r['scheduled']} arrivals due, {r['started']} started, "
              f"{r['missed']} never sent; achieved {r['achieved']} req/s of {r['scheduled_rate']} scheduled; "
              f"lateness p99 {r['summary_p99']} ms; flagged {r['flagged']} {'; '.join(r['why'])}")


if __name__ == "__main__":
    main()
