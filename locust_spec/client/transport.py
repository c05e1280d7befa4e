"""The fast HTTP path: one kept-alive socket per user, the request written in one send, the body read as it
comes, each read stamped with perf_counter before anything else is done with it; splitting the body into
lines and parsing them wait until the stream has ended (Arrivals.timed, run by the plugin's processor)."""

from __future__ import annotations

import contextlib
import importlib
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable, Generator
from urllib.parse import urlsplit

import gevent
import gevent.socket
import gevent.ssl
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPParseError, HTTPSocketResponse

from locust_spec.client.headers import bearer
from locust_spec.client.mux import Reader
from locust_spec.client.sse import (
    DONE,
    Event,
    carries_token,
    parse_payload,
    printable,
    timed_event_slices,
    timed_events,
)
from locust_spec.core.runfiles import ErrorKind

# Real vLLM chunks are 0.3-0.6 kB (one token and its usage; the last one with spec-decode stats); a tool
# call's arguments or a long reasoning delta can make one a few kB. A line 1000x that is no chunk, and
# holding it is what a hostile server wants. A response of 64 MiB is ~150k such chunks: beyond the longest
# outputs asked of a model (max_tokens 128k) while 256 streams of it still fit in a load generator's memory.
# A line must be allowed at least one read (64 KiB), which the exact line check below relies on.
MAX_LINE_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 64 << 20
MIN_LINE_BYTES = 1 << 16
ERROR_BODY_BYTES = 1 << 16  # of a non-200 answer: enough for any error message
# Kernel receive timestamps (Linux SO_TIMESTAMPNS, not named by Python's socket module): the time each
# read's last packet reached this host, whatever this process was doing then. A busy event loop delays
# when a greenlet gets to read, never what it stamps; elsewhere (or on TLS) reads are stamped on return.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_KERNEL_STAMPS = sys.platform == "linux" and _CMSG_SPACE > 0
_Read = Callable[[], tuple[bytes, float]]  # a read: (its bytes, its arrival on perf_counter's scale)


class StreamFailure(Exception):
    """A request that failed; str() is the short `kind: detail` that goes into rows and Locust."""

    def __init__(self, kind: str, detail: str = "", retry_after: str | None = None) -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.retry_after = retry_after
        """An HTTP failure's Retry-After header, as sent."""


class RequestTimeout(Exception):
    """Raised by gevent.Timeout when a whole request outlives --request-timeout."""


class Endpoint:
    """Where to send: scheme, host, port and the API base path (`/v1`) taken from Locust's --host."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--host must be an http(s) URL, got {url!r}")
        self.ssl = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.ssl else 80)
        base = parts.path.rstrip("/")
        self.api_base = base if base.endswith("/v1") else base + "/v1"
        default_port = (self.ssl and self.port == 443) or (not self.ssl and self.port == 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"


def request_bytes(endpoint: Endpoint, path: str, body: bytes, api_key: str) -> bytes:
    """The whole request. `Accept-Encoding: identity`: a compressed stream could not be stamped chunk by
    chunk, and could inflate past every limit."""
    auth = f"Authorization: {bearer(api_key, 'the API key')}\r\n" if api_key else ""
    head = (f"POST {endpoint.api_base}{path} HTTP/1.1\r\nHost: {endpoint.host_header}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nAccept-Encoding: identity\r\n"
            f"{auth}Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def answer_refusal(content_type: object, content_encoding: object) -> tuple[str, str] | None:
    """(kind, detail) naming why a 200 answer's head says it is no readable event stream, else None: a
    compressed body (`compressed`), or another format (`not_event_stream`: a JSON completion, a login
    page). A head without a Content-Type is read as a stream (its body decides)."""
    encoding = _header_text(content_encoding).lower()
    if encoding not in ("", "identity"):
        return ErrorKind.COMPRESSED.value, f"content-encoding {_header_text(content_encoding, 40)}"
    media = _header_text(content_type).split(";", 1)[0].strip().lower()
    if media and media != "text/event-stream":
        return ErrorKind.NOT_EVENT_STREAM.value, f"content-type {_header_text(content_type, 60)}"
    return None


def _header_text(value: object, limit: int = 200) -> str:
    """A header's value as one short printable line (a repeated header: its values joined)."""
    text = ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value or "")
    return printable(text.strip(), limit)


