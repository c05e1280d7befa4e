"""Chunks are stamped when they reached this host, not when a busy client got round to reading them."""

from __future__ import annotations

import subprocess
import sys
import time

import gevent
import pytest

from locust_spec.client.sse import DONE
from locust_spec.client.transport import Arrivals, Connection, Endpoint, request_bytes
from tests.support import PY, free_port

SERVER = r"""
import socket, sys, time
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("ready", flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
conn.recv(65536)
time.sleep(0.2)  # the client is waiting for its first bytes by now
def chunk(b):
    return b"%x\r\n%s\r\n" % (len(b), b)
conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
             + chunk(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'))
time.sleep(0.05)
conn.sendall(chunk(b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'))
time.sleep(0.05)
conn.sendall(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
time.sleep(2)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are read on Linux only")
def test_a_read_delayed_by_a_busy_client_keeps_the_time_its_bytes_arrived():
    port = free_port()
    server = subprocess.Popen([PY, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().startswith("ready")
        conn = Connection(Endpoint(f"http://127.0.0.1:{port}"), 5.0)
        conn.connect()
        arrivals = Arrivals()
        busy_until = []

        def busy() -> None:
            time.sleep(1.0)  # blocks the whole loop while every byte arrives
            busy_until.append(time.perf_counter())

        blocker = gevent.spawn(busy)  # runs as soon as the stream waits for its first bytes
        status, _ = conn.stream(request_bytes(conn.endpoint, "/chat/completions", b"{}", ""), arrivals, 5.0,
                                5.0)
        assert status == 200
        blocker.join()
        times = list(arrivals.times)
        assert times == sorted(times)
        # every byte arrived ~0.3 s after the request, long before the client stopped being busy
        assert times[-1] < busy_until[0] - 0.4
        events = arrivals.events()
        assert len(events) == 3 and events[-1][1] is DONE
    finally:
        server.kill()
        server.wait()
