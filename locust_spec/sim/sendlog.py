"""Ground truth for measurement checks: one CSV line per request arrival and per chunk sent."""

from __future__ import annotations

import time
from pathlib import Path

FORMAT = """send log (--send-log FILE): CSV with the header request_id,time_ns,tokens; time_ns is
time.time_ns() taken just before the write. One row per request with tokens -1 when it reaches the
engine (its arrival); then, streamed, a row with tokens 0 for the role chunk (sent with the first
token, as vLLM does) and one row per token-carrying chunk with the tokens it carries; non-streamed,
one row with all its tokens when the response is written. Readers summing tokens skip rows below 0."""
ARRIVAL = -1


class SendLog:
    """`request_id,time_ns,tokens` rows as FORMAT says; buffered, flushed every `flush_lines` and on close."""

    def __init__(self, path: Path, flush_lines: int = 4096):
        self._fh = path.open("w", encoding="ascii", buffering=1 << 20)
        self._fh.write("request_id,time_ns,tokens\n")
        self._lines: list[str] = []
        self._flush_lines = flush_lines

    def write(self, rid: str, tokens: int) -> None:
        self._lines.append(f"{rid},{time.time_ns()},{tokens}\n")
        if len(self._lines) >= self._flush_lines:
            self.flush()

    def flush(self) -> None:
        self._fh.write("".join(self._lines))
        self._lines.clear()
        self._fh.flush()

    def close(self) -> None:
        self.flush()
        self._fh.close()
