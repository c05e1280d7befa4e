"""PREFIX_summary.json: how far to trust a run (cross-check, load-generator health, concurrency delivered).

Schema 2 (see docs/contracts.md; schema 1 is the same without `models`, `lost_workers` and the server
window's `models`, `other_models`, `anomalies`):
```
{"schema": 2,
 "models": ["<the model under test>", ...] | null,
 "warnings": ["one line each", ...],
 "crosscheck": {"<check>": {"name", "client", "server", "allowed", "warning"}, ...},
 "client": {<ClientTotals over PREFIX_requests.csv>, "mean_tpot_ms", "acceptance_rate",
            "generators": {"processes", "requests", "failures", "max_loop_lag_ms", "loop_lag_samples",
                           "loop_lag_late_samples", "loop_lag_warnings", "loop_late_share",
                           "by_level": {"<users>": {"samples", "late_samples", "late_share", "max_lag_ms"}},
                           "budget_by_level": {"<users>": {"chunks", "wall_s", "chunks_per_s", "cpu_share",
                                                           "cpu_headroom", "cpu_us_per_chunk", "loaded_s",
                                                           "loaded_cpu_share",
                                                           "chunks_all_processes", "holds", "held_s",
                                                           "merged_chunks",
                                                           "merged_chunks_all_processes"}},
                           "by_process": {"<id>": {...}}}},
 "server": {<SpecWindow over the run>} | null,
 "concurrency": [{"users", "max_running", "max_waiting", "delivered"}, ...],
 "lost_workers": [{"worker", "last_seen_unix_s", "detected_unix_s", "level_users", "users", "rows_received",
                   "requests_reported", "rows_lost"}, ...],
 "arrivals": {"<rate>/s": {...}}}   // rate levels only (open loop): recording/ledger.py, docs/contracts.md
```
Written when the process exits (Locust's `quit` event), after the request rows are closed: on the master in
a distributed run, after the workers' last batches.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import orjson

from locust_spec.core.level import LevelKey, describe, in_level_order, parse_key
from locust_spec.core.runfiles import SUMMARY_SCHEMA
from locust_spec.metrics import crosscheck
from locust_spec.metrics.counters import SpecWindow
from locust_spec.recording import budget
from locust_spec.recording.writes import write_whole

log = logging.getLogger(__name__)

# Peak running + waiting below this share of the users means the client under-delivered: the peak is taken
# at scrape instants, so it can only be higher than the typical concurrency, never lower.
DELIVERED_MIN = 0.9
# A level's first scrape is taken as it starts (users still ramping) and its last may be the stop: judge a
# level only with at least one scrape in between.
MIN_SCRAPES = 3
# A process busier than this was near its ceiling: arrivals queue behind its own work and are stamped late.
BUSY_SHARE = 0.8
MERGED_SHARE = 0.01
"""Past this share of a level's token chunks arriving in the read of the one before them, a warning: a
server writes each step's chunk on its own, so a client reading on time sees next to none (a stall of the
loop merges a few; 1% of a level is a sustained loss of per-chunk timing). A stream's reads wait up to
client/mux.py's GATHER_S (1 ms) for its other ready sockets, so chunks a server sends closer than that
are read together too: a server catching up on late steps does (the spec-sim demo on a busy 2-core machine
merged 1-3%)."""
_COUNTS = ("requests", "failures", "loop_lag_samples", "loop_lag_late_samples", "loop_lag_warnings")


def combine_clients(parts: Mapping[str, dict]) -> dict:
    """One view of every load-generating process's `client_summary()`: counts add up, lag is the worst."""
    out: dict = {"processes": len(parts)}
    for key in _COUNTS:
        out[key] = sum(int(p.get(key) or 0) for p in parts.values())
    lags = (float(p.get("max_loop_lag_ms") or 0.0) for p in parts.values())
    out["max_loop_lag_ms"] = max(lags, default=0.0)
    shares = [float(p["loop_late_share"]) for p in parts.values() if p.get("loop_late_share") is not None]
    if shares:
        out["loop_late_share"] = max(shares)
    out["by_level"] = combine_levels([p.get("by_level") or {} for p in parts.values()])
    out["budget_by_level"] = budget.combine([p.get("budget_by_level") or {} for p in parts.values()])
    out["by_process"] = {name: dict(p) for name, p in sorted(parts.items())}
    return out


