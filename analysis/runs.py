"""Read one run's files (a Locust --csv prefix) into RunData; every bad input is one clear InputError."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pandas as pd

from locust_spec.core import runfiles
from locust_spec.core.design import Design
from locust_spec.core.runfiles import REQUESTS, RunFiles
from locust_spec.metrics import counters

from .model import ClientLag

REQUESTS_COLUMNS = runfiles.REQUIRED_COLUMNS
# Only what the analysis reads, with explicit dtypes: a million rows stay well under a gigabyte.
NUMERIC = {
    "start_unix_s": "float64", "level_users": "float64", "output_tokens": "float64", "chunks": "float64",
    "ttft_ms": "float64", "tpot_ms": "float64", "e2e_ms": "float64", "itl_p50_ms": "float64",
    "chunk_gap_p50_ms": "float64", "spec_accepted_tokens": "float64", "spec_draft_tokens": "float64",
    "warmup": "float64",
}
TEXT = {"prompt_class": "category", "prompt_id": "category", "error": "category"}
# What a value can be in a run; outside, it is no measurement (a corrupted or hand-edited file) and would
# move the verdict silently: an `inf` start time empties a level, a negative token count turns a rate.
_MS = (0.0, 1e9)  # 11.6 days
LIMITS = {
    "start_unix_s": (0.0, 1e10), "level_users": (0.0, 1e7), "output_tokens": (0.0, 1e9), "chunks": (0.0, 1e9),
    "ttft_ms": _MS, "tpot_ms": _MS, "e2e_ms": _MS, "itl_p50_ms": _MS, "chunk_gap_p50_ms": _MS,
    "spec_accepted_tokens": (0.0, 1e9), "spec_draft_tokens": (0.0, 1e9), "warmup": (0.0, 1.0),
}
REQUIRED_VALUES = ("start_unix_s", "level_users")
SERVER_COLUMNS = ("timestamp_unix_s", "url", "metric", "labels", "value")


class InputError(Exception):
    """A bad input file or argument; the message is the one line the user sees."""


@dataclass(frozen=True)
class RunData:
    prefix: Path
    requests: pd.DataFrame
    latency: dict | None
    snapshots: list | None
    warnings: tuple[str, ...]
    crosscheck: tuple[str, ...] = ()
    client_lag: dict[int, ClientLag] = field(default_factory=dict)
    design: Design | None = None
    """How the run shared time with its other arms (PREFIX_design.json); None: sequential."""


def discover(path: Path) -> list[Path]:
    """The run prefixes an argument names: a prefix, a PREFIX_requests.csv, or a folder of runs."""
    if path.is_dir():
        found = sorted(runfiles.prefix_of(p) for p in path.glob(f"*{REQUESTS}"))
        if not found:
            raise InputError(f"{path}: folder holds no run (no *{REQUESTS})")
        return found
    path = runfiles.prefix_of(path)
    if not RunFiles(str(path)).requests.is_file():
        raise InputError(f"{path}: no such run ({path}{REQUESTS} does not exist)")
    return [path]


def _check_complete(path: Path, header: list[str]) -> None:
    """A last line without newline and with fewer fields than the header means the file was cut off."""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - 65536))
        tail = fh.read()
    if tail.endswith(b"\n"):
        return
    last = tail.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
    fields = next(csv.reader([last]), [])
    if len(fields) < len(header):
        raise InputError(f"{path}: truncated: the last row has {len(fields)} of {len(header)} fields")


def _bad_numeric(path: Path, columns: list[str]) -> str:
    """Name the first numeric cell that is not a number (only on the error path)."""
    frame = pd.read_csv(path, usecols=columns, dtype=str, keep_default_na=False)
    for col in columns:
        values = frame[col]
        bad = values[(values != "") & pd.to_numeric(values, errors="coerce").isna()]
        if len(bad):
            return f"{path}: column {col} row {bad.index[0] + 1} is not a number: {bad.iloc[0][:40]!r}"
    return f"{path}: a numeric column holds text"


def read_requests(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"{path}: missing")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            header = next(csv.reader(io.StringIO(fh.readline())), [])
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV") from None
    missing = [c for c in REQUESTS_COLUMNS if c not in header]
    if len(missing) == len(REQUESTS_COLUMNS):
        raise InputError(f"{path}: not a locust-spec requests CSV (header: {','.join(header)[:80]})")
    if missing:
        raise InputError(f"{path}: wrong columns: missing {', '.join(missing)}")
    _check_complete(path, header)
    numeric = {c: t for c, t in NUMERIC.items() if c in header}
    try:
        frame = pd.read_csv(path, usecols=[*numeric, *TEXT], dtype={**numeric, **TEXT}, encoding="utf-8")
    except ValueError as exc:
        if "convert" in str(exc) or "could not" in str(exc):
            raise InputError(_bad_numeric(path, list(numeric))) from None
        raise InputError(f"{path}: unreadable CSV: {str(exc).splitlines()[0]}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable CSV: {str(exc).strip().splitlines()[-1]}") from None
    if frame.empty:
        raise InputError(f"{path}: no request rows")
    for col in REQUIRED_VALUES:
        empty = frame[col].isna()
        if empty.any():
            raise InputError(f"{path}: row {int(empty.idxmax()) + 1} has no {col}")
    _check_ranges(path, frame)
    if "warmup" not in frame:
        frame["warmup"] = 0.0
    return frame


def _check_ranges(path: Path, frame: pd.DataFrame) -> None:
    """InputError naming the first cell (column, data row) outside its LIMITS: inf, -1e308, -1 tokens."""
    for col, (low, high) in LIMITS.items():
        if col not in frame:
            continue
        values = frame[col]
        bad = values.notna() & ~values.between(low, high)
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise InputError(f"{path}: column {col} row {row + 1} is {values.iloc[row]:g}, "
                             f"outside {low:g}..{high:g}")


def _read_json(path: Path) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (truncated?): {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    if type(data.get("schema")) is not int or data["schema"] != 1:  # JSON true is no schema, though True == 1
        raise InputError(f"{path}: unknown schema {data.get('schema')!r} (this spec-verdict reads schema 1)")
    return data


def read_latency(path: Path) -> dict | None:
    if not path.is_file():
        return None
    data = _read_json(path)
    if data.get("unit", "ms") != "ms":
        raise InputError(f"{path}: unit {data.get('unit')!r}, expected 'ms'")
    for key in ("metrics", "levels"):
        if not isinstance(data.get(key, {}), dict):
            raise InputError(f"{path}: {key!r} is not an object")
    return data


def read_server_metrics(path: Path) -> list | None:
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None:
                raise InputError(f"{path}: empty file")
            missing = [c for c in SERVER_COLUMNS if c not in reader.fieldnames]
            if missing:
                raise InputError(f"{path}: not a server metrics CSV: missing {', '.join(missing)}")
            return counters.snapshots_from_rows(reader)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(f"{path}: bad server metrics row: {exc}") from None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


LAG_FIELDS = (("samples", _is_count, "a count"), ("late_samples", _is_count, "a count"),
              ("late_share", _is_number, "a number"), ("max_lag_ms", _is_number, "a number"))


def read_client_lag(path: Path, data: dict) -> dict[int, ClientLag]:
    """`client.generators.by_level`: per ladder level, how far behind the load generator was; {} if absent."""
    client = data.get("client") or {}
    generators = client.get("generators") if isinstance(client, dict) else None
    by_level = generators.get("by_level") if isinstance(generators, dict) else None
    if by_level is None:
        return {}
    where = f"{path}: 'client.generators.by_level'"
    if not isinstance(by_level, dict):
        raise InputError(f"{where} is not an object of levels")
    out = {}
    for users, lag in by_level.items():
        if not (users.isascii() and users.isdigit()):
            raise InputError(f"{where} has a level {users[:20]!r} that is not a user count")
        if not isinstance(lag, dict):
            raise InputError(f"{where}[{users}] is not an object")
        for key, valid, kind in LAG_FIELDS:
            if not valid(lag.get(key)):
                raise InputError(f"{where}[{users}].{key} is not {kind}: {str(lag.get(key))[:20]!r}")
        if lag["late_share"] > 1:
            raise InputError(f"{where}[{users}].late_share is {lag['late_share']!r}, above 1")
        out[int(users)] = ClientLag(lag["samples"], lag["late_samples"], float(lag["late_share"]),
                                    float(lag["max_lag_ms"]))
    return out


def read_summary(path: Path) -> tuple[tuple[str, ...], tuple[str, ...], dict[int, ClientLag]]:
    """The run's warnings, those of its client-vs-server cross-checks that disagreed, and the load
    generator's lag per level."""
    if not path.is_file():
        return (), (), {}
    data = _read_json(path)
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise InputError(f"{path}: 'warnings' is not a list of strings")
    checks = data.get("crosscheck") or {}
    if not isinstance(checks, dict) or not all(isinstance(c, dict) for c in checks.values()):
        raise InputError(f"{path}: 'crosscheck' is not an object of checks")
    disagreements = tuple(str(c["warning"]) for c in checks.values() if c.get("warning"))
    return tuple(warnings), disagreements, read_client_lag(path, data)


def read_design(path: Path) -> Design | None:
    """PREFIX_design.json (spec-ab writes it); None when absent: the run is read as sequential."""
    if not path.is_file():
        return None
    try:
        return Design.from_dict(orjson.loads(path.read_bytes()))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (truncated?): {exc}") from None
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None


def read_run(prefix: Path) -> RunData:
    files = RunFiles(str(prefix))
    warnings, crosscheck, client_lag = read_summary(files.summary)
    return RunData(
        prefix=prefix,
        requests=read_requests(files.requests),
        latency=read_latency(files.latency),
        snapshots=read_server_metrics(files.server_metrics),
        warnings=warnings,
        crosscheck=crosscheck,
        client_lag=client_lag,
        design=read_design(files.design),
    )
