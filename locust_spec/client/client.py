"""The chat client a user sends with: one face, `stream(messages, **body) -> Capture`, two readers.

`FastChatClient` reads the stream with the fast transport (one kept-alive socket per user, reads stamped as
they arrive); `OpenAIChatClient` with the official SDK. Either way the request ends as a `Capture` (its raw
arrivals and clocks, unparsed) handed to the run's processor, which turns it into Locust events, a row and
histograms off the hot path. A locustfile's own task (several turns, tools, a system prompt, other body
fields) calls the same `stream` and gets the same measurements as the built-in one.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

import gevent
import orjson
from gevent import GreenletExit

from locust_spec.client.backoff import (
    REFUSED_ALIKE,
    RETRY_AFTER_MAX_S,
    SERVER_BACKOFF_S,
    SLOW_DOWN,
    next_wait,
    retry_after_s,
)
from locust_spec.client.headers import credential
from locust_spec.client.settings import RequestSettings
from locust_spec.client.sse import DONE, Event, EventSplitter, carries_token, parse_object, response_id
from locust_spec.client.timing import RequestTiming, request_timing, timing_slices
from locust_spec.client.transport import (
    Arrivals,
    BodyRefused,
    Connection,
    Endpoint,
    RequestTimeout,
    StreamFailure,
    request_bytes,
    sdk_client_options,
    sdk_saw_done,
    with_timeout,
)
from locust_spec.core.level import Arrival, LevelBoard, LevelKey, key_of
from locust_spec.core.runfiles import ErrorKind, http_error

log = logging.getLogger(__name__)

CHAT_PATH = "/chat/completions"


@dataclass(eq=False)
class Capture:
    """One request from start to end as it was read: raw and unparsed until someone asks.

    The fast reader fills `wire` (the body bytes and a clock per read); the SDK fills `chunks` (each
    chunk object with its arrival) and `done`. `start`/`end` are perf_counter seconds (`start` just before
    the request went out, 0 when nothing was sent), `start_unix` the wall clock taken with `start`.
    """

    name: str
    prompt_id: str
    level_users: int | None
    warmup: bool
    start_unix: float = 0.0
    start: float = 0.0
    end: float = 0.0
    error: str | None = None
    wire: Arrivals | None = None
    chunks: list | None = None
    done: bool = False
    held_s: float = 0.0
    """Seconds its user waited before sending it because the server had refused it (backoff.py)."""
    rate: float | None = None
    """On a rate level (open loop): its arrivals per second; `level_users` is then None."""
    arrival: int | None = None
    intended_unix: float | None = None
    """The scheduled arrival this request started for, and when it was meant to start."""
    _events: list | None = field(default=None, repr=False)

    @property
    def level_key(self) -> LevelKey:
        return key_of(self.level_users, self.rate)

    @property
    def lateness_ms(self) -> float | None:
        """How long after its intended start the request went out (None: no schedule, or never sent)."""
        if self.intended_unix is None or not self.start_unix:
            return None
        return (self.start_unix - self.intended_unix) * 1000.0

    def events(self) -> list[tuple[float, Event]]:
        """The stream's SSE events, each stamped with its arrival; parsed once."""
        if self._events is None:
            if self.chunks is not None:
                timed = [(t, parse_object(chunk.to_dict())) for t, chunk in self.chunks]
                self._events = [*timed, (self.end, DONE)] if self.done else timed
            else:
                self._events = self.wire.events() if self.wire is not None else []
        return self._events

    def timing(self) -> RequestTiming | None:
        """What the request measured; None when it never went out."""
        if not self.start:
            return None
        return request_timing(self.start, self.events(), self.end)

    def timing_slices(self, size: int, every: int) -> Generator[None, None, RequestTiming | None]:
        """`timing()` computed about `size` bytes of the body, then `every` events, at a time: a generator
        that yields between slices (the processor lets the readers run there: a stream of a million chunks
        takes seconds) and returns the timing."""
        if not self.start:
            return None
        if self._events is None and self.wire is not None and self.chunks is None:
            self._events = yield from self.wire.event_slices(size)
        return (yield from timing_slices(self.start, self.events(), self.end, every))

    def response_id(self) -> str:
        """The server's id for the response (vLLM's `chatcmpl-...`), "" when none came."""
        return response_id(self.wire.body if self.wire is not None else b"", self.chunks)

    def reply(self) -> str:
        """The assistant's text as it streamed in (the content deltas of the first choice), e.g. to carry
        a conversation on to its next turn."""
        if self.chunks is not None:
            objects = (chunk.to_dict() for _, chunk in self.chunks)
        else:
            splitter = EventSplitter()
            payloads = splitter.feed(bytes(self.wire.body)) if self.wire is not None else []
            tail = splitter.pending()
            objects = (_json_object(p) for p in [*payloads, *([tail] if tail is not None else [])])
        return "".join(_content(obj) for obj in objects)


