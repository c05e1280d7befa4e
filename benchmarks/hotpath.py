"""The client's CPU per chunk, this tree against a baseline git ref, side by side in one run.

Usage: .venv/bin/python benchmarks/hotpath.py [--base main] [--streams 256] [--step-ms 5] [--seconds 6]
       [--rounds 2] [--sizes 4,8,16,32]

A shared machine is noisy, so the two trees run alternately (base, this, base, this...) in fresh processes and
the table gives each round's numbers and their ratio, not one absolute figure:
- processor: the processor's timing of a real vLLM capture (framing, parsing, timing), CPU us per chunk;
- read loop: N streams over loopback from a paced server (one chunk per stream per step, as vLLM sends), the
  real Connection.stream and the processing of each finished stream, client CPU us per token chunk, and
  (free of the machine's noise) the Python and C function calls made per chunk;
- no newline: a body of S MB without a newline through the read loop and the processor (the limits lifted
  on this tree so that both read it all): CPU seconds, which grow linearly only where the split is linear.
The server runs on core 0 and the client on core 1 where taskset exists.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SERVER = r"""
import sys, time, gevent, gevent.server, gevent.event
from gevent import socket
step, tokens, big = float(sys.argv[2]) / 1000.0, int(sys.argv[3]), int(sys.argv[4])
CHUNK = (b'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null,'
         b'"token_ids":null}],"usage":{"prompt_tokens":24,"total_tokens":%d,"completion_tokens":%d,'
         b'"completion_tokens_details":null}}\n\n')
END = b"%x\r\n%s\r\n0\r\n\r\n" % (14, b"data: [DONE]\n\n")
def frame(b): return b"%x\r\n%s\r\n" % (len(b), b)
active = []
def stepper():
    while True:
        t = time.perf_counter()
        for s in list(active):
            s[1] += 1
            try:
                last = s[1] >= tokens
                s[0].sendall(frame(CHUNK % (24 + s[1], s[1])) + (END if last else b""))
            except OSError:
                s[1] = tokens
            if s[1] >= tokens:
                active.remove(s); s[2].set()
        gevent.sleep(max(0.0, step - (time.perf_counter() - t)))
def handle(sock, _):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d: return
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(buf) < n: buf += sock.recv(65536)
        buf = buf[n:]
        sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        if big:
            for _ in range(big >> 16): sock.sendall(frame(b"x" * 65536))
            sock.sendall(b"0\r\n\r\n"); continue
        s = [sock, 0, gevent.event.Event()]; active.append(s); s[2].wait()
srv = gevent.server.StreamServer(("127.0.0.1", int(sys.argv[1])), handle, backlog=1024)
srv.start(); gevent.spawn(stepper); print("ready", flush=True); gevent.wait()
"""

CLIENT = r"""
import sys, time, json, gevent
try:  # a tree with subpackages (locust_spec.client) or a flat one from before
    from locust_spec.client import transport
    from locust_spec.client.client import Capture
    from locust_spec.client.timing import request_timing
except ImportError:
    from locust_spec import transport
    from locust_spec.client import Capture
    from locust_spec.timing import request_timing
Arrivals, Connection, Endpoint = transport.Arrivals, transport.Connection, transport.Endpoint
StreamFailure, request_bytes = transport.StreamFailure, transport.request_bytes
with_timeout = transport.with_timeout
def new_request(**kw):
    c = Capture("c", "", 1, False, wire=kw.pop("arrivals", None) or Arrivals(), **kw)
    c.arrivals = c.wire
    return c
def measure(c):
    return request_timing(c.start, c.wire.events(), c.end) if c.start else None
port, streams, seconds, big = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
endpoint = Endpoint(f"http://127.0.0.1:{port}")
request = request_bytes(endpoint, "/chat/completions", b"{}", "")
# lift this tree's limits for the newline-less body, so both trees read it all
capped = "max_line" in Connection.stream.__code__.co_varnames
kw = {"max_line": 1 << 40, "max_body": 1 << 40} if big and capped else {}
chunks = [0]
def one(conn):
    started = new_request()
    try:
        with with_timeout(600):
            conn.stream(request, started.arrivals, 60.0, 60.0, **kw)
    except StreamFailure as e:
        started.error = str(e)
    started.start, started.end = conn.start, time.perf_counter()
    timing = measure(started)
    chunks[0] += timing.chunks if timing is not None else 0
def user(stop):
    conn = Connection(endpoint, 10.0)
    while time.perf_counter() < stop:
        one(conn)
if big:
    conn = Connection(endpoint, 10.0)
    c0 = time.process_time(); one(conn); print(json.dumps({"cpu_s": time.process_time() - c0})); sys.exit()
