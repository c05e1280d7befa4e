"""Soak: a long headless Locust run on spec-sim, sampling the Locust process's memory; it should stay flat.

Usage: python benchmarks/soak.py [--minutes 10] [--users 256] [--workers N] [--time-scale 0.2] [--every 5]
                                 [--think-time S] [--sim-idle-timeout S] [--out DIR] [--tracemalloc SECONDS]
spec-sim on core 0, Locust on core 1 (with --workers N: a master and N workers, all on core 1). Prints one
line per sample (elapsed s, each process's RSS MiB, rows written so far), then, per process, the RSS at the
end of warm-up, its maximum after and the slope over the last half in MiB per hour, and checks the run's
counts: rows in PREFIX_requests.csv = Locust's E2E + Interrupted requests, failed rows other than interrupted
= its E2E failures, and prints the failed rows by kind. With --tracemalloc, the Locust process(es) trace
their allocations (memtrace.py, slower) and the sites that grew most since the first snapshot are printed,
per process. With --think-time each user idles that long between requests (benchmarks/soak_user.py); with a
--sim-idle-timeout below it the server closes every kept-alive connection between two requests (as uvicorn
does after 5 s), which must cost no failure.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'


def _pinned(cmd: list[str], cpu: str) -> list[str]:
    return ["taskset", "-c", cpu, *cmd] if (os.cpu_count() or 1) > 1 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"soak: spec-sim exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"soak: {url} did not answer within {timeout_s:g} s")


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return max(0, sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) - 1)


def _locust_counts(prefix: Path) -> tuple[int, int]:
    """(E2E + Interrupted requests, E2E failures) in Locust's stats."""
    with Path(f"{prefix}_stats.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Type"] in ("E2E", "Interrupted")]
    return sum(int(r["Request Count"]) for r in rows), sum(int(r["Failure Count"]) for r in rows)


def _failed_rows(path: Path) -> Counter:
    """Rows of requests that failed (not those cut off by the end of the run), by error kind."""
    with path.open(newline="") as f:
        return Counter(r["error"].split(":", 1)[0] for r in csv.DictReader(f)
                       if r["error"] and not r["error"].startswith("interrupted"))


def slope_mib_per_hour(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) samples, in MiB per hour; None under two samples."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (r - mr) for t, r in samples) / var * 3600.0 if var else None


def _print_growth(path: Path, roles: dict[int, str]) -> None:
    """Each process's last comparison with its first snapshot (processes share the file, a line each)."""
    last: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            last[record["pid"]] = record
    if not last:
        print("soak: no tracemalloc snapshot was compared (run longer than two --tracemalloc intervals)")
    for pid, record in last.items():
        print(f"soak: {roles.get(pid, pid)}: traced {record['traced_mib']} MiB at {record['t_s']} s; "
              "sites grown most since the first snapshot:")
        for site in record["top"]:
            print(f"  {site['growth_kib']:+10.1f} KiB {site['count_growth']:+8d} blocks  {site['site']}")