def _json_object(payload: bytes) -> dict:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _content(obj: dict) -> str:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta")
    text = delta.get("content") if isinstance(delta, dict) else None
    return text if isinstance(text, str) else ""


@dataclass(eq=False)
class Server:
    """What every user of one run sending to one host shares: the settings resolved for it (the model
    found at its /v1/models), whether it takes continuous usage stats, and the SDK client when used."""

    host: str
    settings: RequestSettings
    api_key: str
    continuous_usage: bool = True
    sdk: object | None = None
    told_to_wait: bool = False

    def slowed_down(self, kind: str, retry_after: float | None) -> None:
        if self.told_to_wait:
            return
        self.told_to_wait = True
        if kind in SLOW_DOWN:
            asked = f"Retry-After {retry_after:g} s" if retry_after is not None else "no Retry-After"
            log.warning("locust-spec: %s answered %s (%s): its users wait before sending again (Retry-After "
                        "honoured up to %g s, else from %g s doubling); the time they wait is in the summary",
                        self.host, kind, asked, RETRY_AFTER_MAX_S, SERVER_BACKOFF_S[0])
        else:
            log.warning("locust-spec: %s answered %s, as it would any request: its users wait before sending "
                        "again (from %g s doubling to %g s); the time they wait is in the summary",
                        self.host, kind, *SERVER_BACKOFF_S)

    def reject_continuous_usage(self) -> None:
        if self.continuous_usage:
            self.continuous_usage = False
            log.warning("locust-spec: %s rejects continuous_usage_stats; tokens per chunk are estimated",
                        self.host)


def chat_body(settings: RequestSettings, messages: Sequence[dict], continuous_usage: bool,
              fields: dict) -> dict:
    """The request body: the run's settings, then the caller's `fields` (which win), `stream` on;
    `max_tokens` is never above the run's cap (`--max-tokens`)."""
    body: dict = {
        "model": settings.model,
        "messages": list(messages),
        "max_tokens": settings.max_tokens_for(None),
        "temperature": settings.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}
        if continuous_usage else {"include_usage": True},
    }
    if settings.ignore_eos:
        body["ignore_eos"] = True
    if settings.response_format is not None:
        body["response_format"] = settings.response_format
    body.update(fields)
    if isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = settings.max_tokens_for(body["max_tokens"])
    return body


