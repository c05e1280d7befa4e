"""Soak: a long headless Locust run on spec-sim, sampling the Locust process's memory; it should stay flat.

Usage: python benchmarks/soak.py [--minutes 10] [--users 256] [--time-scale 0.2] [--every 5] [--out DIR]
                                 [--tracemalloc SECONDS]
spec-sim on core 0, Locust on core 1. Prints one line per sample (elapsed s, RSS MiB, rows written so far),
then the RSS at the end of warm-up, its maximum after, the slope over the last half in MiB per hour, and
checks the run's counts: rows in PREFIX_requests.csv = Locust's E2E + Interrupted requests, failed rows other
than interrupted = its E2E failures. With --tracemalloc, the Locust process traces its allocations
(locust_spec/memtrace.py, slower) and the sites that grew most since the first snapshot are printed.
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


def _failed_rows(path: Path) -> int:
    """Rows of requests that failed (not those cut off by the end of the run)."""
    with path.open(newline="") as f:
        return sum(1 for r in csv.DictReader(f) if r["error"] and not r["error"].startswith("interrupted"))


def slope_mib_per_hour(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) samples, in MiB per hour; None under two samples."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (r - mr) for t, r in samples) / var * 3600.0 if var else None


def _print_growth(path: Path) -> None:
    if not path.exists() or not path.read_text().strip():
        print("soak: no tracemalloc snapshot was compared (run longer than two --tracemalloc intervals)")
        return
    last = json.loads(path.read_text().splitlines()[-1])
    print(f"soak: traced {last['traced_mib']} MiB at {last['t_s']} s; sites grown most since the first "
          "snapshot:")
    for site in last["top"]:
        print(f"  {site['growth_kib']:+10.1f} KiB {site['count_growth']:+8d} blocks  {site['site']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--users", type=int, default=256)
    p.add_argument("--time-scale", type=float, default=0.2, help="spec-sim's; smaller = more requests/s")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--every", type=float, default=5.0, help="seconds between memory samples")
    p.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before memory must be flat")
    p.add_argument("--out", type=Path, help="folder for the run's files (default: a temporary one)")
    p.add_argument("--tracemalloc", type=float, metavar="SECONDS",
                   help="trace allocations in the Locust process, a snapshot every SECONDS")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "soak"
    port = _free_port()
    sim_cmd = [sys.executable, "-m", "locust_spec.sim", "--port", str(port), "--time-scale",
               str(args.time_scale), "--speculative-config", NGRAM]
    sim = subprocess.Popen(_pinned(sim_cmd, "0"), cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    seconds = int(args.minutes * 60)
    try:
        _wait(url + "/health", sim)
        log = (out / "locust.log").open("w")
        env = dict(os.environ)
        if args.tracemalloc:
            env.update({"LOCUST_SPEC_MEMTRACE": str(out / "memtrace.jsonl"),
                        "LOCUST_SPEC_MEMTRACE_EVERY": str(args.tracemalloc)})
        locust = subprocess.Popen(
            _pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"), "--headless",
                     "-u", str(args.users), "-r", str(max(1, args.users // 4)), "-t", f"{seconds}s",
                     "--host", url, "--csv", str(prefix), "--max-tokens", str(args.max_tokens),
                     "--metrics-interval", "5", "--only-summary"], "1"),
            cwd=out, stdout=log, stderr=subprocess.STDOUT, env=env)
        proc = psutil.Process(locust.pid)
        started = time.monotonic()
        samples: list[tuple[float, float]] = []
        print(f"soak: {args.users} users, {seconds} s, spec-sim time-scale {args.time_scale:g}; "
              f"files in {out}")
        print(f"{'t_s':>7} {'rss_mib':>8} {'rows':>9}")
        while locust.poll() is None:
            try:
                rss = proc.memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                break
            t = time.monotonic() - started
            samples.append((t, rss))
            print(f"{t:7.1f} {rss:8.1f} {_lines(Path(f'{prefix}_requests.csv')):9d}", flush=True)
            time.sleep(args.every)
        locust.wait()
        log.close()
    finally:
        sim.terminate()
        sim.wait(10)
    after = [rss for t, rss in samples if t >= args.warmup * seconds and t <= seconds]
    if not after:
        sys.exit("soak: no memory samples after warm-up (run longer)")
    rows = _lines(Path(f"{prefix}_requests.csv"))
    requests, failures = _locust_counts(prefix)
    failed_rows = _failed_rows(Path(f"{prefix}_requests.csv"))
    slope = slope_mib_per_hour([(t, rss) for t, rss in samples if seconds / 2 <= t <= seconds])
    shown = f"{slope:+.1f} MiB/hour" if slope is not None else "n/a"
    print(f"soak: RSS at end of warm-up {after[0]:.1f} MiB, max after {max(after):.1f} MiB, "
          f"last {after[-1]:.1f} MiB, growth {max(after) - after[0]:+.1f} MiB "
          f"({(max(after) - after[0]) / after[0]:+.1%}) over {len(after)} samples; "
          f"slope over the last half {shown}")
    if args.tracemalloc:
        _print_growth(out / "memtrace.jsonl")
    print(f"soak: {rows} rows ({failed_rows} failed); Locust E2E + Interrupted {requests} requests "
          f"({failures} failed); "
          f"{rows / seconds:.0f} requests/s; exit code {locust.returncode}")
    if (rows, failed_rows) != (requests, failures):
        sys.exit("soak: rows and Locust's counts disagree")


if __name__ == "__main__":
    main()