def combine_levels(parts: Sequence[Mapping[str, dict]]) -> dict:
    """Per ladder level over every process: samples add up; lag and late share are the worst process's,
    since the requests that process measured carry its lag whatever the others did."""
    out: dict[str, dict] = {}
    for by_level in parts:
        for users, lag in by_level.items():
            seen = out.setdefault(str(users), {"samples": 0, "late_samples": 0, "late_share": 0.0,
                                               "max_lag_ms": 0.0})
            seen["samples"] += int(lag.get("samples") or 0)
            seen["late_samples"] += int(lag.get("late_samples") or 0)
            seen["late_share"] = max(seen["late_share"], float(lag.get("late_share") or 0.0))
            seen["max_lag_ms"] = max(seen["max_lag_ms"], float(lag.get("max_lag_ms") or 0.0))
    return dict(in_level_order(out))


def concurrency(levels: Sequence[tuple[LevelKey, SpecWindow]],
                foreign: bool = False) -> tuple[list[dict], list[str]]:
    """Per ladder level: the users asked for vs the server's peak running (+ waiting) requests (a rate
    level asks for no concurrency: its peak is shown, and what it delivered is in `arrivals`).

    `foreign`: the counters are another server's (see crosscheck.foreign), so a low peak blames the metrics
    URL, not the load generator."""
    entries, warnings = [], []
    for users, window in levels:
        running, waiting = window.max_requests_running, window.max_requests_waiting
        if isinstance(users, str):
            entries.append({"rate": users, "max_running": running, "max_waiting": waiting, "delivered": None})
            continue
        delivered = None
        if running is not None and users > 0:
            delivered = round((running + (waiting or 0.0)) / users, 4)
        entries.append({"users": users, "max_running": running, "max_waiting": waiting,
                        "delivered": delivered})
        if delivered is not None and window.scrapes >= MIN_SCRAPES and delivered < DELIVERED_MIN:
            blame = (f"the scraped server is not the one under load: check the metrics URL "
                     f"({crosscheck.METRICS_OPTIONS})" if foreign else
                     "the load generator under-delivered, so this level measured a lighter load than asked")
            warnings.append(
                f"concurrency at {users} users: the server had at most {running:g} requests running and "
                f"{waiting or 0:g} waiting ({delivered:.0%} of the users); {blame}"
            )
    return entries, warnings