class Arrivals:
    """A stream's body as it arrived: the bytes (de-chunked) and, per read, its perf_counter time and the
    body's length after it, kept in two flat arrays (no object per read)."""

    __slots__ = ("body", "times", "ends")

    def __init__(self) -> None:
        self.body = bytearray()
        self.times = array("d")
        self.ends = array("q")

    def mark(self, t: float) -> None:
        self.times.append(t)
        self.ends.append(len(self.body))

    def events(self) -> list[tuple[float, Event]]:
        return timed_events(self.body, self.times, self.ends)

    def event_slices(self, size: int) -> Generator[None, None, list[tuple[float, Event]]]:
        return timed_event_slices(self.body, self.times, self.ends, size)


def _has_token_or_done(lines: bytes | bytearray) -> bool:
    """Whether any of these complete lines is a data line carrying a token, or the [DONE] terminator."""
    for line in lines.split(b"\n"):
        if line[:5] == b"data:":
            event = parse_payload(line[5:].strip())
            if event is DONE or carries_token(event):
                return True
    return False


def _done_end(body: bytearray, start: int, stop: int) -> int:
    """Where the first `data: [DONE]` line among the complete lines body[start:stop] ends (past its
    newline, and past the blank line that closes its event when that came too); -1 when none is there.
    `[DONE]` inside another line (a token's text) is no terminator."""
    at = body.find(b"[DONE]", start, stop)
    while at >= 0:
        begin = body.rfind(b"\n", start, at) + 1 or start
        end = body.find(b"\n", at)
        if body[begin:end].rstrip(b"\r") in _DONE_LINES:
            for blank in (b"\n", b"\r\n"):
                if body.startswith(blank, end + 1):
                    return end + 1 + len(blank)
            return end + 1
        at = body.find(b"[DONE]", at + 6, stop)
    return -1


_DONE_LINES = (b"data: [DONE]", b"data:[DONE]")


class Watchdog:
    """The first-token and idle timeouts of one connection, without a timer per wait.

    gevent's socket timeout starts and cancels a Timeout object around every wait, one per chunk. Here a
    read only stores its time in `last`; the one timer, when due, compares the time since the last read with
    the timeout and either sleeps again for what is left or raises TimeoutError in the reading greenlet."""

    __slots__ = ("_timer", "_greenlet", "_timeout", "_armed", "_rolling", "last")

    def __init__(self) -> None:
        self._timer = None
        self._greenlet = None
        self._timeout = 0.0
        self._armed = 0.0
        self._rolling = True
        self.last = 0.0

    def arm(self, timeout: float, rolling: bool = True) -> None:
        """From now, fail the calling greenlet when `timeout` seconds pass without a read (`rolling`), or
        at all (not `rolling`: a deadline that reads do not move, for waits where bytes are no progress)."""
        self.disarm()
        self._timeout = timeout
        self._rolling = rolling
        self.last = self._armed = time.perf_counter()
        self._greenlet = gevent.getcurrent()
        self._start(timeout)

    def roll(self, timeout: float) -> None:
        """From now, a rolling `timeout` for the greenlet armed for (called from any greenlet)."""
        greenlet = self._greenlet
        self.arm(timeout)
        self._greenlet = greenlet

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def _start(self, delay: float) -> None:
        self._timer = gevent.get_hub().loop.timer(max(delay, 0.0))
        self._timer.start(self._due)

    def _due(self) -> None:
        self._timer.close()
        self._timer = None
        left = (self.last if self._rolling else self._armed) + self._timeout - time.perf_counter()
        if left > 0:
            self._start(left)
        else:
            self._greenlet.throw(TimeoutError())


