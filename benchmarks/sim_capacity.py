"""spec-sim's capacity: can one core serve N concurrent streams at ~10 ms steps without falling behind?

Usage: python benchmarks/sim_capacity.py [--streams 256] [--seconds 20]
The sim runs on core 0 (default 8B/H100 model: a 256-stream decode step is ~10 ms); the clients are
gevent greenlets on core 1 that read and discard. Prints the sim's own schedule record (lateness of
each step's emission after its due time) and its CPU use.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import orjson  # noqa: E402
import psutil  # noqa: E402
from gevent import socket  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def reader(port: int, body: bytes, stop_at: float, counts: list[int]) -> None:
    while time.perf_counter() < stop_at:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        while time.perf_counter() < stop_at:
            data = sock.recv(65536)
            if not data:
                break
            counts[0] += data.count(b"\n\n")
        sock.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=18799)
    ap.add_argument("--sim-args", default="", help="extra spec-sim arguments")
    args = ap.parse_args()
    two = (os.cpu_count() or 1) > 1
    cmd = [sys.executable, "-m", "locust_spec.sim", "--port", str(args.port), *args.sim_args.split()]
    proc = subprocess.Popen((["taskset", "-c", "0"] if two else []) + cmd, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if two:
        os.sched_setaffinity(0, {1})
    url = f"http://127.0.0.1:{args.port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    body = orjson.dumps({"model": "sim-8b", "stream": True, "max_tokens": 4000, "ignore_eos": True,
                         "messages": [{"role": "user", "content": "Tell me about the sea and its moods."}],
                         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    counts = [0]
    stop_at = time.perf_counter() + args.seconds + 3
    greenlets = [gevent.spawn(reader, args.port, body, stop_at, counts) for _ in range(args.streams)]
    gevent.sleep(3)
    sim = psutil.Process(proc.pid)
    cpu0 = sim.cpu_times()
    before = orjson.loads(urllib.request.urlopen(url + "/admin/stats").read())["schedule"]
    events0 = counts[0]
    gevent.sleep(args.seconds)
    after = orjson.loads(urllib.request.urlopen(url + "/admin/stats").read())["schedule"]
    cpu1 = sim.cpu_times()
    events = counts[0] - events0
    gevent.killall(greenlets)
    proc.terminate()
    proc.wait()
    steps = after["steps"] - before["steps"]
    late = after["late_steps"] - before["late_steps"]
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / args.seconds
    step = after['mean_step_ms']
    print(f"streams {args.streams}: {steps} steps in {args.seconds:.0f} s (mean step {step:.2f} "
          f"ms, max batch {after['max_batch']}, engine CPU {after['mean_cpu_ms']:.2f} ms per step), "
          f"late steps (>20% of a step) {late / max(1, steps):.2%}, "
          f"max lateness {after['max_late_ms']:.2f} ms, mean lateness {after['mean_late_ms']:.3f} ms, "
          f"sim CPU {cpu:.0%} of one core, client received {events / args.seconds:.0f} events/s")


if __name__ == "__main__":
    main()
