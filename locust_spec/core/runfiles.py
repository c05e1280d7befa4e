"""The run files' contract in one place (docs/contracts.md): their names, the request row and its columns,
the error kinds a row's `error` starts with, and the schema versions. Pure: every writer (records, scraper,
summary, histograms, distributed) and every reader (crosscheck, webui, analysis) imports it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from pathlib import Path

from locust_spec.core.level import LevelKey, key_of

REQUESTS = "_requests.csv"
LATENCY = "_latency.json"
SERVER_METRICS = "_server_metrics.csv"
SUMMARY = "_summary.json"
RUN = "_run.json"
DESIGN = "_design.json"
"""Written by spec-ab (not Locust): how the run shared time with its other arms (core/design.py)."""
SUFFIXES = (REQUESTS, LATENCY, SERVER_METRICS, SUMMARY, RUN, DESIGN)
"""What follows the Locust `--csv` PREFIX in each of locust-spec's files, in the order they are listed."""

LATENCY_SCHEMA = 1
SUMMARY_SCHEMA = 2
SUMMARY_SCHEMAS = (1, 2)
"""What readers of PREFIX_summary.json accept (2 added the models under test, lost workers, counter
anomalies)."""
RUN_SCHEMA = 2
"""Of PREFIX_run.json, what was measured (recording/provenance.py); 2 added `speculative_config`."""
RUN_SCHEMAS = (1, 2)
BATCH_VERSION = 4
"""Of the worker -> master row batches (distributed.py); 2 added the answer's columns to the row, 3 the
open-loop columns, 4 the answer's whitespace-normalised hash."""


@dataclass(frozen=True)
class RunFiles:
    """The paths of one run's files, from its Locust `--csv` prefix."""

    prefix: str

    def path(self, suffix: str) -> Path:
        return Path(self.prefix + suffix)

    @property
    def requests(self) -> Path:
        return self.path(REQUESTS)

    @property
    def latency(self) -> Path:
        return self.path(LATENCY)

    @property
    def server_metrics(self) -> Path:
        return self.path(SERVER_METRICS)

    @property
    def summary(self) -> Path:
        return self.path(SUMMARY)

    @property
    def run(self) -> Path:
        return self.path(RUN)

    @property
    def design(self) -> Path:
        return self.path(DESIGN)


def prefix_of(path: Path) -> Path:
    """The run prefix a path names: `runs/a_requests.csv` -> `runs/a`; a path without a suffix is one."""
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return path


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One request started: a PREFIX_requests.csv row, its columns in order. None = empty cell."""

    start_unix_s: float
    level_users: int | None
    prompt_class: str
    prompt_id: str
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_estimated: int | None = None
    chunks: int | None = None
    max_tokens_per_chunk: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    chunk_gap_p50_ms: float | None = None
    finish_reason: str | None = None
    spec_accepted_tokens: int | None = None
    spec_draft_tokens: int | None = None
    error: str | None = None
    warmup: int = 0
    output_hash: str | None = None
    output_marks: str | None = None
    level_rate: float | None = None
    """A rate level's arrivals per second (open loop); `level_users` is then empty."""
    arrival: int | None = None
    """The arrival this request started for: its index in the level's schedule."""
    intended_unix_s: float | None = None
    """When the schedule meant it to start; `start_unix_s` is when it was sent."""
    lateness_ms: float | None = None
    """Sent this much after its intended start (coordinated omission, measured rather than hidden)."""
    output_hash_ws: str | None = None
    """The answer's hash with its whitespace normalised (core/answers.py): whitespace-only differences."""

    @property
    def level_key(self) -> LevelKey:
        """Its level in per-level tables: the users, or the rate (`4/s`)."""
        return key_of(self.level_users, self.level_rate)


COLUMNS = tuple(f.name for f in fields(RequestRow))
ADDED_COLUMNS = ("warmup", "output_hash", "output_marks", "level_rate", "arrival", "intended_unix_s",
                 "lateness_ms", "output_hash_ws")
"""Columns added after the first schema: readers fill them in when an older file lacks them."""
REQUIRED_COLUMNS = tuple(c for c in COLUMNS if c not in ADDED_COLUMNS)
row_values: Callable[[RequestRow], tuple] = attrgetter(*COLUMNS)
"""A row's values in column order: what `dataclasses.astuple` gives, without deep-copying each value (36 us a
row on a CI-class VM, against 0.5: a load generator writes a row per request)."""


class ErrorKind(str, enum.Enum):
    """What a failed request's row `error` starts with (`kind: detail`); `http_<status>` is HTTP."""

    CONNECT = "connect"
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"
    TIMEOUT_IDLE = "timeout_idle"
    TIMEOUT_REQUEST = "timeout_request"
    RESET = "reset"
    HTTP = "http"
    MALFORMED_SSE = "malformed_sse"
    SERVER_ERROR = "server_error"
    NO_DONE = "no_done"
    NO_TOKEN = "no_token"
    TOO_LARGE = "too_large"
    """A line or a response over --max-line-bytes / --max-response-bytes."""
    INTERRUPTED = "interrupted"
    """Cut off by the end of the run: the server may well have finished it."""
    NOT_EVENT_STREAM = "not_event_stream"
    """A 200 answer in another format (its Content-Type): a JSON completion, an HTML page."""
    COMPRESSED = "compressed"
    """A body sent compressed (its Content-Encoding) though `Accept-Encoding: identity` was asked."""

    def error(self, detail: str = "") -> str:
        """The row's `error` text for this kind."""
        return f"{self.value}: {detail}" if detail else self.value


CONNECT_FAILURES = (ErrorKind.CONNECT, ErrorKind.TIMEOUT_CONNECT)
"""No request went out: the server never saw it."""


def http_error(status: int) -> str:
    """The kind of an HTTP failure as it is written: `http_500`."""
    return f"{ErrorKind.HTTP.value}_{status}"


def error_kind(error: str | None) -> ErrorKind | None:
    """The kind of a row's `error` (None when ok, or for text no kind names)."""
    if not error:
        return None
    head = error.split(":", 1)[0].strip()
    if head.startswith(ErrorKind.HTTP.value + "_"):
        return ErrorKind.HTTP
    try:
        return ErrorKind(head)
    except ValueError:
        return None
