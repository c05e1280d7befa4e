"""SIGINT or SIGTERM in the middle of a headless run: the files are complete and well-formed, every request
the server finished is a row, every request in flight is an `interrupted` row, latency.json is written."""

from __future__ import annotations

import csv
import json
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from locust_spec.recording.records import COLUMNS
from tests.e2e.chat_runs import assert_reconciles, error_kind, finish, start_locust, start_sims, stop_all
from tests.support import Server

MAX_TOKENS = 32
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Iterator[dict[str, Server]]:
    tmp = tmp_path_factory.mktemp("sims")
    servers = start_sims(tmp, {name: ("--time-scale", "0.1", "--send-log", str(tmp / f"{name}.csv"))
                               for name in SIGNALS})
    yield servers
    stop_all(servers.values())


def finished_by_server(send_log: Path) -> int:
    """Requests whose every token the server sent (with --ignore-eos, all MAX_TOKENS of them)."""
    tokens: dict[str, int] = defaultdict(int)
    with send_log.open() as f:
        for row in csv.DictReader(f):
            tokens[row["request_id"]] += max(0, int(row["tokens"]))  # -1 marks arrival
    return sum(1 for n in tokens.values() if n == MAX_TOKENS)


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_a_signal_midway_loses_nothing_measured(sims, tmp_path, name):
    sim = sims[name]
    proc = start_locust(tmp_path, sim.url, "--ignore-eos", "--max-tokens", str(MAX_TOKENS), users=8)
    requests_csv = tmp_path / "run_requests.csv"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not requests_csv.exists() or requests_csv.stat().st_size < 2000):
        time.sleep(0.2)  # until the periodic flush has written some rows: the run is well under way
    proc.send_signal(SIGNALS[name])
    run = finish(proc, tmp_path, timeout=30)
    rows = assert_reconciles(run)  # also: Locust's own counts include every row
    text = requests_csv.read_text()
    assert text.endswith("\n") and text.splitlines()[0] == ",".join(COLUMNS)
    assert all(len(r) == len(COLUMNS) for r in csv.reader(text.splitlines()))
    ok = [r for r in rows if not r["error"]]
    interrupted = [r for r in rows if error_kind(r) == "interrupted"]
    assert len(ok) + len(interrupted) == len(rows)
    assert ok  # (a user between two requests when stopped has nothing in flight: no `interrupted` row)
    assert all(int(r["output_tokens"]) == MAX_TOKENS for r in ok)
    # everything the server finished was read and recorded, or was still arriving when the signal came
    sim.stop()  # flushes the send log
    finished = finished_by_server(Path(sim.args[sim.args.index("--send-log") + 1]))
    assert len(ok) <= finished <= len(ok) + len(interrupted)
    latency = json.loads(Path(f"{run.prefix}_latency.json").read_text())
    assert latency["metrics"]["e2e"]["all"]["count"] == len(ok)