# processor alone: a real capture's reads replayed into Arrivals, measured as the plugin's processor does
from tests.replay import load_capture
cap = load_capture("stream_spec_off")
arrivals = Arrivals()
for t, data in cap.reads:
    arrivals.body += data
    arrivals.mark(t) if hasattr(arrivals, "mark") else arrivals.marks.append((t, len(arrivals.body)))
started = new_request(start=1e-9, end=10.0, arrivals=arrivals)
per = measure(started).chunks
c0 = time.process_time(); n = 0
while time.process_time() - c0 < 1.0:
    measure(started); n += 1
proc_us = (time.process_time() - c0) / (n * per) * 1e6
gevent.get_hub()
warm = time.perf_counter() + 1.0
stop = warm + seconds
users = [gevent.spawn(user, stop) for _ in range(streams)]
gevent.sleep(max(0.0, warm - time.perf_counter()))
c0, n0, w0 = time.process_time(), chunks[0], time.perf_counter()
gevent.sleep(max(0.0, stop - time.perf_counter()))
c1, n1, w1 = time.process_time(), chunks[0], time.perf_counter()
gevent.joinall(users, timeout=30)
# Noise-free: Python and C function calls per chunk (all greenlets share the thread's profile hook), over a
# few more requests of every stream.
calls = [0]
def count(frame, event, arg):
    if event in ("call", "c_call"):
        calls[0] += 1
n2 = chunks[0]
sys.setprofile(count)
gevent.joinall([gevent.spawn(one, Connection(endpoint, 10.0)) for _ in range(streams)], timeout=120)
sys.setprofile(None)
print(json.dumps({"processor_us": proc_us, "loop_us": (c1 - c0) / max(n1 - n0, 1) * 1e6,
                  "chunks_s": (n1 - n0) / (w1 - w0), "cpu_share": (c1 - c0) / (w1 - w0),
                  "calls": calls[0] / max(chunks[0] - n2, 1)}))
"""


def tree_of(ref: str, into: Path) -> Path:
    """The locust_spec package (and the tests' replay helper) as of `ref`, unpacked under `into`."""
    data = subprocess.run(["git", "archive", ref, "locust_spec", "tests"], cwd=REPO, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def pinned(cmd: list[str], cpu: str) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", cpu, *cmd]
    return cmd


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tree: Path, streams: int, step_ms: float, seconds: float, big: int = 0) -> dict:
    port = free_port()
    cmd = [sys.executable, "-c", SERVER, str(port), str(step_ms), "128", str(big)]
    server = subprocess.Popen(pinned(cmd, "0"), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().startswith("ready")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run(pinned([sys.executable, "-c", CLIENT, str(port), str(streams), str(seconds),
                                     str(big)], "1"), env=env, cwd=tree, capture_output=True, text=True,
                             timeout=seconds + 300)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="main", help="git ref to compare with (default main)")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=5.0, help="server step: one chunk per stream per step")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sizes", default="4,8,16,32", help="MB of body without a newline")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (on a shared machine read the "
          "ratios)")
    with tempfile.TemporaryDirectory(prefix="hotpath-") as tmp:
        trees = {"base": tree_of(args.base, Path(tmp) / "base"), "this": REPO}
        rows = []
        for r in range(1, args.rounds + 1):
            res = {name: run(tree, args.streams, args.step_ms, args.seconds) for name, tree in trees.items()}
            for key, label in (("processor_us", "processor us/chunk"), ("loop_us", "read loop us/chunk"),
                               ("calls", "read loop calls/chunk"), ("chunks_s", "chunks/s")):
                b, t = res["base"][key], res["this"][key]
                rows.append((f"#{r} {label}", f"{b:.2f}", f"{t:.2f}", f"x{t / b:.2f}"))
            rows.append((f"#{r} client CPU share", f"{res['base']['cpu_share']:.2f}",
                         f"{res['this']['cpu_share']:.2f}", ""))
        for mb in (int(s) for s in args.sizes.split(",")):
            res = {name: run(tree, 1, args.step_ms, 0, big=mb << 20) for name, tree in trees.items()}
            b, t = res["base"]["cpu_s"], res["this"]["cpu_s"]
            rows.append((f"{mb} MB no newline, CPU s", f"{b:.2f}", f"{t:.2f}", f"x{t / b:.2f}"))
    print(f"\n{args.streams} streams, one chunk each per {args.step_ms:g} ms, {args.seconds:g} s per run\n")
    print(f"| measure | {args.base} | this tree | this/{args.base} |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
