"""Pure SSE parsing: bytes or lines -> event payloads -> chat-completion chunks (tokens, usage, spec).

Hostile input is normal input: a payload is decoded against a typed schema of only the fields read here
(msgspec, in C), so any byte sequence and any JSON value in any field gives a Chunk, Done or a Malformed
naming what was wrong, never an exception; framing is linear in the bytes.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Generator, Sequence
from itertools import accumulate
from typing import Annotated, TypeVar

import msgspec

# A token count past this is no real model's (contexts are ~1M tokens); bounding it also bounds what a
# request's timing holds (one ITL value per token), whatever count a server claims.
MAX_TOKEN_COUNT = 1 << 22
# Rows keep finish_reason and a server's error message: short texts, so cut there.
FINISH_REASON_CHARS = 40
ERROR_CHARS = 200

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_COUNT)]
T = TypeVar("T")


class Chunk(msgspec.Struct, frozen=True, gc=False):
    """What one `chat.completion.chunk` event tells about the stream.

    `completion_tokens` is the cumulative count from `usage` (None when the chunk has no usage);
    `text_chars` counts content, reasoning and tool-call text in the deltas, `text` is that text (for the
    answer's fingerprint); `has_choices` is False for the final usage-only chunk, which carries no token.
    """

    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    text_chars: int = 0
    has_choices: bool = True
    finish_reason: str | None = None
    spec_accepted_tokens: int | None = None
    spec_draft_tokens: int | None = None
    error: str | None = None
    text: str = ""


class Done(msgspec.Struct, frozen=True, gc=False):
    """The `data: [DONE]` terminator."""


class Malformed(msgspec.Struct, frozen=True, gc=False):
    """An event payload that is not a chat-completion chunk; `reason` is short and printable."""

    reason: str


Event = Chunk | Done | Malformed
DONE = Done()
_DONE_PAYLOAD = b"[DONE]"


# The wire schema: only the fields read below, each with the type the OpenAI API gives it. Unknown fields
# are skipped unparsed; a known field of another type is a ValidationError naming its path. Not tracked by
# the garbage collector (gc=False: they hold no cycles): a stream's hundreds of them are made and dropped
# at once, and each tracked object brings the next collection closer.
class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct, gc=False):
    function: _Function | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct, gc=False):
    completion_tokens: _Count | None = None
    prompt_tokens: _Count | None = None


class _SpecStats(msgspec.Struct, gc=False):
    num_accepted_draft_tokens: _Count | None = None
    num_draft_tokens: _Count | None = None


class _Metrics(msgspec.Struct, gc=False):
    speculative_decoding: _SpecStats | None = None


class _ErrorBody(msgspec.Struct, gc=False):
    message: str | None = None


class _Wire(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    metrics: _Metrics | None = None
    error: str | _ErrorBody | None = None


_decode = msgspec.json.Decoder(_Wire).decode


def parse_payload(payload: bytes) -> Event:
    """One event payload -> Chunk, Done or Malformed. Never raises."""
    if payload == _DONE_PAYLOAD:
        return DONE
    try:
        wire = _decode(payload)
    except msgspec.ValidationError as e:
        return Malformed(printable(str(e)))
    except msgspec.DecodeError:
        return Malformed(f"not JSON: {_excerpt(payload)}")
    return _chunk(wire)


def carries_token(event: Event) -> bool:
    """Whether an event is a chunk with a token: a first token (a role-only first chunk, a usage-only last
    one, an error or a comment are none)."""
    return type(event) is Chunk and event.has_choices and bool(
        (event.completion_tokens or 0) > 0 or event.text_chars)


def parse_object(obj: object) -> Event:
    """A decoded chunk object (an SDK's `to_dict()`) -> Chunk or Malformed, same schema. Never raises."""
    try:
        wire = msgspec.convert(obj, _Wire)
    except msgspec.ValidationError as e:
        return Malformed(printable(str(e)))
    return _chunk(wire)


def _chunk(wire: _Wire) -> Event:
    # Runs once per chunk of every request: the common chunk (one choice whose delta holds at most
    # `content`) takes the first branch; Chunk's fields given by position (its declaration order).
    error = wire.error
    if error is not None:
        message = error if isinstance(error, str) else error.message or "(no message)"
        return Chunk(has_choices=False, error=printable(message, ERROR_CHARS))
    choices = wire.choices
    if choices is None:
        return Malformed("chunk without choices")
    if len(choices) == 1 and (delta := choices[0].delta) is not None and not (
            delta.reasoning_content or delta.reasoning or delta.tool_calls):
        text = delta.content or ""
        finish_reason = choices[0].finish_reason or None
    else:
        text, finish_reason = _texts(choices)
    usage = wire.usage
    metrics = wire.metrics
    spec = metrics.speculative_decoding if metrics is not None else None
    return Chunk(
        usage.completion_tokens if usage is not None else None,
        usage.prompt_tokens if usage is not None else None,
        len(text),
        bool(choices),
        None if finish_reason is None else printable(finish_reason, FINISH_REASON_CHARS),
        spec.num_accepted_draft_tokens if spec is not None else None,
        spec.num_draft_tokens if spec is not None else None,
        None,
        text,
    )


def _texts(choices: list[_Choice]) -> tuple[str, str | None]:
    """(the text of every choice's delta: content, reasoning, tool calls; the last finish_reason given)."""
    finish_reason = None
    pieces: list[str] = []
    for choice in choices:
        delta = choice.delta
        if delta is not None:
            for text in (delta.content, delta.reasoning_content, delta.reasoning):
                if text:
                    pieces.append(text)
            if delta.tool_calls:
                for call in delta.tool_calls:
                    fn = call.function
                    pieces.append("\n" if fn is None else f"{fn.name or ''}{fn.arguments or ''}\n")
        finish_reason = choice.finish_reason or finish_reason
    return "".join(pieces), finish_reason


class _Framing:
    """One SSE event being read: its `data` lines so far and when the last of them arrived."""

    __slots__ = ("data", "last_t")

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.last_t = 0.0


def _frame(lines: bytes, t: float, state: _Framing, out: list, parse) -> None:
    """Complete lines (joined by newlines, the last one's newline cut off) that arrived at `t` -> append
    (time of the event's last data line, parse(payload)) to `out` for each event they end.

    Per the SSE spec, an event ends at a blank line and its `data:` lines are joined with newlines;
    comment lines (`:`) and other fields are ignored."""
    data = state.data
    for line in lines.split(b"\n"):
        if line and line[-1] == 13:  # CR before the LF
            line = line[:-1]
        if not line:
            if data:
                out.append((state.last_t, parse(data[0] if len(data) == 1 else b"\n".join(data))))
                data.clear()
        elif line.startswith(b"data:"):
            state.last_t = t
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])


