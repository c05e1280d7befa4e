"""The HTTP/1.1 shell: a gevent stream server with keep-alive, SSE over chunked encoding, and the routes."""

from __future__ import annotations

import contextlib
import hmac
import itertools
import random
import socket
import struct
import time
from dataclasses import dataclass

import gevent
import gevent.event
import orjson
from gevent.server import StreamServer
from gevent.socket import wait_write

from locust_spec.core.resources import installed_version
from locust_spec.sim import model as sim_model
from locust_spec.sim import protocol, sendlog
from locust_spec.sim.engine import Engine, Request, StepOutput
from locust_spec.sim.faults import FaultConfig, RequestFaults, draw
from locust_spec.sim.metrics import SimMetrics
from locust_spec.sim.power import GpuPower, PowerModel
from locust_spec.sim.sendlog import SendLog

REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests",
           500: "Internal Server Error"}
MAX_HEADER = 65536
MAX_BODY = 16 << 20


@dataclass(frozen=True)
class ServerOptions:
    """Server-level settings around the engine."""

    served_model_name: str = "sim-8b"
    max_model_len: int = 8192
    per_request_spec_metrics: bool = False
    grammar_disables_spec: bool = False
    faults: FaultConfig = FaultConfig()
    seed: int = 0
    idle_timeout_s: float = 65.0
    """A connection is closed once it sent no complete request for this long (a keep-alive left idle,
    a request trickled in byte by byte): a client cannot hold a greenlet and a socket forever."""
    admin_token: str | None = None
    """`POST /admin/restart` needs `Authorization: Bearer <token>`; with none, it is refused. A header
    no web page can send without a CORS preflight, which spec-sim never grants."""
    openmetrics: bool = False
    """/metrics as OpenMetrics 1.0 whatever Accept asks for, as vLLM's Rust frontend serves it."""
    gpu_power: PowerModel | None = None
    """The modelled GPU's idle and busy watts, served as a DCGM exporter's series at /metrics/dcgm."""


