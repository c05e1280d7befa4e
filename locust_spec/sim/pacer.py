"""Pacer: a fixed-step streaming server that is never the bottleneck, the ground truth for client fidelity.

Usage: python -m locust_spec.sim.pacer --port PORT [--step-ms 10] [--send-log FILE] [--model sim-8b]

spec-sim models a GPU (roofline, drafters, prefix cache), which costs it tens of microseconds of Python per
token: on one core it cannot send the ~25,600 chunks/s of 256 streams at 10 ms steps, so it cannot judge a
client at that load. The pacer does only what the judge needs. One thread, one epoll loop: every --step-ms on
a fixed wall-clock grid each admitted stream gets one token chunk (vLLM 0.32's bytes, from spec-sim's
`protocol.StreamFormat`), a request arriving between steps joins at the next one (continuous batching), and
the send log (spec-sim's format, `sim/sendlog.py`) stamps time.time_ns() just before each write. Output
length is the request's max_tokens (as with ignore_eos). `/metrics` exposes vllm:num_requests_running
(every request the server holds: the concurrency it really sees), vllm:time_to_first_token_seconds and
pacer_late_steps_total (steps that started over one step late: the pacer fell behind, so the run says so).
Chat completions only, streamed only; anything else is a 400. Stops on SIGTERM or SIGINT, flushing the log.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import itertools
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from locust_spec.sim import protocol, sendlog
from locust_spec.sim.sendlog import SendLog

MAX_REQUEST_BYTES = 1 << 20
TOKEN_TEXT = " tok"
SSE_HEAD = (b"HTTP/1.1 200 OK\r\nserver: pacer\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reply(status: int, ctype: bytes, body: bytes) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\nserver: pacer\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status, reason, ctype, len(body), body))


@dataclass
class PacedStream:
    rid: str
    fmt: protocol.StreamFormat
    max_tokens: int
    arrived_ns: int
    generated: int = 0


@dataclass
class Conn:
    sock: socket.socket
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    stream: PacedStream | None = None


class Pacer:
    def __init__(self, port: int, step_s: float, model: str, log: SendLog | None):
        self.step_s = step_s
        self.model = model
        self.log = log
        self.sel = selectors.DefaultSelector()
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.waiting: list[Conn] = []  # arrived since the last step: they join the next one
        self.active: list[Conn] = []
        self.ids = itertools.count()
        self.ttft_sum_s = 0.0
        self.ttft_count = 0
        self.late_steps = 0
        self.running = True

    # --- the loop -------------------------------------------------------------------------------------
    def serve(self) -> None:
        next_step = time.monotonic() + self.step_s
        while self.running:
            for key, events in self.sel.select(max(0.0, next_step - time.monotonic())):
                if key.fileobj is self.listener:
                    self._accept()
                elif events & selectors.EVENT_READ:
                    self._read(key.data)
                else:
                    self._flush(key.data)
            now = time.monotonic()
            if now >= next_step:
                if now - next_step > self.step_s:
                    self.late_steps += 1
                self._step()
                next_step += self.step_s
                if next_step < now:  # fell behind by more than a step: keep the grid, skip the missed ones
                    next_step += (now - next_step) // self.step_s * self.step_s + self.step_s
        if self.log:
            self.log.close()

    def _step(self) -> None:
        self.active.extend(self.waiting)
        self.waiting.clear()
        still = []
        for conn in self.active:
            s = conn.stream
            if s is None:  # the client went away
                continue
            s.generated += 1
            first = s.generated == 1
            last = s.generated >= s.max_tokens
            data = s.fmt.token(TOKEN_TEXT, s.generated, "length" if last else None)
            data = _chunk(s.fmt.role()) + _chunk(data) if first else _chunk(data)
            if last:
                if s.fmt.include_usage:
                    data += _chunk(s.fmt.usage(s.generated))
                data += _chunk(protocol.DONE) + b"0\r\n\r\n"
            if self.log:
                if first:
                    self.log.write(s.rid, 0)
                self.log.write(s.rid, 1)
            if first:
                self.ttft_sum_s += (time.time_ns() - s.arrived_ns) / 1e9
                self.ttft_count += 1
            self._send(conn, data)
            if last:
                conn.stream = None
            elif conn.stream is not None:
                still.append(conn)
        self.active = still

    # --- connections ----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sel.register(sock, selectors.EVENT_READ, Conn(sock))

    def _close(self, conn: Conn) -> None:
        conn.stream = None
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()

    def _send(self, conn: Conn, data: bytes) -> None:
        if conn.outbuf:
            conn.outbuf += data
            return
        try:
            sent = conn.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        if sent < len(data):
            conn.outbuf += data[sent:]
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbuf)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        del conn.outbuf[:sent]
        if not conn.outbuf:
            self.sel.modify(conn.sock, selectors.EVENT_READ, conn)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EAGAIN:
                self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.inbuf += data
        while True:
            end = conn.inbuf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.inbuf) > MAX_REQUEST_BYTES:
                    self._close(conn)
                return
            head = bytes(conn.inbuf[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            if length > MAX_REQUEST_BYTES:
                self._close(conn)
                return
            if len(conn.inbuf) < end + 4 + length:
                return
            body = bytes(conn.inbuf[end + 4:end + 4 + length])
            del conn.inbuf[:end + 4 + length]
            method, path = (head[0].split(" ") + ["", ""])[:2]
            self._route(conn, method, path.split("?", 1)[0], body)

    def _route(self, conn: Conn, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/health":
            self._send(conn, _reply(200, b"text/plain", b""))
        elif method == "GET" and path == "/metrics":
            self._send(conn, _reply(200, b"text/plain; version=0.0.4", self._metrics()))
        elif method == "GET" and path == "/v1/models":
            self._send(conn, _reply(200, b"application/json", protocol.models(self.model, 0, 1 << 20)))
        elif method == "POST" and path == "/v1/chat/completions":
            self._start(conn, body)
        else:
            self._send(conn, _reply(404, b"application/json", protocol.error(404, f"no route {path}")))

    def _start(self, conn: Conn, body: bytes) -> None:
        try:
            req = orjson.loads(body)
            max_tokens = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
            opts = req.get("stream_options") or {}
            if not req.get("stream") or max_tokens < 1 or conn.stream is not None:
                raise ValueError("the pacer streams chat completions only, one at a time per connection")
        except (ValueError, TypeError, AttributeError) as e:
            self._send(conn, _reply(400, b"application/json", protocol.error(400, str(e))))
            return
        rid = f"chatcmpl-pacer-{next(self.ids)}"
        fmt = protocol.StreamFormat(rid, int(time.time()), self.model, 8,
                                    include_usage=bool(opts.get("include_usage")),
                                    continuous_usage=bool(opts.get("continuous_usage_stats")))
        if self.log:
            self.log.write(rid, sendlog.ARRIVAL)
        conn.stream = PacedStream(rid, fmt, max_tokens, time.time_ns())
        self._send(conn, SSE_HEAD)
        self.waiting.append(conn)

    def _metrics(self) -> bytes:
        running = len(self.active) + len(self.waiting)
        return (f"# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running{{model_name=\"{self.model}\"}} {running}\n"
                f"# TYPE vllm:num_requests_waiting gauge\n"
                f"vllm:num_requests_waiting{{model_name=\"{self.model}\"}} 0\n"
                f"# TYPE vllm:time_to_first_token_seconds histogram\n"
                f"vllm:time_to_first_token_seconds_sum{{model_name=\"{self.model}\"}} {self.ttft_sum_s}\n"
                f"vllm:time_to_first_token_seconds_count{{model_name=\"{self.model}\"}} {self.ttft_count}\n"
                f"# TYPE pacer_late_steps counter\npacer_late_steps_total {self.late_steps}\n").encode()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--send-log", type=Path, help=sendlog.FORMAT.splitlines()[0])
    p.add_argument("--model", default="sim-8b")
    args = p.parse_args()
    log = SendLog(args.send_log) if args.send_log else None
    pacer = Pacer(args.port, args.step_ms / 1000.0, args.model, log)

    def stop(*_: object) -> None:
        pacer.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pacer.serve()


if __name__ == "__main__":
    main()
