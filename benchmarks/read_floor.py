"""The least CPU a Python process pays here per kernel-stamped read of a token chunk: a bare loop, no HTTP
parser, no SSE, no timing, no rows, no Locust.

Usage: python benchmarks/read_floor.py --host http://127.0.0.1:PORT [--streams 256] [--seconds 15]
       [--max-tokens 128]

`benchmarks/capacity.py` runs it beside the base tree and this one (same pacer, same cores, same window), so
its column says how much of a whole run's cost per chunk any Python reader of this design must pay on this
machine: one epoll set, every ready socket read once per wake-up after a 1 ms gather (client/mux.py's
design), each read a `recvmsg` with the kernel's receive stamp (SO_TIMESTAMPNS); a stream's next request goes
out on the same connection when its chunked body has ended. It measures nothing about the server.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import time
from urllib.parse import urlsplit

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
GATHER_S = 0.001
END = b"0\r\n\r\n"  # the chunked body's last chunk


def request(host: str, max_tokens: int) -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Write about the sea."}],
                       "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", required=True)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    url = urlsplit(args.host)
    ask = request(url.netloc, args.max_tokens)
    poller, socks, tails = select.epoll(), {}, {}
    for _ in range(args.streams):
        sock = socket.create_connection((url.hostname, url.port))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        socks[sock.fileno()], tails[sock.fileno()] = sock, b""
        poller.register(sock.fileno(), select.EPOLLIN)
        sock.sendall(ask)
    space = socket.CMSG_SPACE(16)
    stamps, reads, end = 0, 0, time.monotonic() + args.seconds
    while time.monotonic() < end:
        if not poller.poll(0.1):
            continue
        time.sleep(GATHER_S)
        for fd, _ in poller.poll(0):
            sock = socks[fd]
            try:
                data, ancillary, _, _ = sock.recvmsg(65536, space)
            except BlockingIOError:
                continue
            reads += 1
            stamps += bool(ancillary)
            # the body's end may straddle two reads: keep the last few bytes of each
            tail = tails[fd][-4:] + data
            tails[fd] = tail
            if tail.endswith(END):
                tails[fd] = b""
                sock.sendall(ask)
    print(json.dumps({"reads": reads, "stamped": stamps}), flush=True)


if __name__ == "__main__":
    main()
