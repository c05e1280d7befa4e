"""Open loop across workers: a real master and two workers share one arrival schedule at --rate; one
worker is stopped mid-run and the master's summary names the arrivals it missed."""

from __future__ import annotations

import csv
import json

from tests.e2e.test_distributed import RUN_S, run_distributed

RATE = 30


def test_two_workers_split_one_schedule_and_a_stopped_worker_is_named_with_what_it_missed(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05")
    result = run_distributed(tmp_path, sim.url, users=16, stop_worker_after_s=2.0,
                             load=("--rate", str(RATE), "--prompts", "code", "--max-tokens", "16"))
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    out = tmp_path / "out"
    rows = list(csv.DictReader((out / "run_requests.csv").open()))
    assert rows and all(r["level_users"] == "" and float(r["level_rate"]) == RATE for r in rows)
    assert all(r["arrival"] and r["intended_unix_s"] and r["lateness_ms"] for r in rows)
    assert all(float(r["start_unix_s"]) >= float(r["intended_unix_s"]) - 0.002 for r in rows)  # never early
    arrivals = [int(r["arrival"]) for r in rows]
    assert len(arrivals) == len(set(arrivals))  # no arrival was started twice
    assert {a % 2 for a in arrivals} == {0, 1}  # both workers took their share

    summary = json.loads((out / "run_summary.json").read_text())
    assert [c["rate"] for c in summary["concurrency"]] == [f"{RATE}/s"]  # users are slots: no users level
    level = summary["arrivals"][f"{RATE}/s"]
    assert len(level["slots"]) == 2
    # the stopped worker's share from its stop on was never sent, and only its share
    assert list(level["missed_by_slot"]) != [] and len(level["missed_by_slot"]) == 1
    assert level["missed"] > 0.2 * RATE * (RUN_S - 4) / 2
    assert level["started"] + level["missed"] == level["scheduled"]
    assert level["flagged"] and any("never sent" in why for why in level["why"])
    assert level["achieved_rate"] < level["scheduled_rate"]
    latency = json.loads((out / "run_latency.json").read_text())
    assert latency["levels"][f"{RATE}/s"]["lateness"]["all"]["count"] > 0