class Connection:
    """One persistent connection, opened ahead of time so that no request's clock pays for a connect."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self.sock = None
        self.start_unix = 0.0
        self.start = 0.0
        self.end = 0.0
        """When the last answer's final bytes arrived (perf_counter, as its reads are stamped); 0 when it did
        not end (a failure, an error answer)."""
        self.kernel_stamps = False
        self.retry_after: str | None = None  # of the last non-200 answer
        self._watchdog = Watchdog()
        self._rest: HTTPSocketResponse | None = None  # the last answer, left at its [DONE] (see _fit)

    def connect(self) -> None:
        if self.sock is not None:
            return
        where = f"{self.endpoint.host}:{self.endpoint.port}"
        sock = None
        try:
            sock = gevent.socket.create_connection((self.endpoint.host, self.endpoint.port),
                                                   timeout=self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.kernel_stamps = _KERNEL_STAMPS and not self.endpoint.ssl
            if self.kernel_stamps:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                except OSError:
                    self.kernel_stamps = False
            if self.endpoint.ssl:  # the handshake is still under the connect timeout
                context = gevent.ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.endpoint.host)
        except TimeoutError:
            _close_quietly(sock)
            raise StreamFailure("timeout_connect", where) from None
        except OSError as e:
            _close_quietly(sock)
            raise StreamFailure("connect", e.strerror or type(e).__name__) from None
        sock.settimeout(None)  # reads wait without a timer each: the Watchdog times them
        self.sock = sock

    def close(self) -> None:
        self._rest = None
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def stream(self, request: bytes, arrivals: Arrivals, first_token_timeout: float, idle_timeout: float,
               max_line: int = MAX_LINE_BYTES, max_body: int = MAX_RESPONSE_BYTES) -> tuple[int, bytes]:
        """Send `request`, read the response into `arrivals` as it comes, up to its `data: [DONE]` line.

        Returns (HTTP status, body of a non-200 answer, at most ERROR_BODY_BYTES). `start`/`start_unix` hold
        the clock taken just before the bytes went out, also after a failure. The caller owns `arrivals`,
        so what arrived before a failure is kept. Raises StreamFailure; `too_large` when a line of the body
        exceeds `max_line` bytes or the body `max_body` (what arrived up to the last whole line is kept).

        A kept-alive connection may have been closed by the server while it was idle (uvicorn, which vLLM
        runs on, does so after 5 s): a request that gets nothing back on it is sent once more, on a fresh
        connection, and timed from then. Only a connection that served requests before is trusted so little.
        """
        # a failed (re)connect is stamped when it was tried, with no clock: no request went out
        self.start_unix, self.start, self.end = time.time(), 0.0, 0.0
        retry = self._fit()
        limits = (first_token_timeout, idle_timeout, max_line, max_body)
        while True:
            try:
                return self._exchange(request, arrivals, *limits)
            except _Unanswered as e:
                if not retry:
                    raise StreamFailure("reset", str(e)) from None
                retry = False

    def _fit(self) -> bool:
        """Whether the open connection can carry the next request; one that cannot is closed. It cannot
        when the server closed it or sent bytes nobody asked for since the last answer, or when that answer,
        left at its [DONE], has not ended its HTTP message by now. Looked at without waiting (TLS: only the
        last); a close that comes later is what the retry is for."""
        rest, self._rest = self._rest, None
        if self.sock is None:
            return False
        raw = None if self.endpoint.ssl else getattr(self.sock, "_sock", None)
        if raw is None:
            fit = rest is None
        else:
            try:
                data = raw.recv(65536)  # the socket is non-blocking under gevent
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            fit = data is None if rest is None else bool(data) and _ends(rest, data)
        if not fit:
            self.close()
        return fit

    def _exchange(self, request: bytes, arrivals: Arrivals, first_token_timeout: float, idle_timeout: float,
                  max_line: int, max_body: int) -> tuple[int, bytes]:
        """One try of `stream` on the open connection (opened first when there is none); _Unanswered
        when the server closed it without a byte of answer."""
        self.connect()
        sock = self.sock
        dog = self._watchdog
        reading: _Body | None = None
        try:
            dog.arm(first_token_timeout, rolling=False)  # from sending: bytes without a token are no progress
            self.start_unix = time.time()
            self.start = time.perf_counter()
            clock = time.perf_counter
            read, read_now = self._readers(clock)
            try:
                sock.sendall(request)
                first, first_t = read()
            except ConnectionError as e:
                raise _Unanswered(e.strerror or type(e).__name__) from None
            if not first:
                raise _Unanswered("connection closed before an answer")
            # the body bytes that came with the head were in the first read, unless the head took more
            t = first_t if self.kernel_stamps and b"\r\n\r\n" in first else clock()
            response = HTTPSocketResponse(sock, block_size=65536, method="POST", pre_buffered=first)
            status = response.status_code
            if status != 200:
                retry_after = response.get("retry-after")
                self.retry_after = retry_after if isinstance(retry_after, str) else None
                body = response.read(ERROR_BODY_BYTES)
                if response.should_close():
                    self.close()
                return status, body
            refused = answer_refusal(response.get("content-type"), response.get("content-encoding"))
            if refused is not None:
                raise StreamFailure(*refused)
            reading = _Body(response, arrivals, dog, idle_timeout, max_line, max_body, read_now)
            if not reading.take(None, t):
                # kernel-stamped reads may happen late (all of them at once): the process's reader
                reader = Reader.current() if self.kernel_stamps and read_now is not None else None
                if reader is not None:
                    reader.follow(sock.fileno(), reading)
                else:
                    while not reading.take(*read()):
                        pass
            self.end = reading.end
            if reading.done >= 0:
                self._ended_at_done(response, arrivals.body, reading.done)
            elif response.should_close():
                self.close()
            return status, b""
        except TimeoutError:
            self.close()
            phase = reading.phase if reading is not None else _FIRST_TOKEN
            raise StreamFailure(phase, _what_came(reading)) from None
        except (HTTPParseError, OSError) as e:
            self.close()
            raise StreamFailure("reset", str(e) or type(e).__name__) from None
        except BaseException:
            self.close()
            raise
        finally:
            dog.disarm()

    def _ended_at_done(self, response: HTTPSocketResponse, body: bytearray, done: int) -> None:
        """The request is complete at its [DONE] line, ending at `done`: what followed in the body is
        dropped, and the connection is kept only when nothing followed. An HTTP message that has not ended
        yet (vLLM sends its last chunk in a write of its own) is left to `_fit`, which looks at it without
        waiting before the next request; nobody waits for it now."""
        trailing = len(body) > done
        del body[done:]
        if trailing or response.message_complete and response.should_close():
            self.close()
        elif not response.message_complete:
            response._body_buffer = bytearray()  # the next feed must not touch the finished body
            del response._on_body
            response._sock = None  # nor must the response close the socket when it is collected
            self._rest = response

    def _readers(self, clock) -> tuple[_Read, _Read | None]:
        """(read, read_now): a read that waits for bytes, and one that does not (BlockingIOError when none
        are there; None on TLS), each returning (bytes, perf_counter time of the kernel's receive stamp,
        else of the return)."""
        sock = self.sock
        # gevent's recv tries the socket first and waits when it raises EAGAIN: a chunk stream is nearly
        # always waited for, so the failed call and its exception came with every chunk. Here the read
        # waits for readability first, on the socket's own watcher (gevent's socket internals: where they
        # differ, gevent's recv is used as is).
        raw, ready, wait = (getattr(sock, "_sock", None), getattr(sock, "_read_event", None),
                            getattr(getattr(sock, "hub", None), "wait", None))
        if self.endpoint.ssl or raw is None or ready is None or wait is None:
            return (lambda: (sock.recv(65536), clock())), None
        if self.kernel_stamps:
            read_now = _stamped(raw, clock)
        else:
            recv = raw.recv

            def read_now() -> tuple[bytes, float]:
                return recv(65536), clock()

        def read() -> tuple[bytes, float]:
            while True:
                wait(ready)
                try:
                    return read_now()
                except BlockingIOError:  # woken without data after all
                    continue

        return read, read_now


def _stamped(raw: socket.socket, clock) -> _Read:
    """A non-blocking read of `raw` returning (bytes, the kernel's receive stamp on perf_counter's scale, or
    the clock on return when the read carried none)."""
    unpack, size, space, sol, stamped = _TIMESPEC.unpack, _TIMESPEC.size, _CMSG_SPACE, socket.SOL_SOCKET, \
        _SO_TIMESTAMPNS
    recvmsg = raw.recvmsg
    # the wall-clock stamp is put on perf_counter's scale through a pair taken together, per request
    offset = time.time() - clock()

    def read_now() -> tuple[bytes, float]:
        data, ancillary, _, _ = recvmsg(65536, space)
        if ancillary:  # the one control message asked for (a stamp cut short: the read's own clock)
            level, kind, value = ancillary[0]
            if kind == stamped and level == sol and len(value) == size:
                sec, nsec = unpack(value)
                return data, sec + nsec * 1e-9 - offset
        return data, clock()

    return read_now


_FIRST_TOKEN, _IDLE = "timeout_first_token", "timeout_idle"


class _Body:
    """A 200 answer's body as it is read (mux.Stream): each read de-chunked by the HTTP parser into the
    stream's Arrivals and marked with its time; the limits, the first token and [DONE] checked on the new
    bytes only (linear in the body). `done` is where the [DONE] line ended the body, -1 until then."""

    __slots__ = ("response", "feed", "body", "times", "ends", "dog", "idle_timeout", "max_line", "max_body",
                 "phase", "line_start", "seen", "done", "end", "read")

    def __init__(self, response: HTTPSocketResponse, arrivals: Arrivals, dog: Watchdog, idle_timeout: float,
                 max_line: int, max_body: int, read_now: _Read | None) -> None:
        self.response = response
        # geventhttpclient's C parser de-chunks what it is fed into this buffer, through the response's
        # `_on_body`: called here without the Python wrappers around either (HTTPResponse.feed's only
        # concerns a HEAD answer), one C call per read. _ended_at_done puts the class's back.
        self.body = arrivals.body = response._body_buffer
        response._on_body = self.body.extend
        self.feed = HTTPResponseParser.feed.__get__(response)
        self.times, self.ends = arrivals.times, arrivals.ends
        self.dog = dog
        self.idle_timeout = idle_timeout
        self.max_line, self.max_body = max_line, max_body
        self.phase = _FIRST_TOKEN
        self.line_start = 0  # where the line being received starts; lines before it were checked
        self.seen = 0  # body length at the previous read
        self.done = -1
        self.end = 0.0  # the time of the read that ended the body
        self.read = read_now

    def take(self, data: bytes | None, t: float) -> bool:
        """One read's bytes, read at `t` (b"": the server closed; None: bytes the response was already fed,
        the first read's that came with the head): True when the body has ended. Marks and checks only what
        the parser added to the body since the last call. Runs once per chunk of every stream: locals,
        and searches without start and end arguments where the answer is the same."""
        if data is not None:
            self.feed(data)
            if not data:
                if self.response.message_complete:
                    self.end = t
                    return True
                raise StreamFailure("reset", "connection closed mid-response")
        body, seen = self.body, self.seen
        size = len(body)
        if size > seen:
            self.times.append(t)
            self.ends.append(size)
            self.dog.last = t
            line_start = self.line_start
            # the last newline of this read closes every line before it (one before `seen`: none did)
            cut = body.rfind(b"\n")
            if cut >= seen:
                if cut - line_start > self.max_line and body.find(b"\n", seen) - line_start > self.max_line:
                    raise _too_large(body, line_start, f"a line over {self.max_line} bytes")
                if self.phase is _FIRST_TOKEN and _has_token_or_done(body[line_start:cut]):
                    self.phase = _IDLE
                    self.dog.roll(self.idle_timeout)
                if body.find(b"[DONE]", line_start, cut) >= 0:
                    done = _done_end(body, line_start, cut)
                    if done >= 0:
                        self.done = self.ends[-1] = done
                        self.end = t
                        return True
                self.line_start = line_start = cut + 1
            if size - line_start > self.max_line:
                raise _too_large(body, line_start, f"a line over {self.max_line} bytes")
            if size > self.max_body:
                raise _too_large(body, line_start, f"a response over {self.max_body} bytes")
            self.seen = size
        if self.response.message_complete:
            self.end = t
            return True
        return False

    def ended(self) -> None:
        self.dog.disarm()


def _what_came(reading: _Body | None) -> str:
    """What a timed-out request had received. Once tokens flow, any byte moves the idle timeout: none came.
    Before the first token, bytes without one (SSE comments, a role-only chunk) do not move it: said so,
    not "no bytes"."""
    if reading is None:
        return "no answer from the server"
    if reading.phase is _IDLE:
        return "no bytes from the server"
    size = len(reading.body)
    if not size:
        return "the answer's head, then no bytes"
    return f"{size} bytes from the server but no token (SSE comments or events without text)"


class _Unanswered(Exception):
    """The server closed the connection without a byte of answer (str(): how)."""


def _ends(rest: HTTPSocketResponse, data: bytes) -> bool:
    """Whether `data`, fed to the answer `rest` that was left at its [DONE], ends its HTTP message and
    nothing else: then the connection may carry the next request."""
    try:
        rest.feed(data)
    except HTTPParseError:
        return False
    return rest.message_complete and not rest._body_buffer and not rest.should_close()


class BodyRefused(Exception):
    """Raised from inside the SDK's body stream (`--client openai`): the body broke a limit or came
    compressed; `kind` and `detail` become the request's StreamFailure."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


