"""Priming stops on the first Ctrl-C or SIGTERM: no prompt is started after it, and spec-ab does not wait for
those in flight. Before: priming ran 25 s more after a Ctrl-C, and a second one was ignored
(ThreadPoolExecutor joins its threads, at the pool's end and again at the interpreter's exit)."""

from __future__ import annotations

import io
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from locust_spec.ab import cli as ab
from locust_spec.ab import progress
from locust_spec.client.server_api import each_until
from locust_spec.core.formats import Selection


def test_once_stop_is_set_no_item_starts_and_those_done_come_back_in_order():
    stop = threading.Event()

    def call(item: int) -> int:
        if item == 3:
            stop.set()
        return item * 10

    assert each_until(call, list(range(100)), 1, stop) == [0, 10, 20, 30]
    assert each_until(call, [5, 1, 4], 3) == [50, 10, 40]
    with pytest.raises(ZeroDivisionError):
        each_until(lambda item: 1 / item, [1, 0, 2], 2)


class _Slow(BaseHTTPRequestHandler):
    """A server that takes 1.5 s per chat request (a real server under load, or one stuck)."""

    started: list[float] = []

    def do_GET(self) -> None:  # /v1/models
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        _Slow.started.append(time.monotonic())
        time.sleep(1.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args) -> None:
        pass


def test_a_ctrl_c_during_priming_stops_it_at_once():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    load = ab.Load(("code",), None, False, 0, "m", 1, selection=Selection(limit=40))
    # the kernel's timer interrupts the process while it waits, as a Ctrl-C or SIGTERM from outside does;
    # spec-ab's own handler turns it into the KeyboardInterrupt its SIGTERM raises
    previous = signal.signal(signal.SIGALRM, ab.raise_interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.7)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            ab.prime_arms({"baseline": host, "candidate": host}, load, progress.Display(io.StringIO()))
        stopped_s = time.monotonic() - started
        time.sleep(1.7)  # those in flight end; none after them starts
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        server.shutdown()
        server.server_close()
    assert stopped_s < 1.2, stopped_s  # before: 15 s, every prompt primed
    assert 0 < len(_Slow.started) <= 16  # 8 at a time per arm, of 80