def _head(status: int, ctype: bytes, length: int | None, extra: bytes = b"") -> bytes:
    body_len = b"content-length: %d\r\n" % length if length is not None else b"transfer-encoding: chunked\r\n"
    return (b"HTTP/1.1 %d %s\r\nserver: spec-sim\r\ncontent-type: %s\r\n%s%s\r\n"
            % (status, REASONS.get(status, "Error").encode(), ctype, body_len, extra))


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed or reset peer does."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class _Stream:
    """Delivery of one streamed request: each step's chunk goes straight to the client's socket.

    Writes never block the engine: the socket is non-blocking while streaming, and whatever a slow
    reader has not taken yet waits in `pending` for a flusher greenlet (vLLM likewise lets a slow
    client's output queue up without slowing the engine).
    """

    def __init__(self, sim: SimServer, sock, fmt: protocol.StreamFormat, rid: str, faults: RequestFaults,
                 done: gevent.event.Event):
        self.sim, self.sock, self.fmt, self.rid, self.faults, self.done = sim, sock, fmt, rid, faults, done
        self.chunks = 0
        self.completed = False
        self.pending: list[bytes] = []
        self.failed = False
        self.finishing = False

    def deliver(self, req: Request, out: StepOutput) -> bool:
        if self.failed:
            return False
        log = self.sim.send_log
        parts = []
        if self.chunks == 0:
            self.sock.settimeout(0.0)
            if log:
                log.write(self.rid, 0)
            parts.append(_head(200, b"text/event-stream; charset=utf-8", None) + _chunk(self.fmt.role()))
        self.chunks += 1
        if self.chunks == self.faults.reset_after_chunks + 1:
            self._send(b"".join(parts))
            _reset(self.sock)
            self._end()
            return False
        if self.chunks == self.faults.malformed_at_chunk:
            cut = b'data: {"id":"' + self.rid.encode() + b'","object":"chat.completion.chu\n\n'
            parts.append(_chunk(cut))
        parts.append(_chunk(self.fmt.token(out.text, req.generated, out.finish, out.stop_reason)))
        if out.finish is not None:
            if self.fmt.include_usage:
                parts.append(_chunk(self.fmt.usage(req.generated, self.sim.spec_metrics(req, streamed=True))))
            if not self.faults.no_done:
                parts.append(_chunk(protocol.DONE))
            parts.append(b"0\r\n\r\n")
            self.finishing = True
        if log:
            log.write(self.rid, out.tokens)
        self._send(b"".join(parts))
        if self.failed:
            return False
        if self.finishing and not self.pending:
            self.completed = True
            self._end()
        return True

    def _send(self, data: bytes) -> None:
        if self.pending:
            self.pending.append(data)
            return
        try:
            n = self.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self.failed = True
            self._end()
            return
        if n < len(data):
            self.pending.append(data[n:])
            gevent.spawn(self._flush)

    def _flush(self) -> None:
        while self.pending and not self.failed:
            try:
                wait_write(self.sock.fileno())
                data = b"".join(self.pending)
                self.pending.clear()
                try:
                    n = self.sock.send(data)
                except BlockingIOError:
                    n = 0
            except OSError:
                self.failed = True
                break
            if n < len(data):
                self.pending.insert(0, data[n:])
        if self.failed or self.finishing:
            self.completed = not self.failed
            self._end()

    def _end(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.settimeout(self.sim.opts.idle_timeout_s)
        self.done.set()


class _Collect:
    """Delivery of one non-streamed request: gathers text until the finish."""

    def __init__(self, done: gevent.event.Event):
        self.done = done
        self.text: list[str] = []
        self.finish: StepOutput | None = None

    def deliver(self, req: Request, out: StepOutput) -> bool:
        self.text.append(out.text)
        if out.finish is not None:
            self.finish = out
            self.done.set()
        return True


class SimServer:
    """Routes and request admission; owns the engine, the metrics registry and the fault generator."""

    def __init__(self, engine: Engine, opts: ServerOptions, send_log: SendLog | None = None):
        self.engine = engine
        self.opts = opts
        self.send_log = send_log
        self.rng = random.Random(opts.seed)
        self.ids = itertools.count(1)
        self.created = int(time.time())
        self.inflight: dict[str, tuple[object, gevent.event.Event]] = {}
        self.restarts = 0
        self.power = (GpuPower(opts.gpu_power, engine.cfg.gpu.name.upper()) if opts.gpu_power is not None
                      else None)

    def restart(self) -> None:
        """A process restart as seen from outside: in-flight connections drop, counters start at zero."""
        self.engine.abort_all()
        for sock, done in list(self.inflight.values()):
            _reset(sock)
            done.set()
        self.inflight.clear()
        spec = self.engine.cfg.spec
        k = spec.num_speculative_tokens if spec else 0
        self.engine.metrics = SimMetrics(self.opts.served_model_name, k)
        self.restarts += 1

    def spec_metrics(self, req: Request, *, streamed: bool) -> dict | None:
        if req.spec is None or not self.opts.per_request_spec_metrics:
            return None
        return req.spec.as_dict(streamed=streamed)

    def handle(self, sock, _addr) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            while True:
                # one deadline for the next whole request: the wait for it, its head and its body
                recv = _recv_by(sock, time.monotonic() + self.opts.idle_timeout_s)
                while b"\r\n\r\n" not in buf:
                    data = recv()
                    if not data or len(buf) > MAX_HEADER:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                try:
                    method, target, version = lines[0].split(b" ", 2)
                except ValueError:
                    return
                headers = {}
                for line in lines[1:]:
                    k, sep, v = line.partition(b":")
                    if sep:
                        headers[k.strip().lower()] = v.strip()
                length = headers.get(b"content-length", b"0")
                problem = _body_problem(length, headers)
                if problem:
                    self._json(sock, 400, protocol.error(400, problem), b"connection: close\r\n")
                    return
                length = int(length)
                while len(buf) < length:
                    data = recv()
                    if not data:
                        return
                    buf += data
                body, buf = buf[:length], buf[length:]
                keep = version == b"HTTP/1.1" and headers.get(b"connection", b"").lower() != b"close"
                if not self.route(sock, method, target.split(b"?", 1)[0], body, headers) or not keep:
                    return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def route(self, sock, method: bytes, path: bytes, body: bytes, headers: dict[bytes, bytes]) -> bool:
        """Answer one request; False when the connection must close (a reset or an abort)."""
        if path == b"/v1/chat/completions" and method == b"POST":
            return self.chat(sock, body)
        if path == b"/health" and method == b"GET":
            sock.sendall(_head(200, b"application/json", 0))
        elif path == b"/metrics" and method == b"GET":
            text = self.engine.metrics.exposition(self.opts.openmetrics)
            kind = (b"application/openmetrics-text; version=1.0.0; charset=utf-8" if self.opts.openmetrics
                    else b"text/plain; version=0.0.4; charset=utf-8")
            sock.sendall(_head(200, kind, len(text)) + text)
        elif path == b"/metrics/dcgm" and method == b"GET" and self.power is not None:
            text = self.power.exposition(self.engine.busy_s)
            sock.sendall(_head(200, b"text/plain; version=0.0.4; charset=utf-8", len(text)) + text)
        elif path == b"/version" and method == b"GET":  # vLLM's; the simulator says what it is
            self._json(sock, 200, orjson.dumps({"version": f"spec-sim {installed_version() or 'unknown'}"}))
        elif path == b"/v1/models" and method == b"GET":
            self._json(sock, 200, protocol.models(self.opts.served_model_name, self.created,
                                                  self.opts.max_model_len))
        elif path == b"/tokenize" and method == b"POST":  # vLLM's: the prompt's tokens, template included
            self.tokenize(sock, body)
        elif path == b"/admin/restart" and method == b"POST":
            if not self._admin(headers):
                self._json(sock, 403, protocol.error(
                    403, "admin: send Authorization: Bearer $SPEC_SIM_ADMIN_TOKEN (as set for spec-sim)"))
                return True
            self.restart()
            self._json(sock, 200, orjson.dumps({"restarts": self.restarts}))
        elif path == b"/admin/stats" and method == b"GET":
            self._json(sock, 200, orjson.dumps({"schedule": self.engine.schedule.as_dict(),
                                                "restarts": self.restarts}))
        else:
            self._json(sock, 404, protocol.error(404, f"Not Found: {path.decode(errors='replace')}"))
        return True

    def _admin(self, headers: dict[bytes, bytes]) -> bool:
        token = self.opts.admin_token
        given = headers.get(b"authorization", b"")
        return bool(token) and hmac.compare_digest(given, b"Bearer " + token.encode())

    def _json(self, sock, status: int, payload: bytes, extra: bytes = b"") -> None:
        sock.sendall(_head(status, b"application/json", len(payload), extra) + payload)

    def tokenize(self, sock, body: bytes) -> None:
        """vLLM's two forms: chat `messages` (rendered with the template, as a chat request's prompt) or a
        completion's `prompt` text; the answer {count, max_model_len, tokens}."""
        try:
            request = orjson.loads(body)
            if isinstance(request.get("prompt"), str):
                text = request["prompt"]
            else:
                text = sim_model.render_prompt(request["messages"])
            tokens = sim_model.tokenizer().encode(text)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            self._json(sock, 400, protocol.error(400, "expected a JSON object with messages or prompt"))
            return
        self._json(sock, 200, orjson.dumps({"count": len(tokens), "max_model_len": self.opts.max_model_len,
                                            "tokens": list(tokens)}))

    def chat(self, sock, body: bytes) -> bool:
        try:
            params = protocol.parse_chat(orjson.loads(body) if body else None, self.opts.served_model_name)
        except orjson.JSONDecodeError:
            self._json(sock, 400, protocol.error(400, "request body is not valid JSON"))
            return True
        except protocol.BadRequest as e:
            self._json(sock, e.status, protocol.error(e.status, str(e)))
            return True
        faults = draw(self.opts.faults, self.rng)
        if faults.status == 500:
            self._json(sock, 500, protocol.error(500, "injected fault: internal server error"))
            return True
        if faults.status == 429:
            self._json(sock, 429, protocol.error(429, "injected fault: too many requests"),
                       b"retry-after: %d\r\n" % self.opts.faults.retry_after_s)
            return True
        rid = f"chatcmpl-{self.opts.seed:04x}{next(self.ids):012x}"
        tok = sim_model.tokenizer()
        prompt = tok.encode(sim_model.render_prompt(params.messages))
        user = sim_model.last_user_text(params.messages)
        room = self.opts.max_model_len - len(prompt)
        if room < 1 or (params.max_tokens or 0) > room:
            self._json(sock, 400, protocol.error(400, f"This model's maximum context length is "
                                                      f"{self.opts.max_model_len} tokens; the prompt has "
                                                      f"{len(prompt)} tokens and max_tokens is "
                                                      f"{params.max_tokens}."))
            return True
        seed_parts = [orjson.dumps(params.messages).decode()]
        if params.temperature > 0:
            seed_parts.append(str(params.seed if params.seed is not None else self.rng.getrandbits(64)))
        seed = sim_model.request_seed(seed_parts)
        style = sim_model.style_for(user, params.response_format)
        source = tok.encode(sim_model.copy_source_of(params.messages))
        target = sim_model.Target(prompt, source, style, seed, params.ignore_eos)
        done = gevent.event.Event()
        created = int(time.time())
        if params.stream:
            fmt = protocol.StreamFormat(rid, created, self.opts.served_model_name, len(prompt),
                                        include_usage=params.include_usage,
                                        continuous_usage=params.continuous_usage)
            sink = _Stream(self, sock, fmt, rid, faults, done)
        else:
            sink = _Collect(done)
        speculate = not (self.opts.grammar_disables_spec and params.response_format)
        fc = self.opts.faults
        stall_at = fc.stall_at_token if faults.stall else -1
        req = Request(rid, prompt, target, params.max_tokens or room, sink.deliver, stop=params.stop,
                      speculate=speculate, seed=seed, stall_at_token=stall_at, stall_s=fc.stall_seconds)
        self.inflight[rid] = (sock, done)
        if self.send_log:
            self.send_log.write(rid, sendlog.ARRIVAL)
        self.engine.submit(req)
        try:
            done.wait()
        finally:
            self.inflight.pop(rid, None)
            req.finished = True
        if params.stream:
            return sink.completed
        if sink.finish is None:
            return False
        payload = protocol.completion(rid, created, self.opts.served_model_name, "".join(sink.text),
                                      sink.finish.finish, sink.finish.stop_reason, len(prompt), req.generated,
                                      self.spec_metrics(req, streamed=False))
        if self.send_log:
            self.send_log.write(rid, req.generated)
        self._json(sock, 200, payload)
        return True


def _recv_by(sock, deadline: float):
    """sock.recv that raises TimeoutError (an OSError) once `deadline` (monotonic) has passed."""

    def recv() -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        return sock.recv(65536)

    return recv


def _body_problem(length: bytes, headers: dict[bytes, bytes]) -> str | None:
    """Why a request's body cannot be read (answered 400, connection closed), or None."""
    if b"transfer-encoding" in headers:
        return "chunked request bodies are not supported; send Content-Length"
    if not length.isdigit():
        return "Content-Length is not a number"
    if int(length) > MAX_BODY:
        return f"request body over {MAX_BODY} bytes"
    return None


def serve(server: SimServer, host: str, port: int) -> StreamServer:
    srv = StreamServer((host, port), server.handle, backlog=1024)
    srv.init_socket()
    return srv
