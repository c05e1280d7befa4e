"""A hostile (or broken) OpenAI-compatible server on loopback: each path answers in one chosen bad mode.

`HostileServer({"/metrics": slow(...), "/v1/models": redirect(url), ...})` serves each path with its
mode; every request is recorded (method, path, headers), so a test can assert what reached it, e.g. that
no credential followed a redirect. Modes are plain functions of the request handler; good answers
(`metrics_text`, `models`, `chat_stream`) are there to mix with the bad ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

from tests.support import REFERENCE

Mode = Callable[[BaseHTTPRequestHandler], None]
METRICS = (REFERENCE / "vllm-0.32-cpu" / "metrics_ngram_after.txt").read_bytes()


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    peer: int = 0
    """The client's port: requests with the same one came on the same connection."""


class HostileServer:
    """`idle_timeout`: a kept-alive connection that sends no request for this long is closed (uvicorn's
    `timeout_keep_alive`, 5 s by default, does it to vLLM's clients)."""

    def __init__(self, routes: dict[str, Mode], port: int = 0, idle_timeout: float | None = None) -> None:
        self.routes = routes
        self.seen: list[Seen] = []
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "hostile"
            disable_nagle_algorithm = True  # a head and a body in two writes: no 40 ms delayed-ACK wait
            timeout = idle_timeout
            stopping = owner.stopping  # set at stop: slow and endless modes end

            def _any(self) -> None:
                length = self.headers.get("Content-Length", "0")
                if length.isdigit() and int(length):
                    self.rfile.read(int(length))
                path = self.path.split("?", 1)[0]
                owner.seen.append(Seen(self.command, path, dict(self.headers.items()),
                                       self.client_address[1]))
                mode = owner.routes.get(path)
                if mode is None:
                    send(self, 404, b"not here")
                    return
                try:
                    mode(self)
                except OSError:  # the client gave up: what a slow mode is for
                    self.close_connection = True

            do_GET = do_POST = _any  # noqa: N815 (http.server's names)

            def log_message(self, *args) -> None:
                pass

        self.httpd = _Quiet(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def requests_to(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hung up on a hostile answer is what the tests do, not an error


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "text/plain",
         headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(body)


def metrics_text(handler: BaseHTTPRequestHandler) -> None:
    """A real vLLM /metrics answer."""
    send(handler, 200, METRICS, "text/plain; version=0.0.4")


def scripted_metrics(text_for: Callable[[int], str]) -> Mode:
    """/metrics answering its n-th request (from 0) with `text_for(n)`: counters that move as a test says."""
    count = iter(range(10**9))
    return lambda handler: send(handler, 200, text_for(next(count)).encode(), "text/plain; version=0.0.4")


def slow(byte_every_s: float = 1.0, body: bytes = METRICS) -> Mode:
    """A valid answer sent one byte at a time, head included: no single read ever times out."""

    def mode(handler: BaseHTTPRequestHandler) -> None:
        data = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body)
        for i in range(len(data)):
            handler.wfile.write(data[i:i + 1])
            handler.wfile.flush()
            if handler.stopping.wait(byte_every_s):  # type: ignore[attr-defined]
                return
        handler.close_connection = True

    return mode


def huge_metrics(size: int) -> Mode:
    """Valid Prometheus text of about `size` bytes (many series), in one go with its length."""
    line = b'vllm:num_requests_running{engine="0",model_name="m",replica="%08d"} 1.0\n'
    count = size // len(line % 0) + 1
    body = b"# TYPE vllm:num_requests_running gauge\n" + b"".join(line % i for i in range(count))
    return lambda handler: send(handler, 200, body, "text/plain; version=0.0.4")


def endless(handler: BaseHTTPRequestHandler) -> None:
    """A 200 that never ends: chunked, 64 kB per chunk, until the client goes away or the server stops."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    chunk = b"x" * 65536
    while not handler.stopping.is_set():  # type: ignore[attr-defined]
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    handler.close_connection = True


def redirect(location: str, status: int = 302) -> Mode:
    return lambda handler: send(handler, status, b"", headers={"Location": location})


def models(name: str = "hostile-model") -> Mode:
    body = orjson.dumps({"object": "list", "data": [{"id": name, "object": "model"}]})
    return lambda handler: send(handler, 200, body, "application/json")


def sse_events(tokens: int = 4, finish_reason: str = "length") -> bytes:
    """The events of a well-formed streamed chat completion (usage included), [DONE] last."""
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}
               for i in range(tokens - 1)]
    last = {"index": 0, "delta": {"content": "end"}, "finish_reason": finish_reason}
    events.append({"choices": [last]})
    events.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                            "total_tokens": 5 + tokens}})
    return b"".join(b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", **e})
                    + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def chat_stream(finish_reason: str = "length", tokens: int = 4) -> Mode:
    """A well-formed streamed chat completion (usage included) ending with `finish_reason`."""
    body = sse_events(tokens, finish_reason)
    return lambda handler: send(handler, 200, body, "text/event-stream")


def chunked_head(handler: BaseHTTPRequestHandler, ctype: str = "text/event-stream",
                 headers: dict[str, str] | None = None) -> None:
    """A 200 head whose body follows in chunks (`write_chunk`), as vLLM streams."""
    handler.send_response(200)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Transfer-Encoding", "chunked")
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.flush()


def write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """One chunk of a chunked body, sent now; b"" ends the body."""
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n")
    handler.wfile.flush()


def once_per_connection(mode: Mode) -> Mode:
    """`mode` for a connection's first request; the next one on it is read and the connection closed
    without a byte: a server closing a kept-alive connection just as the client reuses it."""

    def each(handler: BaseHTTPRequestHandler) -> None:
        if getattr(handler, "answered", False):
            handler.close_connection = True
            return
        handler.answered = True  # type: ignore[attr-defined]
        mode(handler)

    return each


def comments_only(every_s: float = 0.05) -> Mode:
    """A 200 event stream that sends only SSE comments (`: keep-alive`), never an event."""

    def mode(handler: BaseHTTPRequestHandler) -> None:
        chunked_head(handler)
        while not handler.stopping.wait(every_s):  # type: ignore[attr-defined]
            write_chunk(handler, b": keep-alive\n\n")
        handler.close_connection = True

    return mode


def after_done(then: bytes | None, delay_s: float = 0.0) -> Mode:
    """A good stream up to its [DONE]; after `delay_s`, `then` follows in the body and the body ends
    (None: the body never ends, the connection stays open until the client leaves)."""

    def mode(handler: BaseHTTPRequestHandler) -> None:
        chunked_head(handler)
        write_chunk(handler, sse_events())
        if then is None or handler.stopping.wait(delay_s):  # type: ignore[attr-defined]
            handler.stopping.wait(60)  # type: ignore[attr-defined]
            handler.close_connection = True
            return
        if then:
            write_chunk(handler, then)
        write_chunk(handler, b"")

    return mode

