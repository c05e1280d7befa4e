"""Speculation's crossover on spec-sim: spec-off vs n-gram, per-token latency and throughput by concurrency.

Usage: python benchmarks/sim_crossover.py [--users 1,64,128] [--seconds 20] [--prompts all]
Each arm is a spec-sim process on core 0; the streaming clients are gevent greenlets on core 1.
Latency and throughput are printed in the modelled GPU's time (`--time-scale 2` runs the sim at half
speed, which leaves the sim and the clients more CPU headroom per step on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import orjson  # noqa: E402
from gevent import socket  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from locust_spec.core.prompts import PromptSampler, load_prompt_set  # noqa: E402

NGRAM = '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'


@dataclass
class Arm:
    """Results of one arm at one concurrency: TPOTs of requests inside the window, tokens received in it."""

    tpots_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    requests: int = 0
    errors: int = 0


def _pinned(cmd: list[str], cpu: str) -> list[str]:
    return ["taskset", "-c", cpu, *cmd] if (os.cpu_count() or 1) > 1 else cmd


def start_sim(port: int, spec: str, time_scale: float) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "locust_spec.sim", "--port", str(port), "--time-scale", str(time_scale)]
    if spec:
        cmd += ["--speculative-config", spec]
    proc = subprocess.Popen(_pinned(cmd, "0"), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("spec-sim did not start")


def stream_once(port: int, body: bytes, arm: Arm, window: tuple[float, float]) -> tuple[int, float, float]:
    """One streamed request: (tokens, first-token time, last-chunk time); tokens inside the window count
    towards the arm's throughput as they arrive."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    buf = b""
    tokens = 0
    first = last = 0.0
    try:
        while True:
            data = sock.recv(65536)
            now = time.perf_counter()
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"data: {"):
                    continue
                obj = orjson.loads(line[6:])
                if not obj["choices"]:
                    continue
                n = obj["usage"]["completion_tokens"]
                if n > tokens:
                    if tokens == 0:
                        first = now
                    if window[0] <= now <= window[1]:
                        arm.tokens += n - tokens
                    tokens, last = n, now
    finally:
        sock.close()
    return tokens, first, last


def warm_prefix_cache(port: int, prompts: str) -> None:
    """Every prompt once with max_tokens 1, as a load test's warm-up would: later prefills hit the cache."""
    todo = list(load_prompt_set(prompts))
    dummy = Arm()

    def worker() -> None:
        while todo:
            p = todo.pop()
            body = orjson.dumps({"model": "sim-8b", "messages": list(p.messages), "stream": True,
                                 "max_tokens": 1, "stream_options": {"include_usage": True,
                                                                     "continuous_usage_stats": True}})
            stream_once(port, body, dummy, (0.0, 0.0))

    gevent.joinall([gevent.spawn(worker) for _ in range(32)])


def run_level(port: int, users: int, seconds: float, prompts: str) -> Arm:
    arm = Arm()
    warmup = min(5.0, seconds / 4)
    start = time.perf_counter()
    window = (start + warmup, start + warmup + seconds)

    def user(i: int) -> None:
        sampler = PromptSampler([prompts], seed=i)
        while time.perf_counter() < window[1]:
            p = sampler.next()
            body = orjson.dumps({"model": "sim-8b", "messages": list(p.messages), "stream": True,
                                 "max_tokens": p.max_tokens or 256, "ignore_eos": True, "temperature": 0,
                                 "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
            t0 = time.perf_counter()
            try:
                tokens, first, last = stream_once(port, body, arm, window)
            except OSError:
                arm.errors += 1
                continue
            if t0 >= window[0] and last <= window[1] and tokens > 1:
                arm.tpots_ms.append((last - first) / (tokens - 1) * 1e3)
                arm.requests += 1

    gevent.joinall([gevent.spawn(user, i) for i in range(users)])
    return arm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="1,64,128")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--prompts", default="all")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--spec", default=NGRAM)
    args = ap.parse_args()
    os.sched_setaffinity(0, {1} if (os.cpu_count() or 1) > 1 else {0})
    levels = [int(u) for u in args.users.split(",")]
    print(f"{'users':>5} {'arm':>6} {'TPOT p50 ms':>12} {'tok/s':>9} {'requests':>8}")
    for users in levels:
        results = {}
        for name, spec in (("off", ""), ("ngram", args.spec)):
            port = 18400 + users + (1000 if spec else 0)
            proc = start_sim(port, spec, args.time_scale)
            try:
                warm_prefix_cache(port, args.prompts)
                arm = run_level(port, users, args.seconds, args.prompts)
                stats = orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/stats").read())
            finally:
                proc.terminate()
                proc.wait()
            results[name] = arm
            # Reported in the modelled GPU's time: a sim running at time scale s is 1/s times faster.
            tpot = statistics.median(arm.tpots_ms) / args.time_scale if arm.tpots_ms else float("nan")
            tps = arm.tokens / args.seconds * args.time_scale
            late = stats["schedule"]["late_steps"] / max(1, stats["schedule"]["steps"])
            step = stats["schedule"]["mean_step_ms"]
            print(f"{users:>5} {name:>6} {tpot:>12.2f} {tps:>9.0f} {arm.requests:>8}"
                  f"   (mean step {step:.2f} ms, late steps {late:.1%})", flush=True)
        off, on = results["off"], results["ngram"]
        if off.tpots_ms and on.tpots_ms and off.tokens:
            tpot_ratio = statistics.median(on.tpots_ms) / statistics.median(off.tpots_ms)
            print(f"{users:>5} ratio  TPOT ngram/off {tpot_ratio:.2f}  throughput ngram/off "
                  f"{on.tokens / off.tokens:.2f}", flush=True)


if __name__ == "__main__":
    main()