def generator_warnings(generators: dict, rows: int | None) -> list[str]:
    """Load-generator health: event-loop lag, and requests measured that never became a row."""
    warnings = []
    # The processes' lag monitors judge sustained lag (a share of the run's time, see lag.py); a single
    # spike, which every run on a busy machine has, is in max_loop_lag_ms but is not worth a warning.
    if generators.get("loop_lag_warnings"):
        lag = generators.get("max_loop_lag_ms") or 0.0
        share = generators.get("loop_late_share")
        behind = f", behind {share:.1%} of the time" if share is not None else ""
        warnings.append(
            f"load generator event loop lagged up to {lag:.1f} ms "
            f"({generators.get('loop_lag_late_samples', 0)} late samples{behind}): timestamps taken then are "
            "late by as much; use more processes or fewer users each"
        )
    for users, spent in (generators.get("budget_by_level") or {}).items():
        # Under spec-ab's interleaved design a process idles through the other arm's blocks: its share over
        # the level's whole time is about half of what it used while it was loaded, which is what counts.
        overall = float(spent.get("cpu_share") or 0.0)
        busy = max(overall, float(spent.get("loaded_cpu_share") or 0.0))
        if busy > BUSY_SHARE:
            loaded = " while loaded" if busy > overall else ""
            warnings.append(
                f"load generator at {users} users: a process used {busy:.0%} of a core{loaded} "
                f"handling {spent.get('chunks_per_s', 0):,.0f} chunks/s, so it was a bottleneck there; use "
                "more processes (spec-ab --processes auto, locust --processes N) or fewer users each"
                + budget.processes_advice(spent))
        merged = budget.merged_share(spent)
        if merged is not None and merged > MERGED_SHARE:
            warnings.append(
                f"at {describe(parse_key(str(users)))} {merged:.1%} of the token chunks arrived in the same "
                "read as the one before them: their ITL reads 0 and the gap before counts both; either the "
                "load generator read late (see its share of a core and loop lag) or they came within about "
                "a millisecond of each other (a server catching up on late steps, a proxy's buffering)")
        if spent.get("held_s"):
            share = budget.held_share(int(users), spent) if str(users).isdigit() else None
            of_time = f" ({share:.1%} of the level's user time)" if share is not None else ""
            warnings.append(
                f"at {describe(parse_key(str(users)))} the server refused requests (429/503, an answer any "
                f"request would get, or connections) and its users waited {float(spent['held_s']):.1f} s in "
                f"all before sending again{of_time}: the server had fewer users than that while they waited")
    measured = generators.get("requests") or 0
    if rows is not None and measured > rows:
        warnings.append(f"{measured - rows} of {measured} requests measured by the load generators have no "
                        "row in the requests CSV (lost on the way to the master?)")
    return warnings


def models_under_test(clients: Mapping[str, dict]) -> list[str] | None:
    """The models the load generators sent their requests for (their client summaries' `models`); None
    when none says (a summary from before the load started, or an older worker)."""
    models = sorted({str(m) for part in clients.values() for m in part.get("models") or ()})
    return models or None


def build_summary(totals: crosscheck.ClientTotals | None, run: SpecWindow | None,
                  levels: Sequence[tuple[LevelKey, SpecWindow]], clients: Mapping[str, dict],
                  other_warnings: Sequence[str] = (), models: Sequence[str] | None = None,
                  lost_workers: Sequence[dict] = (),
                  arrivals: tuple[dict[str, dict], list[str]] = ({}, [])) -> dict:
    """The summary document; `other_warnings` (lost workers, scrape failures, lost batches) come first.
    `models` are the models under test, whose counters the windows count; `lost_workers` the workers lost
    mid-run (wiring/distributed.py's LostWorker.as_dict); `arrivals` the arrival ledger's account of the
    rate levels (recording/ledger.py), with its warnings."""
    # what the server may have finished that no row shows: a lost worker's rows, and its requests in flight
    unseen = sum(int(lw.get("rows_lost") or 0) + int(lw.get("users") or 0) for lw in lost_workers)
    checks = crosscheck.cross_check(totals, run, unseen) if totals is not None and run is not None else []
    parts = crosscheck.summary(totals, checks) if totals is not None else {"client": {}, "crosscheck": {}}
    generators = combine_clients(clients)
    conc, conc_warnings = concurrency(levels, totals is not None and run is not None
                                      and crosscheck.foreign(totals, run))
    warnings = [
        " ".join(line.split())  # one line each, whatever an exception's text held
        for line in (
            *other_warnings,
            *crosscheck.warnings(checks),
            *conc_warnings,
            *arrivals[1],
            *generator_warnings(generators, totals.requests if totals is not None else None),
        )
    ]
    return {
        "schema": SUMMARY_SCHEMA,
        "models": list(models) if models else None,
        "warnings": warnings,
        "crosscheck": parts["crosscheck"],
        "client": {**parts["client"], "generators": generators},
        "server": asdict(run) if run is not None else None,
        "concurrency": conc,
        "lost_workers": list(lost_workers),
        **({"arrivals": arrivals[0]} if arrivals[0] else {}),
    }


def write(path: Path, summary: dict) -> None:
    """Atomically, so a reader never sees half a file (WriteFailed: nothing is left behind)."""
    write_whole(path, orjson.dumps(summary, option=orjson.OPT_INDENT_2))
