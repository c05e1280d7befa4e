"""Ground truth for measurement checks: one CSV line per chunk sent, buffered, flushed on exit."""

from __future__ import annotations

import time
from pathlib import Path


class SendLog:
    """`request_id,time_ns,tokens` per chunk; time is `time.time_ns()` taken just before the write."""

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