def _locust_procs(args: argparse.Namespace, url: str, prefix: Path, seconds: int, env: dict,
                  log) -> dict[str, subprocess.Popen]:
    """The Locust processes, by role: one local process, or a master and --workers workers (all on core 1)."""
    locustfile = REPO / ("benchmarks/soak_user.py" if args.think_time else "locustfiles/chat.py")
    load = ["-f", str(locustfile), "--host", url, "--max-tokens", str(args.max_tokens),
            "--metrics-interval", "5"]
    run = ["--headless", "-u", str(args.users), "-r", str(max(1, args.users // 4)), "-t", f"{seconds}s",
           "--csv", str(prefix), "--only-summary"]
    locust = str(BIN / "locust")
    if not args.workers:
        return {"local": subprocess.Popen(_pinned([locust, *load, *run], "1"), cwd=prefix.parent, stdout=log,
                                          stderr=subprocess.STDOUT, env=env)}
    port = _free_port()
    procs = {"master": subprocess.Popen(
        _pinned([locust, *load, *run, "--master", "--expect-workers", str(args.workers),
                 "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)], "1"),
        cwd=prefix.parent, stdout=log, stderr=subprocess.STDOUT, env=env)}
    for i in range(args.workers):
        procs[f"worker{i}"] = subprocess.Popen(
            _pinned([locust, *load, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                    "1"),
            cwd=prefix.parent, stdout=log, stderr=subprocess.STDOUT, env=env)
    return procs


def _rss_mib(proc: psutil.Process) -> float | None:
    try:
        return proc.memory_info().rss / 2**20
    except psutil.NoSuchProcess:
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--users", type=int, default=256)
    p.add_argument("--workers", type=int, default=0,
                   help="a master and this many workers instead of one process; each one's RSS is checked")
    p.add_argument("--time-scale", type=float, default=0.2, help="spec-sim's; smaller = more requests/s")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--every", type=float, default=5.0, help="seconds between memory samples")
    p.add_argument("--think-time", type=float, default=0.0, help="seconds each user idles between requests")
    p.add_argument("--sim-idle-timeout", type=float, default=None,
                   help="spec-sim's --idle-timeout: it closes connections idle this long (default its 65 s)")
    p.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before memory must be flat")
    p.add_argument("--out", type=Path, help="folder for the run's files (default: a temporary one)")
    p.add_argument("--tracemalloc", type=float, metavar="SECONDS",
                   help="trace allocations in the Locust process(es), a snapshot every SECONDS")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "soak"
    port = _free_port()
    sim_cmd = [sys.executable, "-m", "locust_spec.sim", "--port", str(port), "--time-scale",
               str(args.time_scale), "--speculative-config", NGRAM]
    if args.sim_idle_timeout:
        sim_cmd += ["--idle-timeout", str(args.sim_idle_timeout)]
    sim = subprocess.Popen(_pinned(sim_cmd, "0"), cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    seconds = int(args.minutes * 60)
    try:
        _wait(url + "/health", sim)
        log = (out / "locust.log").open("w")
        env = {**os.environ, "SOAK_THINK_S": str(args.think_time)}
        if args.tracemalloc:
            env.update({"LOCUST_SPEC_MEMTRACE": str(out / "memtrace.jsonl"),
                        "LOCUST_SPEC_MEMTRACE_EVERY": str(args.tracemalloc)})
        procs = _locust_procs(args, url, prefix, seconds, env, log)
        head = procs.get("local") or procs["master"]
        watched = {role: psutil.Process(proc.pid) for role, proc in procs.items()}
        started = time.monotonic()
        samples: dict[str, list[tuple[float, float]]] = {role: [] for role in procs}
        shape = f"a master and {args.workers} workers" if args.workers else "one process"
        idle = f", idle timeout {args.sim_idle_timeout:g} s" if args.sim_idle_timeout else ""
        print(f"soak: {args.users} users, think time {args.think_time:g} s, {seconds} s, spec-sim time-scale "
              f"{args.time_scale:g}{idle}, {shape}; files in {out}")
        print(f"{'t_s':>7} " + " ".join(f"{role + '_mib':>11}" for role in procs) + f" {'rows':>9}")
        while head.poll() is None:
            t = time.monotonic() - started
            now = {role: _rss_mib(proc) for role, proc in watched.items()}
            for role, rss in now.items():
                if rss is not None:
                    samples[role].append((t, rss))
            print(f"{t:7.1f} " + " ".join(f"{rss if rss is not None else float('nan'):11.1f}"
                                          for rss in now.values())
                  + f" {_lines(Path(f'{prefix}_requests.csv')):9d}", flush=True)
            time.sleep(args.every)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    finally:
        sim.terminate()
        sim.wait(10)
    for role, series in samples.items():
        after = [rss for t, rss in series if args.warmup * seconds <= t <= seconds]
        if not after:
            sys.exit(f"soak: no memory samples of the {role} after warm-up (run longer)")
        slope = slope_mib_per_hour([(t, rss) for t, rss in series if seconds / 2 <= t <= seconds])
        shown = f"{slope:+.1f} MiB/hour" if slope is not None else "n/a"
        print(f"soak: {role}: RSS at end of warm-up {after[0]:.1f} MiB, max after {max(after):.1f} MiB, "
              f"last {after[-1]:.1f} MiB, growth {max(after) - after[0]:+.1f} MiB "
              f"({(max(after) - after[0]) / after[0]:+.1%}) over {len(after)} samples; "
              f"slope over the last half {shown}")
    if args.tracemalloc:
        _print_growth(out / "memtrace.jsonl", {proc.pid: role for role, proc in procs.items()})
    rows = _lines(Path(f"{prefix}_requests.csv"))
    requests, failures = _locust_counts(prefix)
    kinds = _failed_rows(Path(f"{prefix}_requests.csv"))
    failed_rows = sum(kinds.values())
    print(f"soak: {rows} rows ({failed_rows} failed{': ' if kinds else ''}"
          f"{', '.join(f'{k} {n}' for k, n in kinds.most_common())}); Locust E2E + Interrupted {requests} "
          f"requests ({failures} failed); {rows / seconds:.1f} requests/s; exit code {head.returncode}")
    if (rows, failed_rows) != (requests, failures):
        sys.exit("soak: rows and Locust's counts disagree")


if __name__ == "__main__":
    main()
