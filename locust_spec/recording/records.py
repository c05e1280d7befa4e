"""Request rows: the PREFIX_requests.csv row, its streaming writer, and the sinks rows and timings go to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from locust_spec.client.timing import RequestTiming
from locust_spec.core.runfiles import COLUMNS, RequestRow, RunFiles, row_values
from locust_spec.recording.histograms import LatencyHistograms
from locust_spec.recording.writes import RecordFile, WriteFailed, csv_bytes

__all__ = ["COLUMNS", "FileSink", "RecordSink", "RequestRow", "RowWriter", "make_row", "record_histograms"]

log = logging.getLogger(__name__)


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
        # only a whole answer has a fingerprint to compare
        output_hash=timing.output_hash if error is None else None,
        output_marks=timing.output_marks if error is None else None,
        output_hash_ws=timing.output_hash_ws if error is None else None,
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
    """Appends rows to a CSV, buffering at most `buffer_rows` before writing them out. A write that fails
    (WriteFailed) leaves the file ending at its last whole row, closed; the rows not written stay in
    `pending`."""

    def __init__(self, path: Path, buffer_rows: int = 256) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WriteFailed(f"cannot write {path}: {e.strerror or e}") from None
        self._file = RecordFile(path)
        self._file.append(csv_bytes([COLUMNS]))
        self._buffer: list[RequestRow] = []
        self._limit = buffer_rows
        self.rows_written = 0

    @property
    def pending(self) -> int:
        """Rows taken but not (yet) in the file."""
        return len(self._buffer)

    def add(self, row: RequestRow) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self._limit:
            self.flush()

    def extend(self, rows: list[RequestRow]) -> None:
        """Take rows to be written at the next flush, whatever their number (a worker's batch)."""
        self._buffer.extend(rows)

    def flush(self) -> None:
        if self._file.closed or not self._buffer:
            return
        self._file.append(csv_bytes([_cell(v) for v in row_values(r)] for r in self._buffer))
        self.rows_written += len(self._buffer)
        self._buffer.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._file.close()

    def abandon(self) -> None:
        """Close without writing what waits (after a failure elsewhere, the file stays as it is)."""
        self._buffer.clear()
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
    only successful requests, level histograms only those outside warm-up.

    When a file cannot be written (a full disk), the sink stops writing: `failure` says why in one line,
    `on_failure` hears it once (the run stops), the files keep what they held (whole rows; the last
    latency.json, written when every row before it was in the CSV) and later rows are only counted
    (`unwritten`). Raises WriteFailed at start when the CSV cannot be created."""

    # Rewriting PREFIX_latency.json blocks the event loop (38 ms for the demo's 75 histograms on a 2-core VM):
    # rarely during a run, and exactly at the end.
    flush_interval_s = 30.0

    def __init__(self, prefix: str, on_failure: Callable[[str], None] | None = None) -> None:
        files = RunFiles(prefix)
        self.requests_path = files.requests
        self.latency_path = files.latency
        self.rows = RowWriter(self.requests_path)
        self.histograms = LatencyHistograms()
        self.on_failure = on_failure
        self.failure: str | None = None
        self.unwritten = 0
        """Rows that reached the sink but not the file (taken after, or lost with, a failed write)."""

    def add(self, row: RequestRow, timing: RequestTiming | None) -> None:
        if self.failure is not None:
            self.unwritten += 1
            return
        record_histograms(self.histograms, row, timing)
        self._writing(self.rows.add, row)

    def add_rows(self, rows: list[RequestRow], histograms: dict[str, str] | None = None) -> None:
        """Rows measured elsewhere (a worker) with their histograms (`LatencyHistograms.encode`), written
        at once."""
        if self.failure is not None:
            self.unwritten += len(rows)
            return
        self.rows.extend(rows)
        self._writing(self.rows.flush)
        if self.failure is None:  # the histograms of rows that are in the file only
            self.histograms.merge_encoded(histograms or {})

    def flush(self) -> None:
        self._writing(self.rows.flush)
        self._writing(self.histograms.write, self.latency_path)

    def close(self) -> None:
        self.flush()
        if self.failure is None:
            self._writing(self.rows.close)
        else:
            self.rows.abandon()

    def _writing(self, write: Callable, *args) -> None:
        if self.failure is not None:
            return
        try:
            write(*args)
        except WriteFailed as e:
            self.unwritten += self.rows.pending
            self.failure = (f"{e}; {self.requests_path.name} keeps its first {self.rows.rows_written} rows, "
                            "whole")
            if self.on_failure is not None:
                self.on_failure(self.failure)
            else:
                log.error("locust-spec: %s", self.failure)