def _flush(state: _Framing, out: list, parse) -> None:
    """The event left unterminated when the stream ended, if any."""
    if state.data:
        out.append((state.last_t, parse(b"\n".join(state.data))))
        state.data.clear()


def timed_events(body: bytes | bytearray, times: Sequence[float], ends: Sequence[int]
                 ) -> list[tuple[float, Event]]:
    """A stream's body and its reads (read i ended at body offset `ends[i]` at perf_counter `times[i]`) ->
    its events, each stamped with the read that completed its last data line. An unterminated tail counts
    as a last line, read at the last read's time. One pass: linear in the body."""
    return completed(timed_event_slices(body, times, ends, len(body) or 1))


def timed_event_slices(body: bytes | bytearray, times: Sequence[float], ends: Sequence[int], size: int
                       ) -> Generator[None, None, list[tuple[float, Event]]]:
    """`timed_events`, about `size` bytes of the body at a time (whole reads, at least one): a generator
    that yields between slices (its caller may let others run there) and returns the events."""
    if len(body) <= 2 * size:  # read about 3x faster than the general path: two slices' worth at once
        plain = plain_events(body, times, ends)
        if plain is not None:
            return plain
    out: list[tuple[float, Event]] = []
    state = _Framing()
    pos = seen = 0  # pos: start of the first line not framed yet; seen: end of the previous read
    lo, count = 0, len(times)
    while lo < count:
        hi = max(bisect.bisect_right(ends, seen + size, lo), lo + 1)
        for t, end in zip(times[lo:hi], ends[lo:hi], strict=True):
            cut = body.rfind(b"\n", seen, end)  # only this read's bytes: a newline-less body stays linear
            seen = end
            if cut >= 0:
                _frame(body[pos:cut], t, state, out, parse_payload)
                pos = cut + 1
        lo = hi
        if lo < count:
            yield
    if pos < len(body) and ends:
        _frame(body[pos:], times[-1], state, out, parse_payload)
    _flush(state, out, parse_payload)
    return out


_decode_lines = msgspec.json.Decoder(_Wire).decode_lines
_NEXT_DATA = b"\n\ndata: "