_SDK_DONE = (b"\ndata: [DONE]", b"\ndata:[DONE]")


def _sync_byte_stream() -> type:
    """The byte-stream base class of the HTTP library the installed openai SDK uses (httpx, or its fork
    httpx2 in later SDKs): a response's stream must be one for the SDK to read and close it."""
    import openai

    client = next(c for c in openai.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
    return importlib.import_module(client.__module__.split(".")[0]).SyncByteStream


def sdk_client_options(max_line: int, max_body: int) -> dict:
    """Keyword arguments for `openai.OpenAI`: ask for an uncompressed body and read it through the same
    limits as the fast path, noting whether the `data: [DONE]` line went by (the SDK swallows it, and
    ends silently when a stream stops without it)."""
    import openai

    base = _sync_byte_stream()

    class GuardedBody(base):
        """The raw body as the SDK reads it, counted on the way through; it ends at the [DONE] line's
        read (what follows is no part of the answer, and a server may hold the stream open after it)."""

        def __init__(self, inner, refusal: tuple[str, str] | None) -> None:
            self.inner = inner
            self.refusal = refusal
            self.done = False

        def __iter__(self):
            if self.refusal is not None:
                # a compressed body could inflate past every limit (a gzip bomb); another format is no
                # stream the SDK could read (it would end silently)
                raise BodyRefused(*self.refusal)
            size, line = 0, 0
            tail = b"\n"  # the bytes before this read that a [DONE] line could start in
            for data in self.inner:
                size += len(data)
                cut = data.rfind(b"\n")
                if cut < 0:
                    line += len(data)
                else:
                    if line + data.find(b"\n") > max_line:
                        raise BodyRefused("too_large", f"a line over {max_line} bytes")
                    line = len(data) - cut - 1
                if line > max_line:
                    raise BodyRefused("too_large", f"a line over {max_line} bytes")
                if size > max_body:
                    raise BodyRefused("too_large", f"a response over {max_body} bytes")
                window = tail + data[:16]
                if any(m in window or m in data for m in _SDK_DONE):
                    self.done = True
                tail = data[-16:]
                yield data
                if self.done:
                    return

        def close(self) -> None:
            self.inner.close()

    def guard(response) -> None:
        headers = response.headers
        # an error answer is read for its message whatever its format; compressed, not at all
        ctype = headers.get("content-type") if response.status_code == 200 else None
        response.stream = GuardedBody(response.stream, answer_refusal(ctype, headers.get("content-encoding")))

    return {"default_headers": {"Accept-Encoding": "identity"},
            "http_client": openai.DefaultHttpxClient(event_hooks={"response": [guard]})}


def sdk_saw_done(stream) -> bool:
    """Whether the SDK stream's body carried the `data: [DONE]` line."""
    return bool(getattr(getattr(stream, "response", None), "stream", None) and
                getattr(stream.response.stream, "done", False))


def _close_quietly(sock) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()


def _too_large(body: bytearray, keep: int, detail: str) -> StreamFailure:
    """Drop the partial line past `keep` (its bytes are what overflowed) and name the failure."""
    del body[keep:]
    return StreamFailure("too_large", detail)


def with_timeout(seconds: float):
    """A gevent.Timeout that raises RequestTimeout (caught and named by the caller)."""
    return gevent.Timeout(seconds, RequestTimeout)
