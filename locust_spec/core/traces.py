"""Public serving traces read as they are: each request's arrival time and token counts (docs/traces.md).

Three formats, told apart by the file's first line: Mooncake / Qwen-Bailian JSONL (`timestamp`,
`input_length`, `output_length`, `hash_ids`), the Azure LLM inference CSV (`TIMESTAMP`, `ContextTokens`,
`GeneratedTokens`) and BurstGPT's CSV (`Timestamp`, `Request tokens`, `Response tokens`). The file is read a
line at a time with a cap on a line's length and on the rows kept, so a hostile or huge file costs bounded
memory and time; a bad row is a `TraceError` of one line naming the file and line. A window of the trace's
own seconds and a speedup are applied here, so every process that reads the same file with the same
settings gets the same rows.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

MOONCAKE, AZURE, BURSTGPT = "mooncake", "azure", "burstgpt"
FORMATS = (MOONCAKE, AZURE, BURSTGPT)
MAX_ROWS = 1_000_000
"""Rows read from one trace unless the caller allows more (before the window: Mooncake's time unit is known
only once every row has been read)."""
MAX_LINE_CHARS = 1 << 20
"""A longer line is refused: no trace row needs a megabyte (a Mooncake row's hash_ids are a few hundred)."""
MAX_TOKENS = 10_000_000
"""A row's token count above this is taken for a broken file, not a request."""

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message is one line naming the file (and line)."""


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: its row in the file (0 the first data row), when it arrives in seconds from
    the start of the replay (the window's start, speedup applied), its input and output tokens, and the ids
    of its prompt's blocks (Mooncake's `hash_ids`: rows sharing a prefix of ids share that prefix of text)."""

    index: int
    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A trace's rows in arrival order, its format, and how many rows were skipped (no output tokens:
    BurstGPT logs failed requests so)."""

    format: str
    rows: tuple[TraceRow, ...]
    skipped: int = 0

    @property
    def duration_s(self) -> float:
        return self.rows[-1].offset_s if self.rows else 0.0


@dataclass(frozen=True)
class Window:
    """The part of a trace replayed, in the trace's own seconds from its first row: [start, end)."""

    start_s: float = 0.0
    end_s: float = math.inf


def parse_window(text: str) -> Window:
    """`START:END` in seconds of the trace (`60:` to its end, `:300` from its start)."""
    start, sep, end = str(text).partition(":")
    try:
        if not sep:
            raise ValueError
        window = Window(float(start) if start.strip() else 0.0, float(end) if end.strip() else math.inf)
    except ValueError:
        raise ValueError(f"a trace window is START:END in seconds of the trace: {text!r}") from None
    if not (window.start_s >= 0 and math.isfinite(window.start_s) and window.end_s > window.start_s):
        raise ValueError(f"a trace window needs 0 <= START < END: {text!r}")
    return window


def parse_speedup(text: str) -> float:
    """How much faster than recorded the trace is replayed: 2 is twice as fast, 0.5 half as fast."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"a trace speedup must be a positive number (2: twice as fast): {text!r}")
    return value


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line, none longer than MAX_LINE_CHARS."""
    with path.open(encoding="utf-8", errors="strict", newline="") as f:
        number = 0
        while True:
            try:
                line = f.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError:
                raise TraceError(f"{path}: line {number + 1}: not UTF-8 text") from None
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_CHARS:
                raise TraceError(f"{path}: line {number}: longer than {MAX_LINE_CHARS} characters")
            if line.strip():
                yield number, line


def detect_format(first_line: str) -> str | None:
    """The format a trace's first line names: a JSON object (Mooncake/Bailian) or a CSV header."""
    if first_line.lstrip().startswith("{"):
        return MOONCAKE
    header = {c.strip() for c in next(csv.reader([first_line]), [])}
    if set(AZURE_COLUMNS) <= header:
        return AZURE
    if set(BURSTGPT_COLUMNS) <= header:
        return BURSTGPT
    return None


def _number(value: object, name: str, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise TraceError(f"{where}: {name} is not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: {name} is not a finite number: {value!r}")
    return float(value)


def _count(value: object, name: str, where: str) -> int:
    number = _number(value, name, where)
    if number != int(number) or not 0 <= number <= MAX_TOKENS:
        raise TraceError(f"{where}: {name} must be a whole number from 0 to {MAX_TOKENS}: {value!r}")
    return int(number)


def _time(value: object, name: str, where: str) -> float:
    number = _number(value, name, where)
    if number < 0:
        raise TraceError(f"{where}: {name} must be 0 or more: {value!r}")
    return number


def _hash_ids(value: object, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                          for v in value):
        raise TraceError(f"{where}: hash_ids must be a list of whole numbers of 0 or more")
    return tuple(value)


@dataclass(frozen=True)
class _Raw:
    line: int
    time: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


def _mooncake(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[_Raw, bool]]:
    """Rows with whether the timestamp was written as a JSON integer (Mooncake's milliseconds)."""
    for number, line in lines:
        where = f"{path}: line {number}"
        try:
            data = json.loads(line)
        except ValueError:
            raise TraceError(f"{where}: not a JSON object") from None
        if not isinstance(data, dict):
            raise TraceError(f"{where}: not a JSON object")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in data]
        if missing:
            raise TraceError(f"{where}: no {', '.join(missing)} (a Mooncake/Bailian row has timestamp, "
                             "input_length, output_length)")
        stamp = data["timestamp"]
        yield (_Raw(number, _time(stamp, "timestamp", where),
                    _count(data["input_length"], "input_length", where),
                    _count(data["output_length"], "output_length", where),
                    _hash_ids(data.get("hash_ids"), where)),
               isinstance(stamp, int))