def plain_events(body: bytes | bytearray, times: Sequence[float], ends: Sequence[int]
                 ) -> list[tuple[float, Event]] | None:
    """`timed_events` of the body every server sends (vLLM's): each event one `data: ` line ended by LF LF,
    its payload a JSON chunk or [DONE]; all payloads decoded in one C call. None for any other body
    (comments, CR, multi-line data, a payload that is no chunk, a cut tail): the general path reads that,
    to the same result."""
    if not ends or ends[-1] < len(body) or not body.startswith(b"data: ") or not body.endswith(b"\n\n"):
        return None
    payloads = body[6:-2].split(_NEXT_DATA)
    # The separators hold two newlines each and the last event's end two more: any other newline (a
    # comment, a second data line, a blank payload's extra LF) or a CR is another body.
    if body.count(b"\n") != 2 * len(payloads) or b"\r" in body:
        return None
    done = payloads[-1] == _DONE_PAYLOAD  # a [DONE] anywhere else is an undecodable payload: general path
    chunks = payloads[:-1] if done else payloads
    try:
        # one JSON value per line, each decoded on its own, as parse_payload would
        wires = _decode_lines(b"\n".join(chunks))
    except msgspec.DecodeError:  # a payload that is no chunk: named by the general path
        return None
    if len(wires) != len(chunks):  # an empty payload (skipped as a blank line)
        return None
    # each event's end: past `data: `, its payload and LF LF
    event_ends = array("q", accumulate(len(p) + 8 for p in payloads))
    # `ends` as the reader keeps them (an array: Arrivals); a list compares unequal and takes the bisect
    # path below, to the same stamps
    if len(times) == len(payloads) and event_ends == ends:
        stamps: Sequence[float] = times  # one read per event, the common case: its own read's time
    else:  # the read that holds the newline ending each event's data line (2 bytes before its end)
        stamps = [times[bisect.bisect_right(ends, end - 2)] for end in event_ends]
    out: list[tuple[float, Event]] = [(t, _chunk(wire)) for t, wire in zip(stamps, wires, strict=False)]
    if done:
        out.append((stamps[-1], DONE))
    return out


def completed(steps: Generator[None, None, T]) -> T:
    """What a computation done in slices (a generator yielding between them) returns, run in one go."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def parse_lines(timed_lines: Sequence[tuple[float, bytes]]) -> list[tuple[float, Event]]:
    """Timestamped raw lines of one stream -> timestamped events (each at its last data line's arrival)."""
    body = bytearray()
    times: list[float] = []
    ends: list[int] = []
    for t, line in timed_lines:
        body += line if line[-1:] == b"\n" else line + b"\n"
        times.append(t)
        ends.append(len(body))
    return timed_events(body, times, ends)


class EventSplitter:
    """Incremental SSE framing: feed bytes (any boundaries), get each event's joined `data` payload.

    Only as much state as one partial line is kept, and each byte is searched for a newline once."""

    __slots__ = ("_partial", "_state")

    def __init__(self) -> None:
        self._partial = bytearray()
        self._state = _Framing()

    def feed(self, data: bytes) -> list[bytes]:
        """Split raw bytes (any boundaries) into complete event payloads."""
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial += data
            return []
        out: list[tuple[float, bytes]] = []
        _frame(bytes(self._partial) + data[:cut], 0.0, self._state, out, bytes)
        self._partial = bytearray(data[cut + 1:])
        return [payload for _, payload in out]

    def pending(self) -> bytes | None:
        """The payload of an event left unterminated when the stream ended, if any."""
        out: list[tuple[float, bytes]] = []
        if self._partial:
            _frame(bytes(self._partial), 0.0, self._state, out, bytes)
            self._partial = bytearray()
        _flush(self._state, out, bytes)
        return out[0][1] if out else None


def printable(text: str, limit: int = 120) -> str:
    """Cut to `limit` characters, one line of printable, encodable text (a server's control character or
    lone surrogate must not break a row)."""
    text = text[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)


def _excerpt(payload: bytes | bytearray, limit: int = 60) -> str:
    text = bytes(payload[:limit]).decode("utf-8", "replace")
    return repr(text) if len(payload) <= limit else repr(text) + "..."


def response_id(body: bytes | bytearray, objects: list | None) -> str:
    """The `id` of the stream's first chunk (vLLM's `chatcmpl-...`), or "" when there is none."""
    rid = getattr(objects[0][1], "id", "") if objects else _first_id(body)
    # the id goes into an ASCII CSV (the trace): an id that is not plain text is not a vLLM id
    return rid if isinstance(rid, str) and rid.isascii() and rid.isprintable() and "," not in rid else ""


def _first_id(body: bytes | bytearray) -> object:
    start = body.find(b"data:")
    if start < 0:
        return ""
    end = body.find(b"\n", start)
    try:
        obj = msgspec.json.decode(bytes(body[start + 5:end if end >= 0 else len(body)]))
    except msgspec.DecodeError:
        return ""
    return obj.get("id", "") if isinstance(obj, dict) else ""
