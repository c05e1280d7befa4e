"""Read one run's files (a Locust --csv prefix) into RunData; every bad input is one clear InputError."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pandas as pd

from locust_spec.core import runfiles
from locust_spec.core.design import Design
from locust_spec.core.level import parse_key
from locust_spec.core.runfiles import REQUESTS, RunFiles
from locust_spec.metrics import counters

from . import provenance
from .blocks import interrupted
from .model import ClientLag, Level, Rate

REQUESTS_COLUMNS = runfiles.REQUIRED_COLUMNS
# Only what the analysis reads, with explicit dtypes: a million rows stay well under a gigabyte.
NUMERIC = {
    "start_unix_s": "float64", "level_users": "float64", "output_tokens": "float64", "chunks": "float64",
    "ttft_ms": "float64", "tpot_ms": "float64", "e2e_ms": "float64", "itl_p50_ms": "float64",
    "chunk_gap_p50_ms": "float64", "spec_accepted_tokens": "float64", "spec_draft_tokens": "float64",
    "warmup": "float64", "level_rate": "float64", "lateness_ms": "float64",
}
# prompt_id stays with the requests: acceptance's interval resamples prompts (levels.acceptance_ci).
TEXT = {"prompt_class": "category", "prompt_id": "category", "error": "category"}
# The answer's fingerprint (added columns: runs without them have no answers to compare).
ANSWER_TEXT = {"output_hash": "category", "output_marks": "category", "output_hash_ws": "category"}
# What a value can be in a run; outside, it is no measurement (a corrupted or hand-edited file) and would
# move the verdict silently: an `inf` start time empties a level, a negative token count turns a rate.
_MS = (0.0, 1e9)  # 11.6 days
LIMITS = {
    "start_unix_s": (0.0, 1e10), "level_users": (0.0, 1e7), "output_tokens": (0.0, 1e9), "chunks": (0.0, 1e9),
    "ttft_ms": _MS, "tpot_ms": _MS, "e2e_ms": _MS, "itl_p50_ms": _MS, "chunk_gap_p50_ms": _MS,
    "spec_accepted_tokens": (0.0, 1e9), "spec_draft_tokens": (0.0, 1e9), "warmup": (0.0, 1.0),
    "level_rate": (1e-9, 1e7), "lateness_ms": (-1e3, 1e9),  # a send a clock step early, at most
}
REQUIRED_VALUES = ("start_unix_s",)
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
    client_lag: dict[Level, ClientLag] = field(default_factory=dict)
    design: Design | None = None
    """How the run shared time with its other arms (PREFIX_design.json); None: sequential."""
    models: tuple[str, ...] | None = None
    """The models under test, whose server counters are counted (None: the run does not say)."""
    answers: pd.DataFrame | None = None
    """Measured ok requests' answers: level_users, prompt, answer (the whitespace-normalised hash where
    recorded, else output_hash), output_hash, output_marks (answers.py)."""
    provenance: provenance.Provenance | None = None
    """What the run measured (PREFIX_run.json); unknown for runs written before it."""
    arrivals: dict[Rate, dict] = field(default_factory=dict)
    """The summary's account of each rate level (open loop): arrivals due, missed, achieved rate."""

    @property
    def rate_run(self) -> bool:
        """Whether the run's levels are arrival rates (open loop) rather than user counts."""
        return "level_rate" in self.requests and bool(self.requests["level_rate"].notna().any())


@dataclass(frozen=True)
class LostWorker:
    """A worker lost mid-run, as the summary's `lost_workers` records it (the fields spec-verdict needs)."""

    worker: str
    last_seen_unix_s: float
    detected_unix_s: float


@dataclass(frozen=True)
class Summary:
    """What spec-verdict reads of PREFIX_summary.json (empty when there is none)."""

    warnings: tuple[str, ...] = ()
    crosscheck: tuple[str, ...] = ()
    """The cross-checks that disagreed."""
    client_lag: dict[Level, ClientLag] = field(default_factory=dict)
    rows: int | None = None
    """The request rows the run counted (`client.requests`, written after the rows closed)."""
    models: tuple[str, ...] | None = None
    lost_workers: tuple[LostWorker, ...] = ()
    arrivals: dict[Rate, dict] = field(default_factory=dict)


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


