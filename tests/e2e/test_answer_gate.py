"""On spec-sim, end to end: the n-gram candidate answers what the baseline answers and ships; one made lossy
(--accept-wrong-drafts) is held back by the answer gate; synthetic acceptance is never judged ship; every
run records what it measured, and OpenMetrics (the candidate's /metrics as vLLM's Rust frontend serves it)
is read like Prometheus text. Four runs at once, each long enough for four blocks of time: the independent
units a verdict's intervals resample (analysis/blocks.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from locust_spec.analysis import api
from locust_spec.analysis.answers import DIFFER, SAME

from tests.e2e.chat_runs import finish, locust_args, start_sims, stop_all
from tests.support import BIN, CLIENT_CPU, pinned

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
DRAFT = {"method": "eagle", "model": "draft", "num_speculative_tokens": 4, "draft_acceptance": 0.7}
SYNTHETIC = {"method": "mtp", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
             "synthetic_acceptance_length": 3.5}
ARMS = {
    "off": (),
    "ngram": ("--speculative-config", json.dumps(NGRAM), "--metrics-format", "openmetrics"),
    "lossy": ("--speculative-config", json.dumps(DRAFT), "--accept-wrong-drafts", "0.5"),
    "synthetic": ("--speculative-config", json.dumps(SYNTHETIC)),
}
# Copy-heavy prompts (n-gram finds its drafts in them), few enough that each is answered several times.
PROMPTS = "".join(json.dumps({"id": f"q{i}", "class": "quote", "prompt": (
    f"Repeat verbatim: {i} the quick brown fox jumps over the lazy dog, then the dog sleeps in the sun "
    f"by the river while {i} ducks swim past the old mill.")}) + "\n" for i in range(6))
SECONDS = 21
"""Four blocks of 5 s (the units of a run without a design): fewer than three give no interval."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("gate")
    (tmp / "quotes.jsonl").write_text(PROMPTS)
    sims = start_sims(tmp, {arm: ("--time-scale", "0.5", *args) for arm, args in ARMS.items()})
    try:
        procs = {}
        for arm in ARMS:
            args = locust_args(tmp, sims[arm].url, "--ignore-eos", users=2, seconds=SECONDS, name=arm)
            args[args.index("--prompts") + 1] = str(tmp / "quotes.jsonl")
            args[args.index("--max-tokens") + 1] = "48"
            procs[arm] = subprocess.Popen(pinned([str(BIN / "locust"), *args], CLIENT_CPU), cwd=tmp,
                                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for arm, proc in procs.items():
            done = finish(proc, tmp, name=arm)
            assert done.proc.returncode == 0, done.output[-2000:]
    finally:
        stop_all(sims.values())
    return {arm: tmp / arm for arm in ARMS}


def test_each_run_records_what_it_measured(runs):
    record = json.loads(Path(f"{runs['ngram']}_run.json").read_text())
    assert record["model"] == "sim-8b" and record["server"]["version"].startswith("spec-sim ")
    assert record["server"]["models"] == [{"id": "sim-8b", "root": "sim-8b", "max_model_len": 8192}]
    assert record["load"]["max_tokens"] == 48 and record["load"]["ignore_eos"] is True
    assert record["load"]["prompts"][0]["prompts"] == 6
    assert record["ended_unix_s"] > record["started_unix_s"]


# Two Locust processes share the client core here: their lag is not what these tests are about.
LAG = {"max_client_late_share": 1.0}


def test_the_ngram_candidate_answers_what_the_baseline_answers_and_ships(runs):
    verdict = api.verdict_for([runs["off"]], [runs["ngram"]], **LAG)
    level = verdict.levels[0]
    assert level.acceptance > 2 / 3  # read from OpenMetrics
    assert level.answers.status == SAME and level.answers.identical_share == 1.0
    assert level.answers.baseline_self_share == 1.0
    assert level.verdict == "ship", level.reasons


def test_a_lossy_candidate_is_held_back_by_the_answer_gate(runs):
    level = api.verdict_for([runs["off"]], [runs["lossy"]], **LAG).levels[0]
    assert level.answers.status == DIFFER and level.answers.identical_share < 0.5
    assert level.verdict == "off" and level.reasons[0].startswith("the answers changed: ")


def test_synthetic_acceptance_is_never_judged_ship(runs):
    level = api.verdict_for([runs["off"]], [runs["synthetic"]], **LAG).levels[0]
    assert level.per_position[:2] == (1.0, 1.0) and level.per_position[3] == 0.0
    assert level.verdict == "inconclusive"
    assert level.reasons[-1].startswith("synthetic acceptance, never ship on it")
