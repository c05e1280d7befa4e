"""Server faults from spec-sim's fault options, through real headless Locust: each is a named failure,
users keep going, and every request started has exactly one row that Locust's own counts agree with."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from locust_spec.metrics.counters import snapshots_from_rows, spec_window
from tests.e2e.chat_runs import (
    Run,
    assert_level_table,
    assert_reconciles,
    chat,
    error_kind,
    finish,
    start_locust,
    start_sims,
    stop_all,
)
from tests.support import BIN, REPO, restart_sim

FAST = ("--time-scale", "0.1")
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'

# fault option(s) of spec-sim -> the failure name the row and Locust carry
SINGLE_FAULTS = {
    "500": (("--fault-500", "0.3"), "http_500"),
    "429": (("--fault-429", "0.3"), "http_429"),
    "reset": (("--fault-reset", "0.3"), "reset"),
    "malformed": (("--fault-malformed", "0.3"), "malformed_sse"),
    "stall mid-stream": (("--fault-stall", "0.3", "--stall-seconds", "4"), "timeout_idle"),
    "no done": (("--fault-no-done", "0.3"), "no_done"),
}
DETAILS = {"http_500": "internal server error", "http_429": "too many requests", "reset": "reset by peer",
           "malformed_sse": "not JSON", "timeout_idle": "no bytes", "no_done": "without [DONE]",
           "interrupted": "test stopped"}


@pytest.fixture(scope="module")
def one_server_per_fault(tmp_path_factory) -> Iterator[tuple[Run, list[dict]]]:
    """One spec-sim per fault, one Locust run with a user class per server (rows tell them apart)."""
    tmp = tmp_path_factory.mktemp("faults")
    variants = {fault: (*FAST, "--seed", "7", *options) for fault, (options, _) in SINGLE_FAULTS.items()}
    sims = start_sims(tmp, variants)
    try:
        hosts = json.dumps({fault: sim.url for fault, sim in sims.items()})
        # a stalled stream holds its user for the idle timeout: 3 s lets it happen and fail
        run = chat(tmp, "", "--idle-timeout", "1", users=2 * len(sims), seconds=3,
                   locustfile=str(REPO / "tests" / "e2e" / "fault_hosts_locustfile.py"),
                   env={"FAULT_HOSTS": hosts})
        yield run, assert_reconciles(run)
    finally:
        stop_all(sims.values())


@pytest.mark.parametrize("fault", sorted(SINGLE_FAULTS))
def test_each_fault_is_its_own_named_failure_and_users_keep_going(one_server_per_fault, fault):
    run, all_rows = one_server_per_fault
    name = SINGLE_FAULTS[fault][1]
    rows = [r for r in all_rows if r["prompt_class"] == fault]
    failed = [r for r in rows if r["error"]]
    kinds = {error_kind(r) for r in failed}
    assert name in kinds
    assert kinds <= {name, "interrupted"}, kinds
    assert all(DETAILS[error_kind(r)] in r["error"] for r in failed), {r["error"] for r in failed}
    assert f"E2E {fault}: StreamError('{name}: " in run.output  # Locust's error report names it too
    # users keep running: successes keep coming after the first fault
    first_fault = min(float(r["start_unix_s"]) for r in rows if error_kind(r) == name)
    assert any(not r["error"] and float(r["start_unix_s"]) > first_fault for r in rows)


def test_every_fault_at_5_percent_finishes_and_reconciles_exactly(spec_sim, tmp_path):
    rate = "0.05"
    sim = spec_sim(*FAST, "--speculative-config", NGRAM, "--seed", "3", "--fault-500", rate, "--fault-429",
                   rate, "--fault-reset", rate, "--fault-malformed", rate, "--fault-stall", rate,
                   "--stall-seconds", "2", "--fault-no-done", rate)
    proc = start_locust(tmp_path, sim.url, "--idle-timeout", "1", users=12, seconds=6)
    time.sleep(3.5)
    restart_sim(sim.url)  # a server restart: connections drop, counters start again at 0
    run = finish(proc, tmp_path)
    assert run.proc.returncode == 1  # Locust's exit code when any request failed
    rows = assert_reconciles(run)
    kinds = {error_kind(r) for r in rows if r["error"]}
    assert {"http_500", "http_429", "reset", "malformed_sse", "timeout_idle", "no_done"} <= kinds
    ok = [r for r in rows if not r["error"]]
    assert len(ok) > len(rows) / 2
    # the table printed at the end counts the failures apart
    (level,) = assert_level_table(run.output, rows).values()
    assert int(level["failed"]) > 0
    # the histograms hold exactly the successful requests
    latency = json.loads((tmp_path / "run_latency.json").read_text())
    assert latency["metrics"]["e2e"]["all"]["count"] == len(ok)
    # the restart is a counter reset, counted and flagged
    with (tmp_path / "run_server_metrics.csv").open() as f:
        window = spec_window(snapshots_from_rows(list(csv.DictReader(f))), 0, 1e12)
    assert window.resets == 1
    assert any("reset 1 time" in note for note in window.notes)
    assert window.requests_success > 0


def verdict_json(base, cand, *extra: str) -> dict:
    proc = subprocess.run([str(BIN / "spec-verdict"), str(base), str(cand), "--format", "json",
                           "--min-requests", "5", "--min-tokens", "50", *extra],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_arm_failing_above_the_threshold_is_inconclusive(tmp_path):
    failing = (*FAST, "--speculative-config", NGRAM, "--fault-500", "0.3", "--seed", "5")
    sims = start_sims(tmp_path, {"off": FAST, "on": failing})
    try:
        base = chat(tmp_path, sims["off"].url, seconds=3, name="off")
        cand = chat(tmp_path, sims["on"].url, seconds=3, name="on")
    finally:
        stop_all(sims.values())
    rows = assert_reconciles(cand)
    failed = sum(1 for r in rows if r["error"] and not r["error"].startswith("interrupted"))
    verdict = verdict_json(base.prefix, cand.prefix)
    level = verdict["levels"][0]
    assert verdict["verdict"] == level["verdict"] == "inconclusive"
    assert any(reason.startswith(f"candidate failed {failed} of ") for reason in level["reasons"]), level
    assert not any(reason.startswith("baseline failed") for reason in level["reasons"])
    # the failures, and nothing else, made it inconclusive
    lenient = verdict_json(base.prefix, cand.prefix, "--max-failure-rate", "0.9")
    assert not any("failed" in reason for reason in lenient["levels"][0]["reasons"])