def _check_known(path: Path, header: list[str]) -> None:
    """The contract: a reader rejects a header it does not know (a newer writer's, or an edited file)."""
    unknown = [c for c in header if c not in runfiles.COLUMNS]
    if unknown:
        raise InputError(f"{path}: unknown column {unknown[0][:40]} (this spec-verdict reads "
                         f"{runfiles.COLUMNS[0]}..{runfiles.COLUMNS[-1]}; a newer locust-spec wrote it?)")
    repeated = [c for c in header if header.count(c) > 1]
    if repeated:
        raise InputError(f"{path}: column {repeated[0]} appears {header.count(repeated[0])} times")


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
    _check_known(path, header)
    _check_complete(path, header)
    numeric = {c: t for c, t in NUMERIC.items() if c in header}
    text = {**TEXT, **{c: t for c, t in ANSWER_TEXT.items() if c in header}}
    try:
        frame = pd.read_csv(path, usecols=[*numeric, *text], dtype={**numeric, **text}, encoding="utf-8")
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
    _check_level(path, frame)
    _check_ranges(path, frame)
    if "warmup" not in frame:
        frame["warmup"] = 0.0
    return frame


def _check_level(path: Path, frame: pd.DataFrame) -> None:
    """Every row has its level, a user count or (open loop) a rate, and a run holds one kind of level."""
    rate = frame["level_rate"].notna() if "level_rate" in frame else pd.Series(False, index=frame.index)
    users = frame["level_users"].notna()
    missing = ~(rate | users)
    if missing.any():
        raise InputError(f"{path}: row {int(missing.idxmax()) + 1} has no level_users (nor level_rate)")
    if rate.any() and users.any():
        raise InputError(f"{path}: mixes users levels and rate levels (row {int(rate.idxmax()) + 1} has a "
                         f"rate, row {int(users.idxmax()) + 1} users); judge each kind in a run of its own")


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


