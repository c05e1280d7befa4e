"""The arms' shared clock starts when every arm's Locust is up, not after a fixed lead sized for the slowest
start: each process says so with a file and waits for spec-ab's zero; spec-ab waits for all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from argparse import Namespace
from dataclasses import replace
from pathlib import Path

import pytest

from locust_spec.ab import cli as ab
from locust_spec.ab import sessions
from locust_spec.core.design import (
    CLOCK_DIR_ENV,
    CLOCK_FILE,
    INTERLEAVED,
    READY_FILE,
    READY_MARGIN_S,
    SEQUENTIAL,
    Design,
    parse_blocks,
)
from locust_spec.wiring import shared_clock


def _design(slot: int = 1, provisional: float | None = None, kind: str = INTERLEAVED) -> Design:
    """One arm's design as spec-ab hands it over: its clock still the provisional zero."""
    plan = ab.Ladder("1,4", "4s", "0.5s").design(kind, 2, "1s")
    if kind == SEQUENTIAL:
        return plan
    return plan.for_slot(slot, time.time() + 30 if provisional is None else provisional)


def _options(design: Design, worker: bool = False) -> Namespace:
    return Namespace(blocks=json.dumps(design.to_dict()), worker=worker)


def _write_later(path: Path, text: str, after_s: float) -> threading.Thread:
    def write() -> None:
        time.sleep(after_s)
        path.write_text(text)
    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_process_says_it_is_up_then_runs_on_the_zero_spec_ab_sets(tmp_path):
    design = _design(slot=1)
    options = _options(design)
    zero = time.time() + 0.5
    writer = _write_later(tmp_path / CLOCK_FILE, repr(zero), 0.2)
    shared_clock.take(options, {CLOCK_DIR_ENV: str(tmp_path)})
    writer.join()
    assert (tmp_path / READY_FILE.format(slot=1)).exists()
    assert parse_blocks(options.blocks) == replace(design, clock_unix_s=zero)  # only the zero changed


def test_without_an_answer_the_provisional_zero_stands_and_nothing_waits_past_it(tmp_path):
    provisional = time.time() + 0.3
    options = _options(_design(provisional=provisional))
    shared_clock.take(options, {CLOCK_DIR_ENV: str(tmp_path)})
    assert time.time() == pytest.approx(provisional, abs=0.2)
    assert parse_blocks(options.blocks).clock_unix_s == provisional


def test_a_garbled_or_late_zero_is_never_taken_past_the_provisional_one(tmp_path):
    provisional = time.time() + 0.3
    (tmp_path / CLOCK_FILE).write_text("not a number")
    options = _options(_design(provisional=provisional))
    shared_clock.take(options, {CLOCK_DIR_ENV: str(tmp_path)})
    assert parse_blocks(options.blocks).clock_unix_s == provisional
    (tmp_path / CLOCK_FILE).write_text(repr(provisional + 100))
    options = _options(_design(provisional=provisional + 1))
    shared_clock.take(options, {CLOCK_DIR_ENV: str(tmp_path)})
    assert parse_blocks(options.blocks).clock_unix_s == provisional + 1


@pytest.mark.parametrize("case", ["no variable", "worker", "sequential", "no design"])
def test_only_a_blocked_arm_started_by_spec_ab_waits(tmp_path, case):
    design = _design(kind=SEQUENTIAL if case == "sequential" else INTERLEAVED)
    options = _options(design, worker=case == "worker")
    if case == "no design":
        options.blocks = ""
    before = options.blocks
    environ = {} if case == "no variable" else {CLOCK_DIR_ENV: str(tmp_path)}
    started = time.monotonic()
    shared_clock.take(options, environ)
    assert time.monotonic() - started < 1 and options.blocks == before
    assert not list(tmp_path.iterdir())


def _session(tmp_path: Path, arms: int = 2) -> sessions.Session:
    runs = tuple(sessions.Run(f"arm{i}", 0, tmp_path / f"arm{i}" / "r0") for i in range(arms))
    for run in runs:
        run.prefix.parent.mkdir()
    return sessions.Session(0, 1, runs, _design(slot=0))


def _process(script: str, meeting: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args],
                            env={**os.environ, CLOCK_DIR_ENV: str(meeting)})


def test_spec_ab_starts_the_clock_a_margin_after_the_last_arm_is_up(tmp_path):
    session, meeting = _session(tmp_path), tmp_path / "meeting"
    meeting.mkdir()
    up = ("import os, pathlib, sys, time; time.sleep(float(sys.argv[1])); "
          f"pathlib.Path(os.environ[{CLOCK_DIR_ENV!r}], 'ready-' + sys.argv[2]).touch(); time.sleep(3)")
    procs = [_process(up, meeting, str(delay), str(slot)) for slot, delay in enumerate((0.2, 0.8))]
    provisional = time.time() + 30
    try:
        zero = sessions._start_clock(session, procs, meeting, provisional)
        last_up = (meeting / "ready-1").stat().st_mtime
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert zero == pytest.approx(last_up + READY_MARGIN_S, abs=0.3) and zero < provisional
    assert float((meeting / CLOCK_FILE).read_text()) == zero
    for slot, run in enumerate(session.runs):  # what spec-verdict reads: the zero the arms ran on
        recorded = Design.from_dict(json.loads(sessions.design_path(run).read_text()))
        assert (recorded.slot, recorded.clock_unix_s) == (slot, zero)


def test_an_arm_that_dies_before_it_is_up_ends_the_session_with_its_reason(tmp_path):
    session, meeting = _session(tmp_path), tmp_path / "meeting"
    meeting.mkdir()
    session.runs[1].prefix.with_suffix(".log").write_text("ImportError: no module named locust_spec\n")
    procs = [_process("import time; time.sleep(5)", meeting), _process("raise SystemExit(2)", meeting)]
    try:
        with pytest.raises(sessions.SessionError, match="arm1 r0.*exit 2"):
            sessions._start_clock(session, procs, meeting, time.time() + 30)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert not (meeting / CLOCK_FILE).exists()
