"""spec-verdict on two realistic runs (off vs n-gram, 1 and 64 users): the verdict and every output format."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest
from locust_spec.analysis import cost
from locust_spec.analysis.cli import run
from locust_spec.analysis.report.plots import FIGURES

from tests.data.run_builder import ArmSpec, write_pair, write_run


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("runs"))


def spec_verdict(*args: str) -> subprocess.CompletedProcess:
    """spec-verdict's command line, run in this process (its console script: test_runs_bad_input.py)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run([str(a) for a in args])
    return subprocess.CompletedProcess(["spec-verdict", *map(str, args)], code, out.getvalue(),
                                       err.getvalue())


def test_ships_at_1_user_and_not_at_64(pair, tmp_path):
    out = tmp_path / "verdict.json"
    result = spec_verdict(*pair, "-o", out)
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    by_users = {lv["users"]: lv for lv in doc["levels"]}
    assert set(by_users) == {1, 64}
    assert by_users[1]["verdict"] == "ship"
    assert by_users[64]["verdict"] != "ship"
    assert by_users[1]["acceptance"] == pytest.approx(2619 / 4128, abs=0.01)  # the real capture's acceptance
    assert by_users[1]["per_position"] == pytest.approx([0.794, 0.569, 0.424, 0.318], abs=0.01)
    assert doc["summary"].startswith("Speculative decoding: ship at 1 concurrent user (batch ~1); off at 64 "
                                     "concurrent users (batch ~")
    assert by_users[1]["batch"]["candidate"]["running_p50"] == 1.0
    # the batch the summary names is the mean from vLLM's running-time counter, the gauge beside it
    assert by_users[1]["batch"]["candidate"]["running_mean"] == pytest.approx(1.0, abs=0.1)
    assert 32 < by_users[64]["batch"]["candidate"]["running_mean"] <= 64
    assert "SHIP" in result.stdout and "64 users" in result.stdout


def test_json_follows_the_documented_schema(pair):
    doc = json.loads(spec_verdict(*pair, "--format", "json").stdout)
    assert doc["schema"] == 7 and doc["verdict"] in {"ship", "off", "tradeoff", "depends", "inconclusive"}
    assert set(doc) == {"schema", "axis", "verdict", "summary", "comparison", "differences", "speculation",
                        "slo", "design", "decision_rule", "levels", "crossover", "diagnoses", "warnings",
                        "tasks", "provenance", "pricing", "power"}
    assert (doc["comparison"], doc["differences"]) == ("speculation", [])
    assert doc["speculation"]["baseline"]["inferred"]["drafted"] is False
    assert doc["speculation"]["candidate"]["inferred"]["k"] >= 1  # spec-sim serves per-position counters
    assert doc["design"] == {"kind": "sequential", "block_s": None, "blocks_per_level": None, "arms": None,
                             "repeats": 1, "warmup_s": None}
    level = doc["levels"][0]
    # the pair holds several prompt classes: each one's levels have a level's shape (schema 4)
    assert doc["tasks"] and all(set(lv) == set(level) for t in doc["tasks"] for lv in t["levels"])
    assert set(level) == {"users", "verdict", "batch", "acceptance", "acceptance_ci95", "acceptance_units",
                          "mean_acceptance_length", "per_position", "requests", "failures", "metrics",
                          "mde_pct", "under_powered", "design", "reasons", "diagnoses", "answers",
                          *cost.KEYS}
    assert level["acceptance_units"]["unit"] == "prompts"
    assert set(level["mde_pct"]) == {"tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms", "output_tok_s"}
    assert set(level["metrics"]) == {"tpot_p50_ms", "tpot_p90_ms", "output_tok_s", "ttft_p50_ms",
                                     "itl_p50_ms", "itl_p95_ms", "chunk_gap_p50_ms", "chunk_gap_p99_ms",
                                     "tokens_per_chunk"}
    for metric in level["metrics"].values():
        assert set(metric) == {"baseline", "candidate", "change_pct", "ci95_pct", "direction", "units",
                               "role", "p_value", "p_adjusted", "exploratory"}
    assert level["metrics"]["tpot_p50_ms"]["units"]["unit"] == "blocks"
    assert set(level["batch"]["baseline"]) == {"running_mean", "running_p50", "running_max", "waiting_p50",
                                               "waiting_max", "samples"}
    lo, hi = level["acceptance_ci95"]
    assert lo <= level["acceptance"] <= hi
    assert level["requests"]["baseline"] == 59  # 60 started, the first one in warm-up
    assert set(doc["crossover"]) == {"tpot_p50_ms", "output_tok_s"}
    assert set(doc["crossover"]["tpot_p50_ms"]) == {"metric", "users", "users_ci95", "between_users", "batch",
                                                    "note", "method"}
    for d in doc["diagnoses"] + level["diagnoses"]:
        assert set(d) == {"kind", "message", "evidence"}