def _read_json(path: Path, schemas: tuple[int, ...] = (1,)) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (truncated?): {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    # JSON true is no schema, though True == 1
    if type(data.get("schema")) is not int or data["schema"] not in schemas:
        raise InputError(f"{path}: unknown schema {str(data.get('schema'))[:20]} (this spec-verdict reads "
                         f"schema {' or '.join(map(str, schemas))})")
    return data


RUN_MAX_BYTES = 1024 * 1024
"""A run's record is a few kB; a larger file is not one."""


def read_provenance(path: Path, prefix: Path) -> provenance.Provenance:
    """What the run measured; unknown (no file) for runs written before PREFIX_run.json existed."""
    if not path.is_file():
        return provenance.Provenance(str(prefix), {})
    if path.stat().st_size > RUN_MAX_BYTES:
        raise InputError(f"{path}: {path.stat().st_size} bytes, not a run record (at most {RUN_MAX_BYTES})")
    return provenance.Provenance(str(prefix), _read_json(path, runfiles.RUN_SCHEMAS))


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


def _level(text: str) -> Level:
    """A per-level table's key: users (`16`) or a rate (`4/s`); ValueError for anything else."""
    key = parse_key(text)
    return Rate(float(key[: -len("/s")])) if isinstance(key, str) else key


def read_client_lag(path: Path, data: dict) -> dict[Level, ClientLag]:
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
        try:
            level = _level(users) if users.isascii() else None
        except ValueError:
            level = None
        if level is None or level < 0:
            raise InputError(f"{where} has a level {users[:20]!r} that is not a user count nor a rate")
        if not isinstance(lag, dict):
            raise InputError(f"{where}[{users}] is not an object")
        for key, valid, kind in LAG_FIELDS:
            if not valid(lag.get(key)):
                raise InputError(f"{where}[{users}].{key} is not {kind}: {str(lag.get(key))[:20]!r}")
        if lag["late_share"] > 1:
            raise InputError(f"{where}[{users}].late_share is {lag['late_share']!r}, above 1")
        out[level] = ClientLag(lag["samples"], lag["late_samples"], float(lag["late_share"]),
                               float(lag["max_lag_ms"]))
    return out


ARRIVAL_FIELDS = (("scheduled", _is_count, "a count"), ("missed", _is_count, "a count"),
                  ("achieved_rate", _is_number, "a number"))


def read_arrivals(path: Path, data: dict) -> dict[Rate, dict]:
    """`arrivals`: per rate level, the ledger's account (scheduled, missed, achieved rate); {} if absent."""
    found = data.get("arrivals")
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise InputError(f"{path}: 'arrivals' is not an object of rate levels")
    out = {}
    for key, entry in found.items():
        try:
            level = _level(key)
        except ValueError:
            level = None
        if not isinstance(level, Rate) or not isinstance(entry, dict):
            raise InputError(f"{path}: 'arrivals' has a level {str(key)[:20]!r} that is not a rate (4/s) "
                             "with an object")
        for name, valid, kind in ARRIVAL_FIELDS:
            if not valid(entry.get(name)):
                raise InputError(f"{path}: 'arrivals'[{key}].{name} is not {kind}: "
                                 f"{str(entry.get(name))[:20]!r}")
        out[level] = entry
    return out


def _strings(path: Path, data: dict, key: str, nullable: bool = False) -> tuple[str, ...] | None:
    """A list of strings under `key`; None when absent (or null, where the contract allows it)."""
    if key not in data or (nullable and data[key] is None):
        return None
    value = data[key]
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise InputError(f"{path}: '{key}' is not a list of strings")
    return tuple(value)


def read_summary(path: Path) -> Summary:
    """The run's warnings, those of its client-vs-server cross-checks that disagreed, the load generator's
    lag per level, the rows it counted and the models under test."""
    if not path.is_file():
        return Summary()
    data = _read_json(path, runfiles.SUMMARY_SCHEMAS)
    checks = data.get("crosscheck") or {}
    if not isinstance(checks, dict) or not all(isinstance(c, dict) for c in checks.values()):
        raise InputError(f"{path}: 'crosscheck' is not an object of checks")
    disagreements = tuple(str(c["warning"]) for c in checks.values() if c.get("warning"))
    client = data.get("client")
    rows = _count(f"{path}: client.requests", client.get("requests")) if isinstance(client, dict) else None
    return Summary(_strings(path, data, "warnings") or (), disagreements, read_client_lag(path, data), rows,
                   _strings(path, data, "models", nullable=True) or None, read_lost_workers(path, data),
                   read_arrivals(path, data))


def read_lost_workers(path: Path, data: dict) -> tuple[LostWorker, ...]:
    """`lost_workers` (schema 2): who was lost, last heard when, found lost when."""
    found = data.get("lost_workers") or []
    if not isinstance(found, list) or not all(isinstance(w, dict) for w in found):
        raise InputError(f"{path}: 'lost_workers' is not a list of objects")
    out = []
    for i, lost in enumerate(found):
        times = [lost.get(k) for k in ("last_seen_unix_s", "detected_unix_s")]
        if not all(_is_number(t) and t <= LIMITS["start_unix_s"][1] for t in times):
            raise InputError(f"{path}: lost_workers[{i}] has no valid last_seen_unix_s and detected_unix_s")
        out.append(LostWorker(str(lost.get("worker"))[:80], float(times[0]), float(times[1])))
    return tuple(out)


def leave_out_lost(path: Path, frame: pd.DataFrame,
                   lost: Sequence[LostWorker]) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The rows measured short of users left out: a lost worker's users were gone from its last heartbeat on,
    in the level then and in any level that started before it was found lost (Locust handed users out to it
    until then); a level that started after it had all its users again."""
    notes = []
    rates = "level_rate" in frame and bool(frame["level_rate"].notna().any())
    column, unit = ("level_rate", "req/s") if rates else ("level_users", "users")
    for lw in lost:
        first = frame.groupby(column, observed=True)["start_unix_s"].min()
        short = first.index[first < lw.detected_unix_s]
        drop = frame[column].isin(short) & (frame["start_unix_s"] >= lw.last_seen_unix_s)
        if not drop.any():
            continue
        levels = ", ".join(f"{u:g}" for u in sorted(frame.loc[drop, column].unique()))
        when = time.strftime("%H:%M:%S", time.gmtime(lw.last_seen_unix_s))
        notes.append(f"worker {lw.worker} was lost at {when} UTC: {int(drop.sum())} rows at {levels} {unit} "
                     "from then on are left out (the level ran short of its users)")
        frame = frame[~drop]
    if frame.empty:
        raise InputError(f"{path}: every row was measured after a worker was lost (summary lost_workers)")
    return frame, tuple(notes)


def cut_off_at_stop(frame: pd.DataFrame) -> tuple[str, ...]:
    """A line naming the requests the run's stop cut off (`interrupted`): every level's statistics leave
    them out, which is right for a request that just started but hides one the server stalled on (after a
    30 s stall the verdict had not a word of it). Said with how long the longest had waited, and whether
    that is longer than any request that finished."""
    cut = interrupted(frame)
    if not cut.any():
        return ()
    line = (f"{int(cut.sum())} request(s) still in flight when the run stopped (interrupted) are left out of "
            "the statistics")
    waited = frame.loc[cut, "e2e_ms"].max()
    if pd.isna(waited):
        return (line,)
    line += f"; the longest had waited {waited / 1000:.1f} s"
    finished = frame.loc[frame["error"].isna().to_numpy() & ~cut, "e2e_ms"].max()
    if pd.isna(finished):
        line += ", and no request finished: a stall no percentile shows"
    elif waited > finished:
        line += f", longer than any that finished ({finished / 1000:.1f} s): a stall no percentile shows"
    return (line,)


def _count(where: str, value: object) -> int | None:
    if value is None:
        return None
    if not _is_count(value):
        raise InputError(f"{where} is not a count: {str(value)[:20]!r}")
    return value


def check_row_counts(files: RunFiles, frame: pd.DataFrame, latency: dict | None,
                     summary_rows: int | None) -> None:
    """A requests CSV cut exactly at a line end reads as a shorter run: the counts the run wrote beside its
    rows (latency.json's successful requests, the summary's rows) say it is not. Fewer rows than either is
    an InputError; more are not (latency.json is rewritten every 30 s: a run killed hard has an older one)."""
    if summary_rows is not None and len(frame) < summary_rows:
        raise InputError(f"{files.requests}: truncated: {len(frame)} request rows, but "
                         f"{files.summary.name} counts {summary_rows}")
    e2e = ((latency or {}).get("metrics") or {}).get("e2e") or {}
    counted = _count(f"{files.latency}: metrics.e2e.all.count", (e2e.get("all") or {}).get("count"))
    if counted is None:
        return
    ok = int((frame["error"].isna() & frame["e2e_ms"].notna()).sum())
    if ok < counted:
        raise InputError(f"{files.requests}: truncated: {ok} successful request rows, but "
                         f"{files.latency.name} counts {counted}")


def split_answers(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Take the answer columns out of the requests frame: (the requests, the measured ok requests' answers
    keyed by prompt, class and id); None when the run recorded none."""
    if "output_hash" not in frame:
        return frame.drop(columns=[c for c in ANSWER_TEXT if c in frame]), None
    kept = frame["output_hash"].notna() & frame["error"].isna() & (frame["warmup"] != 1)
    answers = None
    if kept.any():
        rows = frame[kept]
        prompt = rows["prompt_class"].astype(str) + "\x1f" + rows["prompt_id"].astype(str)
        exact = rows["output_hash"].astype(str)
        normalised = (rows["output_hash_ws"].astype(object).where(rows["output_hash_ws"].notna(), exact)
                      if "output_hash_ws" in rows else exact)
        answers = pd.DataFrame({"level_users": rows["level_users"].to_numpy(),
                                "prompt": prompt.astype("category").to_numpy(),
                                "answer": normalised.astype(str).to_numpy(),
                                "output_hash": exact.to_numpy(),
                                "output_marks": rows["output_marks"].astype(object).fillna("").to_numpy()})
    return frame.drop(columns=[c for c in ANSWER_TEXT if c in frame]), answers


SELF_CHECK = "self_check.json"
"""spec-ab's baseline self-check (locust_spec/ab/self_check.py), beside the baseline's runs."""
SELF_CHECK_MAX_BYTES = 8 * 1024 * 1024
_HASH_KEYS = ("prompt_class", "prompt_id", "output_hash", "output_marks", "output_hash_ws")


def read_self_check(folder: Path) -> pd.DataFrame | None:
    """The baseline's answers given twice on purpose (prompt, answer, output_hash, output_marks); None
    when the folder holds no self-check (runs not made by spec-ab, or with --self-check 0)."""
    path = folder / SELF_CHECK
    if not path.is_file():
        return None
    if path.stat().st_size > SELF_CHECK_MAX_BYTES:
        raise InputError(f"{path}: larger than {SELF_CHECK_MAX_BYTES // 2**20} MiB: not a self-check")
    answers = _read_json(path).get("answers")
    if not isinstance(answers, list) or not all(
            isinstance(a, dict) and all(isinstance(a.get(k), str) for k in _HASH_KEYS) for a in answers):
        raise InputError(f"{path}: answers must be a list of objects with {', '.join(_HASH_KEYS)} (text)")
    if not answers:
        return None
    return pd.DataFrame({"prompt": [f"{a['prompt_class']}\x1f{a['prompt_id']}" for a in answers],
                         "answer": [a["output_hash_ws"] for a in answers],
                         "output_hash": [a["output_hash"] for a in answers],
                         "output_marks": [a["output_marks"] for a in answers]})


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
    summary = read_summary(files.summary)
    requests, latency = read_requests(files.requests), read_latency(files.latency)
    check_row_counts(files, requests, latency, summary.rows)
    requests, left_out = leave_out_lost(files.requests, requests, summary.lost_workers)
    requests, answers = split_answers(requests)
    return RunData(
        prefix=prefix,
        requests=requests,
        answers=answers,
        provenance=read_provenance(files.run, prefix),
        latency=latency,
        snapshots=read_server_metrics(files.server_metrics),
        warnings=summary.warnings + left_out + cut_off_at_stop(requests),
        crosscheck=summary.crosscheck,
        client_lag=summary.client_lag,
        design=read_design(files.design),
        models=summary.models,
        arrivals=summary.arrivals,
    )
