"""Opt-in debug trace (env LOCUST_SPEC_TRACE=FILE): each request's start and token-chunk arrivals on the
wall clock, by the server's response id, so a benchmark can hold them against a server's send log."""

from __future__ import annotations

import os

from locust_spec.client.sse import response_id
from locust_spec.client.timing import RequestTiming

ENV = "LOCUST_SPEC_TRACE"
HEADER = "request_id,event,time_ns\n"


def trace_rows(rid: str, start_unix: float, start: float, timing: RequestTiming) -> list[str]:
    """CSV lines: `start` (clock taken just before the request bytes went out), then one `chunk` per
    token-carrying chunk. perf_counter times are put on the wall clock through the (time.time(),
    perf_counter()) pair taken together at the start, so they compare with another process's time_ns."""
    base_ns = start_unix * 1e9 - start * 1e9
    rows = [f"{rid},start,{round(start_unix * 1e9)}\n"]
    if timing.ttft_ms is None:
        return rows
    t = start + timing.ttft_ms / 1000.0
    rows.append(f"{rid},chunk,{round(base_ns + t * 1e9)}\n")
    for gap in timing.chunk_gaps_ms:
        t += gap / 1000.0
        rows.append(f"{rid},chunk,{round(base_ns + t * 1e9)}\n")
    return rows


class ChunkTrace:
    """Appends trace rows to a file; buffered, flushed at stop."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "w", encoding="ascii", buffering=1 << 20)  # noqa: SIM115 - lives for the run
        self._fh.write(HEADER)

    @classmethod
    def from_env(cls) -> ChunkTrace | None:
        path = os.environ.get(ENV)
        return cls(path) if path else None

    def write(self, body: bytes | bytearray, objects: list | None, start_unix: float, start: float,
              timing: RequestTiming) -> None:
        self._fh.write("".join(trace_rows(response_id(body, objects), start_unix, start, timing)))

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