def test_serving_concurrency_decides_the_overall_verdict_and_fail_on_exits_1(pair):
    result = spec_verdict(*pair, "--serving-concurrency", "64", "--fail-on", "tradeoff", "--fail-on", "off")
    assert result.returncode == 1
    assert "at your serving concurrency (64 concurrent users)" in result.stdout
    assert spec_verdict(*pair, "--serving-concurrency", "1", "--fail-on", "tradeoff").returncode == 0


def test_markdown_and_html_outputs(pair, tmp_path):
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    assert spec_verdict(*pair, "-o", md, "-o", html).returncode == 0
    assert md.read_text().startswith("## Speculative decoding verdict")
    page = html.read_text()
    assert page.count("src='data:image/png;base64,") == len(FIGURES)  # every plot drawn, none omitted
    assert "Crossover" in page
    assert "<script" not in page


def test_repeats_in_a_folder_show_their_spread(tmp_path):
    base, _ = write_pair(tmp_path)
    for seed in (3, 4, 5):
        write_run(tmp_path / "ngram" / f"run{seed}", ArmSpec(speculative=True, seed=seed))
    result = spec_verdict(base, tmp_path / "ngram")
    assert result.returncode == 0, result.stderr
    assert "repeats: 1 baseline, 4 candidate runs" in result.stdout


def test_run_warnings_flow_into_the_verdict(tmp_path):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, levels=(1,)))
    warned = ("client counted 12% more tokens than the server",)
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, levels=(1,), warnings=warned))
    doc = json.loads(spec_verdict(base, cand, "--format", "json").stdout)
    assert doc["warnings"] == ["candidate: client counted 12% more tokens than the server"]
    assert [d["kind"] for d in doc["diagnoses"]].count("cross_check") == 1


def test_no_server_metrics_on_the_candidate_is_inconclusive(tmp_path):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, levels=(1,)))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, levels=(1,), server_metrics=False))
    doc = json.loads(spec_verdict(base, cand, "--format", "json").stdout)
    assert doc["verdict"] == "inconclusive"
    assert any("no server counters" in r for r in doc["levels"][0]["reasons"])


def test_a_level_where_the_load_generator_fell_behind_is_inconclusive(tmp_path):
    base, cand = write_pair(tmp_path, client_late_share={1: 0.0, 64: 0.3})
    doc = json.loads(spec_verdict(base, cand, "--format", "json").stdout)
    by_users = {lv["users"]: lv for lv in doc["levels"]}
    assert by_users[1]["verdict"] == "ship"
    assert by_users[64]["verdict"] == "inconclusive"
    assert by_users[64]["reasons"] == [
        "candidate: the load generator was behind 30.0% of the time at this level (max 20 ms): its numbers "
        "measure the client, not the server; add --processes or workers"]
    relaxed = json.loads(spec_verdict(base, cand, "--format", "json", "--max-client-lag-share", "0.5").stdout)
    assert {lv["users"]: lv["verdict"] for lv in relaxed["levels"]}[64] != "inconclusive"


def test_the_64_user_burst_level_is_judged_on_tpot_and_throughput_not_the_token_weighted_itl(pair):
    """The n-gram candidate at 64 users: chunks of ~3 tokens make the token-weighted ITL median fall while
    TPOT and throughput get worse. In the middle acceptance band that is off, and the reasons say why."""
    doc = json.loads(spec_verdict(*pair, "--format", "json").stdout)
    level = {lv["users"]: lv for lv in doc["levels"]}[64]
    metrics = level["metrics"]
    assert metrics["itl_p50_ms"]["change_pct"] < -2  # looks better, token-weighted
    assert metrics["tpot_p50_ms"]["ci95_pct"][0] > 2 and metrics["output_tok_s"]["ci95_pct"][1] < -2
    assert 0.5 <= level["acceptance"] < 2 / 3
    assert level["verdict"] == "off", level["reasons"]
    reason = level["reasons"][0]
    assert "TPOT p50" in reason and "output" in reason and "[" in reason


