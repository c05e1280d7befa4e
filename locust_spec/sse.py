"""Pure SSE parsing: bytes or lines -> event payloads -> chat-completion chunks (tokens, usage, spec)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one `chat.completion.chunk` event tells about the stream.

    `completion_tokens` is the cumulative count from `usage` (None when the chunk has no usage);
    `text_chars` counts content, reasoning and tool-call text in the deltas; `has_choices` is False
    for the final usage-only chunk, which carries no token.
    """

    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    text_chars: int = 0
    has_choices: bool = True
    finish_reason: str | None = None
    spec_accepted_tokens: int | None = None
    spec_draft_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The `data: [DONE]` terminator."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """An event payload that is not a chat-completion chunk; `reason` is short and printable."""

    reason: str


Event = Chunk | Done | Malformed
DONE = Done()
_DONE_PAYLOAD = b"[DONE]"
_TEXT_KEYS = ("content", "reasoning_content", "reasoning")


class EventSplitter:
    """Incremental SSE framing: feed bytes or whole lines, get each event's joined `data` payload.

    Per the SSE spec, an event ends at a blank line and its `data:` lines are joined with newlines;
    comment lines (`:`) and other fields are ignored. Only as much state as one partial line is kept.
    """

    __slots__ = ("_partial", "_data")

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        """Split raw bytes (any boundaries) into complete event payloads."""
        buf = self._partial + data
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        out: list[bytes] = []
        for line in lines:
            payload = self.feed_line(line)
            if payload is not None:
                out.append(payload)
        return out

    def feed_line(self, line: bytes) -> bytes | None:
        """Take one line (with or without its line ending); return a payload when it ends an event."""
        line = line.rstrip(b"\r\n")
        if not line:
            if not self._data:
                return None
            payload = b"\n".join(self._data)
            self._data = []
            return payload
        if line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value[:1] == b" " else value)
        return None

    def pending(self) -> bytes | None:
        """The payload of an event left unterminated when the stream ended, if any."""
        if self._partial:
            self.feed_line(self._partial)
            self._partial = b""
        if not self._data:
            return None
        payload = b"\n".join(self._data)
        self._data = []
        return payload


def parse_payload(payload: bytes) -> Event:
    """One event payload -> Chunk, Done or Malformed. Never raises."""
    if payload == _DONE_PAYLOAD:
        return DONE
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return Malformed(f"not JSON: {_excerpt(payload)}")
    if not isinstance(obj, dict):
        return Malformed(f"not an object: {_excerpt(payload)}")
    return parse_object(obj)


def parse_object(obj: dict) -> Event:
    """A decoded chunk object (from the wire or from an SDK's `to_dict()`) -> Chunk or Malformed."""
    error = obj.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        return Chunk(has_choices=False, error=str(message)[:200])
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return Malformed("chunk without choices")
    text_chars = 0
    finish_reason = None
    for choice in choices:
        if not isinstance(choice, dict):
            return Malformed("choice is not an object")
        delta = choice.get("delta") or {}
        for key in _TEXT_KEYS:
            text = delta.get(key)
            if text:
                text_chars += len(text)
        if delta.get("tool_calls"):
            text_chars += len(orjson.dumps(delta["tool_calls"]))
        finish_reason = choice.get("finish_reason") or finish_reason
    completion_tokens = prompt_tokens = None
    usage = obj.get("usage")
    if isinstance(usage, dict):
        completion_tokens = _int_or_none(usage.get("completion_tokens"))
        prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
    accepted = drafted = None
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        spec = metrics["speculative_decoding"]
        accepted = _int_or_none(spec.get("num_accepted_draft_tokens"))
        drafted = _int_or_none(spec.get("num_draft_tokens"))
    return Chunk(
        completion_tokens=completion_tokens,
        prompt_tokens=prompt_tokens,
        text_chars=text_chars,
        has_choices=bool(choices),
        finish_reason=finish_reason,
        spec_accepted_tokens=accepted,
        spec_draft_tokens=drafted,
    )


def parse_lines(timed_lines: list[tuple[float, bytes]]) -> list[tuple[float, Event]]:
    """Timestamped raw lines of one stream -> timestamped events (each at its last data line's arrival)."""
    splitter = EventSplitter()
    events: list[tuple[float, Event]] = []
    last_t = 0.0
    for t, line in timed_lines:
        if line.startswith(b"data:"):
            last_t = t
        payload = splitter.feed_line(line)
        if payload is not None:
            events.append((last_t, parse_payload(payload)))
    tail = splitter.pending()
    if tail is not None:
        events.append((last_t, parse_payload(tail)))
    return events


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _excerpt(payload: bytes, limit: int = 60) -> str:
    text = payload[:limit].decode("utf-8", "replace")
    return repr(text) if len(payload) <= limit else repr(text) + "..."
