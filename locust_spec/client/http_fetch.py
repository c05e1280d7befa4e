"""One small HTTP client for the plain (non-streamed) calls: /metrics, /v1/models, priming.

Every call is bounded and keeps credentials with their origin:
- one deadline over the whole exchange (connect, send, head and body): every socket read waits at most the
  time left, so a server sending a byte a second cannot stretch a call past it;
- a cap on the body's bytes (the head is capped by http.client), `Accept-Encoding: identity` so no
  compressed body can expand past the cap;
- credentials (the URL's user:password as Basic, or the caller's Authorization) go only to the URL's
  origin: a redirect is followed only within that origin (scheme, host, port), and only for GET; any
  other redirect is a FetchError naming where it pointed, never a request sent there.

Works with plain and gevent-patched sockets alike (spec-ab's priming threads, the Locust process).
"""

from __future__ import annotations

import base64
import http.client
import io
import time
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from locust_spec.client.headers import HeaderValueError, credential

# The scraper reads its URLs from here when no --metrics-url is given: how spec-ab hands a child an arm's
# /metrics URL without putting its credentials in the child's command line.
METRICS_URLS_ENV = "LOCUST_SPEC_METRICS_URL"
MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(OSError):
    """A failed call, said in one line that holds no credential (an OSError, as urllib's failures are)."""


class UrlError(ValueError):
    """A URL that cannot be used as given; the message never holds the URL's user, password or query."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


@dataclass(frozen=True)
class FetchTarget:
    """A checked URL: where to connect, what to ask for, and the Basic credentials found in it (if any)."""

    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line
    basic: str | None  # the `Authorization` value for the URL's user:password

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def display_url(url: str) -> str:
    """The URL as it may be logged or written: no user:password, no query (either can hold a secret)."""
    parts = urlsplit(url)
    try:
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return f"{parts.scheme}://<unparsable address>"
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_target(url: str) -> FetchTarget:
    """Check `url` and split it; UrlError (without the secret) when it is not a usable http(s) URL.

    A password holding `/`, `?`, `#` or `@` unencoded ends the address early (`http://u:pa/ss@host`
    is host `u`, port `pa`): urllib then fails with the password in its message, or worse, connects to
    the wrong host and sends the rest as a path. Both are refused here with the remedy.
    """
    encode = "if a user or password is in the URL, percent-encode its / ? # @ as %2F %3F %23 %40"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise UrlError(f"not an http(s) URL ({encode})")
    try:
        port = parts.port
    except ValueError:
        raise UrlError(f"the address has an invalid port ({encode})") from None
    if not parts.hostname:
        raise UrlError(f"no host in the URL ({encode})")
    if "@" not in parts.netloc and "@" in url.split("://", 1)[1]:
        raise UrlError(f"an '@' after the address ({encode})")
    basic = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        basic = "Basic " + base64.b64encode(credentials).decode()
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    port = port or (443 if parts.scheme == "https" else 80)
    return FetchTarget(parts.scheme, parts.hostname, port, path, basic)


def check_urls(urls: list[str], option: str = "--metrics-url") -> None:
    """UrlError naming which of `option`'s URLs is unusable and why, never its user, password or query."""
    for n, url in enumerate(urls, 1):
        try:
            parse_target(url)
        except UrlError as e:
            # not even the shown form: with the address cut short, the path may hold the password's tail
            raise UrlError(f"{option} #{n} of {len(urls)}: {e}") from None


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket as http.client reads it: each read waits at most the time left to the deadline."""

    def __init__(self, sock, deadline: _Deadline) -> None:
        super().__init__()
        self._sock = sock
        # A file of the socket's own holds the socket open until the body is read: for a `Connection:
        # close` answer http.client closes its connection as soon as the head is in.
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def _connection(target: FetchTarget, deadline: _Deadline) -> http.client.HTTPConnection:
    class Response(http.client.HTTPResponse):
        def __init__(self, sock, *args, **kwargs) -> None:
            super().__init__(sock, *args, **kwargs)
            self.fp.close()  # the socket's own file: left open, it would hold the socket open after close
            self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))

    cls = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
    conn = cls(target.host, target.port, timeout=deadline.left())
    conn.response_class = Response
    return conn


def _read_capped(resp: http.client.HTTPResponse, max_bytes: int) -> bytes:
    length = resp.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise FetchError(f"answer of {int(length)} bytes, larger than the limit of {max_bytes}")
    parts, size = [], 0
    while size <= max_bytes:
        part = resp.read(min(65536, max_bytes + 1 - size))
        if not part:
            return b"".join(parts)
        size += len(part)
        parts.append(part)
    raise FetchError(f"answer larger than the limit of {max_bytes} bytes")


def request(url: str | FetchTarget, *, deadline_s: float, max_bytes: int, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> Response:
    """GET (or POST `body`) `url` once; a Response for any status, FetchError/UrlError on failure.

    `headers` may hold an Authorization (a bearer token): it goes to the URL's origin only, like the
    URL's own user:password (sent as Basic when `headers` has no Authorization).
    """
    target = url if isinstance(url, FetchTarget) else parse_target(url)
    deadline = _Deadline(deadline_s)
    sent = {"Accept-Encoding": "identity", **(headers or {})}
    for name, value in sent.items():
        try:
            credential(value, f"the {name} header")
        except HeaderValueError as e:  # http.client's own error would print the value (a credential)
            raise FetchError(str(e)) from None
    if target.basic is not None and "Authorization" not in sent:
        sent["Authorization"] = target.basic
    if body is not None:
        sent.setdefault("Content-Type", "application/json")
    origin = target.origin
    try:
        for _ in range(MAX_REDIRECTS + 1):
            conn = _connection(target, deadline)
            try:
                conn.request("POST" if body is not None else "GET", target.path, body=body, headers=sent)
                resp = conn.getresponse()
                try:
                    if resp.status not in REDIRECTS:
                        return Response(resp.status, _read_capped(resp, max_bytes))
                    location = resp.getheader("Location") or ""
                finally:
                    resp.close()  # its file holds the socket open (_DeadlineReader)
            finally:
                conn.close()
            target = _redirect(target, location, body is not None, origin)
        raise FetchError(f"more than {MAX_REDIRECTS} redirects")
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(f"timed out: no complete answer within {deadline_s:g} s") from None
    except (http.client.HTTPException, OSError) as e:
        raise FetchError(_reason(e)) from None


def _redirect(target: FetchTarget, location: str, post: bool, origin: tuple[str, str, int]) -> FetchTarget:
    """The same-origin GET a redirect leads to; FetchError (and no request) for any other."""
    base = urlunsplit((target.scheme, f"[{target.host}]" if ":" in target.host else target.host, "", "", ""))
    base += f":{target.port}"
    try:
        nxt = parse_target(urljoin(base + target.path, location))
    except UrlError:
        raise FetchError("redirected to an unusable URL; not followed") from None
    if post or nxt.origin != origin:
        what = "a POST" if post else "a redirect to another origin"
        raise FetchError(f"redirected to {display_url(urljoin(base + target.path, location))}: not followed "
                         f"({what}; credentials stay with {display_url(base)})")
    return FetchTarget(nxt.scheme, nxt.host, nxt.port, nxt.path, target.basic)


def _reason(e: BaseException) -> str:
    text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    text = " ".join(str(text).split())
    return text if len(text) <= 200 else text[:200] + "..."