class ChatClient:
    """`stream(messages, name=..., prompt_id=..., **body)`: send one streaming chat completion, read it to
    its end, hand it to the processor and return its Capture. Never raises, but on the user's stop.

    `name` is the row's prompt class (and Locust's request name); `body` fields are added to (or replace)
    the request body the run's options make: `max_tokens`, `tools`, `response_format`, anything the
    server takes.
    """

    def __init__(self, server: Server, levels: LevelBoard, submit: Callable[[Capture], None]) -> None:
        self.server = server
        self.settings = server.settings
        self._levels = levels
        self._submit = submit
        self._wait_s = 0.0  # asked for by the last refusal (backoff.py)
        self._send_at = 0.0  # monotonic: not before then
        self.arrival: Arrival | None = None
        """Open loop: the arrival the next request starts for (the user's wait took it from the schedule)."""

    def stream(self, messages: Sequence[dict], *, name: str = "chat", prompt_id: str = "",
               **body) -> Capture:
        # A server that asked to wait is waited for first; under a rate the arrival then goes out late,
        # and its lateness says so.
        held = self._hold()
        arrival, self.arrival = self.arrival, None
        if arrival is None:
            level = self._levels.current()
            capture = Capture(name, prompt_id, None if level.plan else level.users,
                              level.in_warmup(time.time()), held_s=held, rate=level.rate)
        else:  # the arrival's level, even if the next one has started: its warm-up by the intended start
            level = arrival.level
            capture = Capture(name, prompt_id, None, level.in_warmup(arrival.intended_unix_s), held_s=held,
                              rate=level.rate, arrival=arrival.index, intended_unix=arrival.intended_unix_s)
            hold_until(arrival.intended_unix_s)
        refused, retry_after = None, None
        try:
            with with_timeout(self.settings.request_timeout):
                self._send(messages, body, capture)
        except StreamFailure as e:
            capture.error = str(e)
            refused, retry_after = e.kind, e.retry_after
        except RequestTimeout:
            self._abandon()
            capture.error = ErrorKind.TIMEOUT_REQUEST.error(f"over {self.settings.request_timeout:g} s")
        except GreenletExit:
            capture.error = ErrorKind.INTERRUPTED.error("test stopped")
            capture.end = time.perf_counter()
            self._submit(capture)
            raise
        capture.end = capture.end or time.perf_counter()
        self._submit(capture)
        asked = retry_after_s(retry_after, time.time())
        self._wait_s = next_wait(self._wait_s, refused, asked)
        self._send_at = time.monotonic() + self._wait_s
        if refused in SLOW_DOWN or refused in REFUSED_ALIKE:
            self.server.slowed_down(refused, asked)
        return capture

    def _hold(self) -> float:
        """Wait until the server's last refusal lets this user send again (its think time, spent before
        this call, counts toward it); the seconds waited here."""
        left = self._send_at - time.monotonic()
        if left <= 0:
            return 0.0
        gevent.sleep(left)
        return left

    def body(self, messages: Sequence[dict], fields: dict, continuous_usage: bool) -> dict:
        return chat_body(self.settings, messages, continuous_usage, fields)

    def connect(self) -> None:
        """Open what can be opened ahead of the first request (its clock should not pay for it)."""

    def close(self) -> None:
        """Release this user's connection."""

    def _send(self, messages: Sequence[dict], fields: dict, capture: Capture) -> None:
        raise NotImplementedError

    def _abandon(self) -> None:
        """A request outlived its timeout: drop whatever it left half-read."""


class FastChatClient(ChatClient):
    """The fast reader: one connection per user, opened ahead; each read stamped before anything else."""

    def __init__(self, server: Server, levels: LevelBoard, submit: Callable[[Capture], None]) -> None:
        super().__init__(server, levels, submit)
        self._endpoint = Endpoint(server.host)
        self._conn = Connection(self._endpoint, self.settings.connect_timeout)

    def connect(self) -> None:
        # on failure the first request retries the connect and records why it failed
        with contextlib.suppress(StreamFailure):
            self._conn.connect()

    def close(self) -> None:
        self._conn.close()

    def _abandon(self) -> None:
        self._conn.close()

    def _send(self, messages: Sequence[dict], fields: dict, capture: Capture) -> None:
        s, server = self.settings, self.server
        for continuous in (server.continuous_usage, False):
            request = request_bytes(self._endpoint, CHAT_PATH,
                                    orjson.dumps(self.body(messages, fields, continuous)), server.api_key)
            capture.wire = Arrivals()
            try:
                status, error_body = self._conn.stream(request, capture.wire, s.first_token_timeout,
                                                       s.idle_timeout, s.max_line_bytes, s.max_response_bytes)
            finally:
                capture.start_unix, capture.start = self._conn.start_unix, self._conn.start
                capture.end = self._conn.end  # its last bytes' arrival (read late when many streams are)
            if status == 200:
                return
            if status == 400 and continuous and b"continuous_usage_stats" in error_body:
                server.reject_continuous_usage()
                continue
            raise StreamFailure(http_error(status), short_error(error_body), self._conn.retry_after)


class _NoFirstToken(BaseException):
    """Raised by the SDK client's first-token deadline; a BaseException, as gevent's Timeout is, so that no
    SDK version's `except Exception` turns it into a connection error."""


