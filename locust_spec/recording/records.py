"""Request rows: the PREFIX_requests.csv row, its streaming writer, and the sinks rows and timings go to."""

from __future__ import annotations

import csv
from dataclasses import astuple
from pathlib import Path
from typing import Protocol

from locust_spec.client.timing import RequestTiming
from locust_spec.core.runfiles import COLUMNS, RequestRow, RunFiles
from locust_spec.recording.histograms import LatencyHistograms

__all__ = ["COLUMNS", "FileSink", "RecordSink", "RequestRow", "RowWriter", "make_row", "record_histograms"]


def make_row(start_unix_s: float, level_users: int | None, prompt_class: str, prompt_id: str, warmup: bool,
             timing: RequestTiming | None, error: str | None, *, level_rate: float | None = None,
             arrival: int | None = None, intended_unix_s: float | None = None,
             lateness_ms: float | None = None) -> RequestRow:
    """The row for a request; `timing` is whatever was measured before it ended (None if nothing); on a rate
    level (open loop) also the arrival it started for."""
    common = {"error": error, "warmup": int(warmup), "level_rate": level_rate, "arrival": arrival,
              "intended_unix_s": intended_unix_s, "lateness_ms": lateness_ms}
    if timing is None:
        return RequestRow(start_unix_s, level_users, prompt_class, prompt_id, **common)
    return RequestRow(
        start_unix_s, level_users, prompt_class, prompt_id,
        prompt_tokens=timing.prompt_tokens,
        output_tokens=timing.output_tokens,
        tokens_estimated=int(timing.tokens_estimated),
        chunks=timing.chunks,
        max_tokens_per_chunk=timing.max_tokens_per_chunk,
        ttft_ms=timing.ttft_ms,
        tpot_ms=timing.tpot_ms,
        e2e_ms=timing.e2e_ms,
        itl_p50_ms=timing.itl_p50_ms,
        itl_p99_ms=timing.itl_p99_ms,
        chunk_gap_p50_ms=timing.chunk_gap_p50_ms,
        finish_reason=timing.finish_reason,
        spec_accepted_tokens=timing.spec_accepted_tokens,
        spec_draft_tokens=timing.spec_draft_tokens,
        **common,
    )


# A spreadsheet takes a cell starting with one of these for a formula (CSV injection: `=HYPERLINK(...)`
# as a finish_reason, an error text or a prompt class). Text that comes from a server or a prompt file is
# written with a leading apostrophe then, which spreadsheets show as text (OWASP's advice).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    return "'" + text if text.startswith(FORMULA_START) else text


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, str):
        return spreadsheet_safe(value)
    return value


class RowWriter:
    """Appends rows to a CSV, buffering at most `buffer_rows` before writing them out."""

    def __init__(self, path: Path, buffer_rows: int = 256) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)
        self._csv.writerow(COLUMNS)
        self._file.flush()
        self._buffer: list[RequestRow] = []
        self._limit = buffer_rows
        self.rows_written = 0

    def add(self, row: RequestRow) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._file.closed:
            return
        self._csv.writerows([_cell(v) for v in astuple(r)] for r in self._buffer)
        self.rows_written += len(self._buffer)
        self._buffer.clear()
        self._file.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()


def record_histograms(histograms: LatencyHistograms, row: RequestRow, timing: RequestTiming | None) -> None:
    """Histograms take only successful requests (level histograms also skip warm-up: LatencyHistograms);
    lateness, every request that went out on schedule, failed or not."""
    if row.lateness_ms is not None:
        histograms.record("lateness", row.prompt_class, row.level_key, (max(row.lateness_ms, 0.0),),
                          bool(row.warmup))
    if timing is not None and not row.error:
        histograms.record_timing(timing, row.prompt_class, row.level_key, bool(row.warmup), row.lateness_ms)


class RecordSink(Protocol):
    """Where finished requests go. A local run writes files; a distributed layer can put a worker
    sink here that batches rows and histogram deltas to the master (which feeds a FileSink)."""

    flush_interval_s: float
    """How often the plugin calls `flush` during a run."""

    def add(self, row: RequestRow, timing: RequestTiming | None) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Writes PREFIX_requests.csv as rows come and PREFIX_latency.json on flush; histograms take
    only successful requests, level histograms only those outside warm-up."""

    # Rewriting PREFIX_latency.json blocks the event loop ~50 ms: rarely during a run, and exactly at the end.
    flush_interval_s = 30.0

    def __init__(self, prefix: str) -> None:
        files = RunFiles(prefix)
        self.requests_path = files.requests
        self.latency_path = files.latency
        self.rows = RowWriter(self.requests_path)
        self.histograms = LatencyHistograms()

    def add(self, row: RequestRow, timing: RequestTiming | None) -> None:
        self.rows.add(row)
        record_histograms(self.histograms, row, timing)

    def add_rows(self, rows: list[RequestRow]) -> None:
        """Rows measured elsewhere (a worker), whose histograms arrive via `histograms.merge_encoded`."""
        for row in rows:
            self.rows.add(row)

    def flush(self) -> None:
        self.rows.flush()
        self.histograms.write(self.latency_path)

    def close(self) -> None:
        self.flush()
        self.rows.close()
