"""Whole-run capacity, this tree against a baseline, side by side: CPU per chunk and fidelity of a headless
Locust run.

Usage: .venv/bin/python benchmarks/capacity.py [--base capacity-base | --base-tree DIR] [--streams 256]
       [--step-ms 10] [--seconds 20] [--rounds 2]

Each run is the product as a user runs it: `locust -f locustfiles/chat.py --headless -u N -r N` in one process
pinned to core 1 (everything it does counts: reading, the processor, histograms, rows, Locust's own stats and
the plugin's per-second work) against locust_spec/sim/pacer.py on core 0 (one token chunk per stream per step,
vLLM's bytes, every chunk's send time logged). The two trees run alternately (base, this, base, this...) so
that a shared machine's load falls on both; read the ratios. Each round also runs benchmarks/read_floor.py
under the same load: a bare Python loop of this design's reads (epoll, one stamped `recvmsg` per ready socket,
nothing else), the least any Python reader pays per chunk here. Per run:
- CPU us per chunk: the Locust process's CPU time (user + system) over the steady window (the first 3 s
  and the last 1 s left out) / the token chunks the pacer sent in it;
- chunks read merged: the share of token chunks that arrived in the same read as the one before (one stamp
  for both: the process read late), as the run's summary counts it ("-": a tree that does not count it);
- fidelity: ITL and TTFT p50/p99 as the run reported them (PREFIX_latency.json) against the pacer's send log
  (ITL: the gaps between a request's token chunks; TTFT: its arrival at the pacer to its first token), both
  over the whole run, and the pacer's late steps (the server fell behind, not the client).
--base REF runs the `locust_spec` package of git REF (from `git archive`) with this tree's Python and
locustfile; --base-tree DIR runs an installed checkout (its own .venv) instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity import free_port, pct, pinned, read_send_log, server_counters, steady_cpu, wait_http  # noqa: E402
from hotpath import tree_of  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MAX_TOKENS = 128
WARMUP_S, TAIL_S = 3.0, 1.0


@dataclass(frozen=True)
class Tree:
    name: str
    python: str
    root: Path  # its locustfiles/ and locust_spec/sim/pacer.py
    pythonpath: str | None  # where its locust_spec is, when not installed in `python`'s environment


@dataclass(frozen=True)
class Outcome:
    us_per_chunk: float
    cpu_share: float
    chunks_s: float
    itl: tuple[float, float, float, float]  # reported p50, p99; true p50, p99
    ttft: tuple[float, float, float, float]
    late_steps: int
    merged: float | None  # share of token chunks read with the one before (None: a tree that does not count)
    load: float


def truth(send_log: Path) -> tuple[list[float], list[float]]:
    """(ITL ms, TTFT ms) from the pacer's send log: gaps between each request's token chunks, and from its
    arrival to its first token chunk."""
    arrivals: dict[str, int] = {}
    with send_log.open() as fh:
        next(fh)
        for line in fh:
            rid, t, tokens = line.rstrip("\n").split(",")
            if tokens == "-1":
                arrivals[rid] = int(t)
    itl, ttft = [], []
    for rid, sends in read_send_log(send_log).items():
        itl.extend((b - a) / 1e6 for a, b in zip(sends, sends[1:], strict=False))
        if rid in arrivals and sends:
            ttft.append((sends[0] - arrivals[rid]) / 1e6)
    return itl, ttft


@contextlib.contextmanager
def pacer(step_ms: float, work: Path, tag: str) -> Iterator[tuple[str, Path]]:
    """The pacer on core 0: (its URL, its send log); its late steps are read by the caller before it ends."""
    port = free_port()
    url, send_log = f"http://127.0.0.1:{port}", work / f"send-{tag}.csv"
    serve = [sys.executable, "-m", "locust_spec.sim.pacer", "--port", str(port), "--send-log", str(send_log),
             "--step-ms", f"{step_ms:g}"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen(pinned(serve, "0"), cwd=REPO, **quiet)
    try:
        wait_http(url + "/health", server)
        yield url, send_log
    finally:
        server.terminate()
        server.wait(30)


def client(cmd: list[str], seconds: float, cwd: Path, env: dict | None = None
           ) -> tuple[tuple[float, float, float, float], float, str]:
    """Run a client on core 1: (its steady window's CPU and wall clock, the load average, its stdout)."""
    proc = subprocess.Popen(pinned(cmd, "1"), cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    window = steady_cpu(proc, seconds, WARMUP_S, TAIL_S)
    load = os.getloadavg()[0]
    stdout, stderr = proc.communicate(timeout=seconds + 120)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[2]} exited {proc.returncode}: {stderr[-2000:]}")
    return window, load, stdout


def cost(window: tuple[float, float, float, float], send_log: Path) -> tuple[float, float, float]:
    """(CPU us per chunk, share of a core, chunks/s) over the steady window, chunks counted by the pacer."""
    cpu0, w0, cpu1, w1 = window
    sent = read_send_log(send_log)
    chunks = sum(1 for ts in sent.values() for t in ts if w0 * 1e9 <= t <= w1 * 1e9)
    return (cpu1 - cpu0) / max(chunks, 1) * 1e6, (cpu1 - cpu0) / (w1 - w0), chunks / (w1 - w0)


def run(tree: Tree, streams: int, step_ms: float, seconds: float, work: Path) -> Outcome:
    tag = f"{tree.name}-{time.monotonic_ns()}"
    prefix, prompts = work / f"run-{tag}", work / "prompts.jsonl"
    prompts.write_text('{"id": "p", "class": "bench", "prompt": "Write about the sea."}\n')
    env = dict(os.environ)
    if tree.pythonpath:
        env["PYTHONPATH"] = tree.pythonpath
    with pacer(step_ms, work, tag) as (url, send_log):
        cmd = [tree.python, "-m", "locust", "-f", str(tree.root / "locustfiles" / "chat.py"), "--headless",
               "-u", str(streams), "-r", str(streams), "-t", f"{seconds:g}s", "--host", url, "--prompts",
               str(prompts), "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--csv", str(prefix),
               "--only-summary", "--loglevel", "WARNING"]
        window, load, _ = client(cmd, seconds, work, env)
        _, late_steps = server_counters(url)
    us, share, rate = cost(window, send_log)
    latency = json.loads(Path(f"{prefix}_latency.json").read_text())["metrics"]
    spent = next(iter(json.loads(Path(f"{prefix}_summary.json").read_text())["client"]["generators"]
                      ["budget_by_level"].values()), {})
    itl, ttft = truth(send_log)
    return Outcome(
        us_per_chunk=us, cpu_share=share, chunks_s=rate,
        itl=(latency["itl"]["all"]["p50"], latency["itl"]["all"]["p99"], pct(itl, 50), pct(itl, 99)),
        ttft=(latency["ttft"]["all"]["p50"], latency["ttft"]["all"]["p99"], pct(ttft, 50), pct(ttft, 99)),
        late_steps=late_steps, load=load,
        merged=(spent["merged_chunks"] / spent["chunks"]
                if "merged_chunks" in spent and spent.get("chunks") else None))


def run_floor(streams: int, step_ms: float, seconds: float, work: Path) -> tuple[float, float]:
    """benchmarks/read_floor.py under the same load: (its CPU us per chunk, its reads per chunk sent)."""
    with pacer(step_ms, work, f"floor-{time.monotonic_ns()}") as (url, send_log):
        cmd = [sys.executable, str(REPO / "benchmarks" / "read_floor.py"), "--host", url, "--streams",
               str(streams), "--seconds", f"{seconds:g}", "--max-tokens", str(MAX_TOKENS)]
        window, _, stdout = client(cmd, seconds, work)
    us, _, _ = cost(window, send_log)
    sent = sum(len(ts) for ts in read_send_log(send_log).values())
    return us, json.loads(stdout)["reads"] / max(sent, 1)


def _share(merged: float | None) -> str:
    return "-" if merged is None else f"{merged:.1%}"


def _fidelity(pair: tuple[float, float, float, float]) -> str:
    rep50, rep99, true50, true99 = pair
    return f"{rep50:.1f}/{true50:.1f} {rep99:.1f}/{true99:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="capacity-base", help="git ref to compare with (default capacity-base)")
    ap.add_argument("--base-tree", type=Path, help="an installed checkout to compare with (its .venv)")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=10.0, help="pacer step: one chunk per stream per step")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    speed = subprocess.run([sys.executable, "-m", "timeit", "sum(range(10**7))"], capture_output=True,
                           text=True).stdout.strip()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; python: {speed}")
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        work = Path(tmp)
        if args.base_tree:
            base_root = args.base_tree.resolve()
            base = Tree("base", str(base_root / ".venv" / "bin" / "python"), base_root, None)
            label = str(base_root)
        else:
            base_root = tree_of(args.base, work / "base")
            base = Tree("base", sys.executable, REPO, str(base_root))
            label = args.base
        this = Tree("this", sys.executable, REPO, str(REPO))
        rows = []
        for r in range(1, args.rounds + 1):
            res = {}
            for tree in (base, this):
                res[tree.name] = out = run(tree, args.streams, args.step_ms, args.seconds, work)
                print(f"  #{r} {tree.name}: {out.us_per_chunk:.1f} us/chunk, {out.cpu_share:.0%} of a core, "
                      f"{out.chunks_s:,.0f} chunks/s, load {out.load:.2f}", flush=True)
            floor, reads = run_floor(args.streams, args.step_ms, args.seconds, work)
            print(f"  #{r} floor: {floor:.1f} us/chunk, {reads:.2f} reads per chunk", flush=True)
            b, t = res["base"], res["this"]
            rows.append((f"#{r}", f"{b.us_per_chunk:.1f}", f"{t.us_per_chunk:.1f}",
                         f"x{t.us_per_chunk / b.us_per_chunk:.2f}",
                         f"{floor:.1f} (x{floor / b.us_per_chunk:.2f})",
                         f"{b.cpu_share:.0%} / {t.cpu_share:.0%}",
                         f"{b.chunks_s:,.0f} / {t.chunks_s:,.0f}", _fidelity(b.itl), _fidelity(t.itl),
                         _fidelity(b.ttft), _fidelity(t.ttft), f"{_share(b.merged)} / {_share(t.merged)}",
                         f"{b.late_steps} / {t.late_steps}",
                         f"{b.load:.1f} / {t.load:.1f}"))
    print(f"\n{args.streams} streams x {args.step_ms:g} ms steps, {args.seconds:g} s runs, base = {label}; "
          "fidelity = reported/true (ms) p50 p99")
    head = ("round", "base us/chunk", "this us/chunk", "this/base", "bare read loop us/chunk (/base)",
            "CPU base / this", "chunks/s base / this",
            "ITL base", "ITL this", "TTFT base", "TTFT this", "chunks read merged base / this",
            "pacer late steps", "load base / this")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