class OpenAIChatClient(ChatClient):
    """The official SDK's stream (accurate only at low concurrency per process: chunks are stamped when
    the SDK hands them over, after its own parsing)."""

    def __init__(self, server: Server, levels: LevelBoard, submit: Callable[[Capture], None]) -> None:
        super().__init__(server, levels, submit)
        self._named = frozenset(inspect.signature(server.sdk.chat.completions.create).parameters)

    def _send(self, messages: Sequence[dict], fields: dict, capture: Capture) -> None:
        import openai

        sdk = self.server.sdk
        body = self.body(messages, fields, self.server.continuous_usage)
        body.pop("stream")
        # what the SDK's create() does not name goes in extra_body (vLLM's own fields, stream_options)
        extra = {k: body.pop(k) for k in list(body) if k not in self._named or k == "stream_options"}
        capture.chunks = []
        stream = None
        # The SDK's read timeout is the idle timeout; the first token has its own deadline from sending,
        # which bytes without a token (SSE comments, a role-only chunk) do not move.
        first_token = gevent.Timeout(self.settings.first_token_timeout, _NoFirstToken)
        capture.start_unix, capture.start = time.time(), time.perf_counter()
        first_token.start()
        try:
            stream = sdk.chat.completions.create(stream=True, extra_body=extra, **body)
            for chunk in stream:
                capture.chunks.append((time.perf_counter(), chunk))
                if first_token.pending and carries_token(parse_object(chunk.to_dict())):
                    first_token.close()
        except _NoFirstToken:
            if stream is not None:
                stream.close()
            raise StreamFailure(ErrorKind.TIMEOUT_FIRST_TOKEN.value, "no token from the server") from None
        except BodyRefused as e:
            raise StreamFailure(e.kind, e.detail) from None
        except openai.APIStatusError as e:
            raise StreamFailure(http_error(e.status_code), short_error(str(e.message).encode()),
                                e.response.headers.get("retry-after")) from None
        except openai.APITimeoutError:
            kind = ErrorKind.TIMEOUT_IDLE if capture.chunks else ErrorKind.TIMEOUT_FIRST_TOKEN
            raise StreamFailure(kind.value) from None
        except openai.APIConnectionError as e:
            raise StreamFailure(ErrorKind.RESET.value, str(e)) from None
        except openai.APIError as e:  # an error object in the stream
            raise StreamFailure(ErrorKind.SERVER_ERROR.value, short_error(str(e.message).encode())) from None
        except (ValueError, TypeError, AttributeError, KeyError) as e:  # the SDK could not read a chunk
            raise StreamFailure(ErrorKind.MALFORMED_SSE.value,
                                f"the SDK failed on a chunk ({type(e).__name__})") from None
        finally:
            first_token.close()
        capture.done = sdk_saw_done(stream)


HOLD_MAX_S = 0.005
"""The longest an arrival's send is held for its intended start (its user wakes a little early, see
wiring/openloop.py WAKE_EARLY_S); a clock stepped back by more does not hold it longer."""


def hold_until(unix_s: float) -> None:
    """Yield to the other greenlets until the wall clock reads `unix_s`: an arrival is never sent early."""
    left = min(unix_s - time.time(), HOLD_MAX_S)
    if left <= 0:
        return
    end = time.perf_counter() + left
    while time.perf_counter() < end:
        gevent.sleep(0)


def openai_sdk(host: str, api_key: str, settings: RequestSettings):
    """One SDK client for a host; no retries (a retry would hide a failure and skew timing)."""
    import openai

    for name in ("openai", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    endpoint = Endpoint(host)
    scheme = "https" if endpoint.ssl else "http"
    return openai.OpenAI(
        base_url=f"{scheme}://{endpoint.host_header}{endpoint.api_base}",
        api_key=credential(api_key, "the API key") or "none", max_retries=0,
        timeout=openai.Timeout(settings.request_timeout, connect=settings.connect_timeout,
                               read=settings.idle_timeout),
        **sdk_client_options(settings.max_line_bytes, settings.max_response_bytes),
    )


def short_error(body: bytes, limit: int = 120) -> str:
    """A one-line excerpt of an error body, preferring the server's error message."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text[:limit]
