"""The server is not there: down at start (a clear error, in bounded time), down mid-run (named failures,
then recovery when it is back; /metrics gaps and warnings, a flagged counter reset, no crash)."""

from __future__ import annotations

import csv
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from locust_spec.metrics.counters import snapshots_from_rows, spec_window
from tests.e2e.chat_runs import assert_reconciles, chat, error_kind, finish, start_locust
from tests.support import free_port, start_spec_sim

BOUND_S = 30  # a clear error comes in seconds; this only tells a hang from an answer


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A loopback port bound but not listening: connects are refused, and no other process can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def test_no_server_and_no_model_is_one_error_line_and_exit_2_without_a_hang(tmp_path, closed_url):
    url = closed_url
    started = time.monotonic()
    run = chat(tmp_path, url, seconds=0, timeout=BOUND_S)  # no run time: only the error can end it
    assert time.monotonic() - started < BOUND_S
    assert run.proc.returncode == 2
    errors = [line for line in run.proc.stderr.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1, errors
    assert f"cannot read the model from {url}/v1/models" in errors[0] and "Connection refused" in errors[0]
    assert "pass --model" not in errors[0], "naming the model does not make a dead server answer"


def test_no_server_with_a_model_is_named_connect_failures_until_the_end(tmp_path, closed_url):
    run = chat(tmp_path, closed_url, "--model", "sim-8b", users=2, seconds=3, timeout=BOUND_S)
    assert run.proc.returncode == 1
    rows = assert_reconciles(run)
    assert rows and all(r["error"] == "connect: Connection refused" for r in rows)
    assert len(rows) <= 2 * 12, "each user backs off after a refused connect instead of a busy loop"
    assert "StreamError('connect: Connection refused')" in run.output


def test_server_down_mid_run_fails_named_then_recovers_on_its_return(tmp_path):
    port = free_port()
    sim = start_spec_sim(tmp_path, "--time-scale", "0.1", port=port)
    proc = start_locust(tmp_path, sim.url, "--model", "sim-8b", users=4, seconds=10)
    try:
        time.sleep(3)
        down_at = time.time()
        sim.stop()
        time.sleep(1.5)
        sim = start_spec_sim(tmp_path, "--time-scale", "0.1", port=port)
        back_at = time.time()  # answering /health again
        run = finish(proc, tmp_path)
    finally:
        sim.stop()
        if proc.poll() is None:
            proc.kill()
    rows = assert_reconciles(run)
    before = [r for r in rows if float(r["start_unix_s"]) < down_at]
    during = [r for r in rows if down_at + 0.5 < float(r["start_unix_s"]) < back_at - 0.2]
    after = [r for r in rows if float(r["start_unix_s"]) > back_at + 0.2]
    assert any(not r["error"] for r in before)
    assert during and all(error_kind(r) in ("connect", "reset") for r in during), {r["error"] for r in during}
    # each row of a failed connect is stamped when it was tried, not with its user's last request
    assert all(float(r["start_unix_s"]) > down_at for r in rows if error_kind(r) == "connect")
    assert any(not r["error"] for r in after)
    assert all(not r["error"] or error_kind(r) == "interrupted" for r in after), {r["error"] for r in after}
    # /metrics went down too: a warning per failed scrape, a gap in the series, a counter reset flagged
    warnings = [line for line in run.proc.stderr.splitlines()
                if "/WARNING/locust_spec.recording.scraper:" in line]
    assert warnings and all("a gap in the server counters" in line for line in warnings)
    with Path(f"{run.prefix}_server_metrics.csv").open() as f:
        snapshots = snapshots_from_rows(list(csv.DictReader(f)))
    times = [s.timestamp_unix_s for s in snapshots]
    assert any(t < down_at for t in times) and any(t > back_at for t in times)
    assert not any(down_at + 0.5 < t < back_at - 0.2 for t in times)
    window = spec_window(snapshots, 0, 1e12)
    assert window.resets == 1 and any("reset 1 time" in note for note in window.notes)
    assert window.requests_success > 0
