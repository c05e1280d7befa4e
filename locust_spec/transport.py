"""The fast HTTP path: one kept-alive socket per user, the request written in one send, the body read as it
comes, each read stamped with perf_counter before anything else is done with it; splitting the body into
lines and parsing them wait until the stream has ended (Arrivals.timed, run by the plugin's processor)."""

from __future__ import annotations

import socket
import struct
import sys
import time
from urllib.parse import urlsplit

import gevent
import gevent.socket
import gevent.ssl
from geventhttpclient.response import HTTPParseError, HTTPSocketResponse

from locust_spec.sse import Chunk, parse_payload

_DONE_LINE = b"data: [DONE]"
# Kernel receive timestamps (Linux SO_TIMESTAMPNS, not named by Python's socket module): the time each
# read's last packet reached this host, whatever this process was doing then. A busy event loop delays
# when a greenlet gets to read, never what it stamps; elsewhere (or on TLS) reads are stamped on return.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_KERNEL_STAMPS = sys.platform == "linux" and _CMSG_SPACE > 0


class StreamFailure(Exception):
    """A request that failed; str() is the short `kind: detail` that goes into rows and Locust."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


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
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    head = (f"POST {endpoint.api_base}{path} HTTP/1.1\r\nHost: {endpoint.host_header}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{auth}"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class Arrivals:
    """A stream's body as it arrived: the bytes (de-chunked) and, per read, (perf_counter, body length)."""

    __slots__ = ("body", "marks")

    def __init__(self) -> None:
        self.body = bytearray()
        self.marks: list[tuple[float, int]] = []

    def timed(self) -> list[tuple[float, bytes]]:
        return timed_lines(self.body, self.marks)


def timed_lines(body: bytes | bytearray, marks: list[tuple[float, int]]) -> list[tuple[float, bytes]]:
    """Split `body` into lines (endings kept), each stamped with the time of the read that completed it;
    an unterminated tail gets the last read's time."""
    out: list[tuple[float, bytes]] = []
    pos = 0
    for t, end in marks:
        cut = body.rfind(b"\n", pos, end) + 1
        if cut > pos:
            out.extend((t, line + b"\n") for line in bytes(body[pos:cut - 1]).split(b"\n"))
            pos = cut
    if pos < len(body) and marks:
        out.append((marks[-1][0], bytes(body[pos:])))
    return out


def _has_token_or_done(body: bytearray) -> bool:
    return any(_carries_token(line) or line.startswith(_DONE_LINE) for line in bytes(body).split(b"\n"))


def _carries_token(line: bytes) -> bool:
    if not line.startswith(b"data:"):
        return False
    event = parse_payload(line[5:].strip())
    return isinstance(event, Chunk) and event.has_choices and bool(
        (event.completion_tokens or 0) > 0 or event.text_chars
    )


class Connection:
    """One persistent connection, opened ahead of time so that no request's clock pays for a connect."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self.sock = None
        self.start_unix = 0.0
        self.start = 0.0
        self.kernel_stamps = False

    def connect(self) -> None:
        if self.sock is not None:
            return
        try:
            sock = gevent.socket.create_connection((self.endpoint.host, self.endpoint.port),
                                                   timeout=self.connect_timeout)
        except TimeoutError:
            raise StreamFailure("timeout_connect", f"{self.endpoint.host}:{self.endpoint.port}") from None
        except OSError as e:
            raise StreamFailure("connect", e.strerror or type(e).__name__) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.kernel_stamps = _KERNEL_STAMPS and not self.endpoint.ssl
        if self.kernel_stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                self.kernel_stamps = False
        if self.endpoint.ssl:
            sock = gevent.ssl.create_default_context().wrap_socket(sock, server_hostname=self.endpoint.host)
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def stream(self, request: bytes, arrivals: Arrivals, first_token_timeout: float, idle_timeout: float
               ) -> tuple[int, bytes]:
        """Send `request`, read the response into `arrivals` as it comes.

        Returns (HTTP status, body of a non-200 answer). `start`/`start_unix` hold the clock taken just
        before the bytes went out, also after a failure. The caller owns `arrivals`, so what arrived
        before a failure is kept. Raises StreamFailure.
        """
        # a failed (re)connect is stamped when it was tried, with no clock: no request went out
        self.start_unix, self.start = time.time(), 0.0
        self.connect()
        sock = self.sock
        phase = "timeout_first_token"
        try:
            sock.settimeout(first_token_timeout)
            self.start_unix = time.time()
            self.start = time.perf_counter()
            sock.sendall(request)
            clock = time.perf_counter
            read = self._stamped_reader(clock) if self.kernel_stamps else None
            first, first_t = read() if read is not None else (b"", 0.0)
            response = HTTPSocketResponse(sock, block_size=65536, method="POST", pre_buffered=first)
            status = response.status_code
            if status != 200:
                body = response.read()
                if response.should_close():
                    self.close()
                return status, body
            # geventhttpclient de-chunks what `feed` is given into this buffer; reading it directly (not
            # readline) leaves the read loop one recv, one clock and one C-parser call per read.
            body = arrivals.body = response._body_buffer
            marks = arrivals.marks
            if body:
                # the body bytes that came with the head were in the first read, unless the head took more
                marks.append((first_t if b"\r\n\r\n" in first else clock(), len(body)))
            recv, feed = sock.recv, response.feed
            while not response.message_complete:
                if phase == "timeout_first_token" and _has_token_or_done(body):
                    phase = "timeout_idle"
                    sock.settimeout(idle_timeout)
                if read is not None:
                    data, t = read()
                else:
                    data = recv(65536)
                    t = clock()
                feed(data)
                if not data:
                    if response.message_complete:
                        break
                    raise StreamFailure("reset", "connection closed mid-response")
                marks.append((t, len(body)))
            if response.should_close():
                self.close()
            return status, b""
        except TimeoutError:
            self.close()
            raise StreamFailure(phase, "no bytes from the server") from None
        except (HTTPParseError, OSError) as e:
            self.close()
            raise StreamFailure("reset", str(e) or type(e).__name__) from None
        except BaseException:
            self.close()
            raise


    def _stamped_reader(self, clock):
        """A read returning (bytes, perf_counter time of the kernel's receive stamp, else of the return)."""
        recvmsg, unpack, space = self.sock.recvmsg, _TIMESPEC.unpack, _CMSG_SPACE
        # the wall-clock stamp is put on perf_counter's scale through a pair taken together, per request
        offset = time.time() - clock()

        def read() -> tuple[bytes, float]:
            data, ancillary, _, _ = recvmsg(65536, space)
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(value) == _TIMESPEC.size:
                    sec, nsec = unpack(value)
                    return data, sec + nsec * 1e-9 - offset
            return data, clock()

        return read


def with_timeout(seconds: float):
    """A gevent.Timeout that raises RequestTimeout (caught and named by the caller)."""
    return gevent.Timeout(seconds, RequestTimeout)