def _azure_time(text: str, where: str) -> float:
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP is not a date and time: {text!r}") from None
    if stamp.tzinfo is not None:
        return stamp.timestamp()
    # the trace's times are UTC without saying so; only their differences matter here
    return (stamp - datetime(1970, 1, 1)).total_seconds()


def _csv(path: Path, lines: Iterator[tuple[int, str]], fmt: str) -> Iterator[_Raw]:
    header_line, header_text = next(lines, (1, ""))
    header = [c.strip() for c in next(csv.reader([header_text]), [])]
    columns = AZURE_COLUMNS if fmt == AZURE else BURSTGPT_COLUMNS
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(f"{path}: line {header_line}: the {fmt} header lacks {', '.join(missing)}")
    at = [header.index(c) for c in columns]
    for number, line in lines:
        where = f"{path}: line {number}"
        cells = next(csv.reader([line]), [])
        if len(cells) < len(header):
            raise TraceError(f"{where}: {len(cells)} columns, the header has {len(header)}")
        stamp, tokens_in, tokens_out = (cells[i] for i in at)
        time = _azure_time(stamp, where) if fmt == AZURE else _time(stamp, columns[0], where)
        yield _Raw(number, time, _count(tokens_in, columns[1], where),
                   _count(tokens_out, columns[2], where), ())


def read_trace(path: str | Path, fmt: str | None = None, window: Window = Window(), speedup: float = 1.0,
               max_rows: int = MAX_ROWS) -> Trace:
    """A trace file's rows inside `window` (seconds of the trace from its first row), their offsets from the
    window's start divided by `speedup`. The format is detected from the first line unless `fmt` forces it.
    Mooncake's timestamps are milliseconds when every one is written as a JSON integer (as Mooncake's
    files are), seconds when any is written with a decimal point (as Bailian's are). Rows must come in time
    order. TraceError (one line) for anything else, or past `max_rows` rows kept."""
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"a trace format is one of {', '.join(FORMATS)}, not {fmt!r}")
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    speedup = parse_speedup(str(speedup))
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise TraceError(f"{path}: empty trace")
    fmt = fmt or detect_format(first[1])
    if fmt is None:
        raise TraceError(f"{path}: line {first[0]}: not a trace this reads: a JSON object per line "
                         f"(Mooncake/Bailian), or a CSV header with {', '.join(AZURE_COLUMNS)} (Azure) or "
                         f"{', '.join(BURSTGPT_COLUMNS)} (BurstGPT)")
    chained = itertools.chain([first], lines)  # the first line is the first row (JSONL) or the header (CSV)
    raws = _mooncake(path, chained) if fmt == MOONCAKE else ((raw, False) for raw in _csv(path, chained, fmt))
    kept: list[tuple[int, float, _Raw]] = []  # (row index, time from the first row, the row)
    integers = True
    skipped = 0
    origin = previous = None
    # Mooncake's unit is known only once every timestamp has been seen: keep the raw times, cut at the end.
    for index, (raw, integer) in enumerate(raws):
        where = f"{path}: line {raw.line}"
        if previous is not None and raw.time < previous:
            raise TraceError(f"{where}: its time {raw.time:g} is before the previous row's {previous:g} "
                             "(a trace's rows come in time order)")
        previous = raw.time
        origin = raw.time if origin is None else origin
        integers = integers and integer
        if index >= max_rows:  # skipped rows count too: reading is what this bounds
            raise TraceError(f"{path}: more than {max_rows} rows, the most one replay reads")
        if raw.output_tokens == 0:
            skipped += 1
            continue
        kept.append((index, raw.time - origin, raw))
    scale = 1e-3 if fmt == MOONCAKE and integers else 1.0
    rows = tuple(TraceRow(index, (time * scale - window.start_s) / speedup, raw.input_tokens,
                          raw.output_tokens, raw.hash_ids)
                 for index, time, raw in kept if window.start_s <= time * scale < window.end_s)
    if not rows:
        raise TraceError(f"{path}: no row to replay" + ("" if window == Window() else " in the window"))
    return Trace(fmt, rows, skipped)