def test_zero_acceptance_over_few_requests_explains_but_never_decides_alone(tmp_path):
    """6 measured requests whose draft tokens were all rejected: acceptance 0.00, and its interval too; too
    few blocks of time for the timings' intervals, so no word (acceptance alone judged identical arms off)."""
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, levels=(1,)))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, levels=(1,), requests_per_user={1: 7},
                                                        rejects_all=True))
    doc = json.loads(spec_verdict(base, cand, "--format", "json").stdout)
    level = doc["levels"][0]
    assert level["requests"]["candidate"] == 6
    assert level["acceptance"] == 0.0 and level["acceptance_ci95"] == [0.0, 0.0]
    assert level["verdict"] == doc["verdict"] == "inconclusive", level["reasons"]
    assert "acceptance 0.00 [0.00, 0.00] suggests it does not pay, but only the timings decide" in \
        level["reasons"][0]
    assert level["under_powered"].startswith("under-powered: no interval")
    assert not any(d["kind"] == "draft_cost" for d in level["diagnoses"])  # tokens per chunk 1.00 -> 1.00


def test_a_short_one_user_run_scraped_every_5s_gets_its_acceptance_measured(tmp_path):
    """8 s at 1 user with a scrape every 5 s: one interval scrape falls inside the measured requests'
    span, so only the scrapes bracketing the level (at its start and after its end) measure it. Its
    timings span too few blocks of time for an interval: the level says it is under-powered."""
    shape = {"levels": (1,), "requests_per_user": {1: 8}, "scrape_every_s": 5.0}
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, **shape))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, **shape))
    doc = json.loads(spec_verdict(base, cand, "--format", "json").stdout)
    level = doc["levels"][0]
    assert level["acceptance"] == pytest.approx(2619 / 4128, abs=0.01)  # the capture's, all of it
    assert level["verdict"] == "inconclusive"
    assert level["under_powered"].startswith("under-powered: no interval")
    assert level["under_powered"] in level["reasons"]


def test_an_slo_makes_goodput_the_throughput_judged(pair):
    doc = json.loads(spec_verdict(*pair, "--format", "json", "--slo", "ttft_ms=100,tpot_ms=20").stdout)
    assert doc["slo"] == {"ttft_ms": 100.0, "tpot_ms": 20.0}
    by_users = {lv["users"]: lv for lv in doc["levels"]}
    one, many = by_users[1]["metrics"], by_users[64]["metrics"]
    assert one["slo_share"]["baseline"] == one["slo_share"]["candidate"] == 1.0
    assert one["goodput_tok_s"]["baseline"] == pytest.approx(one["output_tok_s"]["baseline"])
    assert many["slo_share"]["candidate"] == 0.0 and many["goodput_tok_s"]["candidate"] == 0.0
    # neither arm meets the SLO at 64 users: no goodput to gain, and TPOT got worse
    assert by_users[64]["verdict"] == "off", by_users[64]["reasons"]
    assert "goodput" in by_users[1]["reasons"][0]
    assert set(doc["crossover"]) == {"tpot_p50_ms", "goodput_tok_s"}
    bad = spec_verdict(*pair, "--slo", "ttft=100")
    assert bad.returncode == 2 and "--slo" in bad.stderr


def test_the_objective_chooses_each_levels_question_and_goodput_needs_an_slo(pair):
    doc = json.loads(spec_verdict(*pair, "--format", "json", "--objective", "throughput").stdout)
    assert doc["decision_rule"]["primary"] == "output_tok_s"
    assert doc["decision_rule"]["guards"] == ["tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms"]
    level = {lv["users"]: lv for lv in doc["levels"]}[1]
    assert level["metrics"]["output_tok_s"]["role"] == "primary" and level["verdict"] == "ship"
    bad = spec_verdict(*pair, "--objective", "goodput")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "spec-verdict: --objective goodput needs --slo (goodput is the tokens of requests within it)")
    good = json.loads(spec_verdict(*pair, "--format", "json", "--objective", "goodput", "--slo",
                                   "tpot_ms=20").stdout)
    assert good["decision_rule"]["primary"] == "goodput_tok_s"
