"""Confidence a verdict can bank on, on constructed runs: drift is no difference under the interleaved design
(and is one under the sequential), the units are blocks, decisive acceptance decides with four requests, and
thousands of requests in lockstep still get a verdict."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from locust_spec.analysis import aa, api
from locust_spec.analysis.cli import run as spec_verdict
from locust_spec.analysis.verdict import VERDICTS

from locust_spec.core.design import INTERLEAVED, Design
from locust_spec.metrics.exposition import Sample, Snapshot, rows_from_snapshot
from locust_spec.recording.records import COLUMNS

CLOCK = 1_800_000_000.0
TOKENS = 100
URL = "http://127.0.0.1:8000/metrics"


def _row(start: float, users: int, tpot_ms: float, prompt: str, accepted: int | None, drafted: int | None,
         warmup: int = 0, chunks: int = TOKENS) -> dict:
    ttft = 20.0
    return {"start_unix_s": f"{start:.6f}", "level_users": users, "prompt_class": "code", "prompt_id": prompt,
            "prompt_tokens": 100, "output_tokens": TOKENS, "tokens_estimated": 0, "chunks": chunks,
            "max_tokens_per_chunk": 1, "ttft_ms": ttft, "tpot_ms": f"{tpot_ms:.4f}",
            "e2e_ms": f"{ttft + tpot_ms * (TOKENS - 1):.4f}", "itl_p50_ms": tpot_ms, "itl_p99_ms": tpot_ms,
            "chunk_gap_p50_ms": tpot_ms, "finish_reason": "length",
            "spec_accepted_tokens": "" if accepted is None else accepted,
            "spec_draft_tokens": "" if drafted is None else drafted, "error": "", "warmup": warmup}


def _counters(path: Path, times: list[float], drafted_per_s: float, acceptance: float) -> None:
    """Scrapes of the candidate's speculative-decoding counters growing evenly (none on the baseline)."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(("timestamp_unix_s", "url", "metric", "labels", "value"))
        for t in times:
            drafted = drafted_per_s * (t - times[0])
            labels = (("engine", "0"), ("model_name", "m"))
            out.writerows(rows_from_snapshot(Snapshot(t, URL, (
                Sample("vllm:generation_tokens_total", labels, drafted),
                Sample("vllm:spec_decode_num_drafts_total", labels, drafted / 4),
                Sample("vllm:spec_decode_num_draft_tokens_total", labels, drafted),
                Sample("vllm:spec_decode_num_accepted_tokens_total", labels, drafted * acceptance)))))


def _write(prefix: Path, rows: list[dict], design: Design | None, counters: list[float] | None,
           acceptance: float = 0.7) -> Path:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}_requests.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: float(r["start_unix_s"])))
    if design is not None:
        Path(f"{prefix}_design.json").write_text(json.dumps(design.to_dict()))
    if counters is not None:
        _counters(Path(f"{prefix}_server_metrics.csv"), counters, 400.0, acceptance)
    return prefix


def _drifting_arm(design: Design, start: float, speculative: bool, rng: np.random.Generator) -> list[dict]:
    """One user sending back to back in the arm's blocks, its TPOT rising 2% per second of the run: the
    machine slowing down. Every arm is the same server otherwise."""
    rows = []
    for li, users in enumerate(design.levels):
        for block in design.own_blocks(li):
            t = block.start_unix_s
            while t < block.end_unix_s:
                tpot = 10.0 * (1 + 0.02 * (t - start)) * rng.lognormal(0, 0.05)
                prompt = f"p{rng.integers(40)}"
                rows.append(_row(t, users, tpot, prompt, 70 if speculative else None,
                                 100 if speculative else None, warmup=int(t < design.warmup_until(li))))
                t += (20.0 + tpot * (TOKENS - 1)) / 1000.0 + 0.001
    return rows


def _drifting_pair(tmp_path: Path, task_of=None) -> dict[str, Path]:
    """Both arms of one level, interleaved in 16 blocks of 5 s (8 block pairs), the candidate speculating;
    `task_of(start)` names each request's prompt class."""
    plan = Design.planned(INTERLEAVED, (1,), 80.0, 1.0, 2, 5.0)
    rng = np.random.default_rng(5)
    arms = {}
    for slot, arm in enumerate(("baseline", "candidate")):
        design = plan.for_slot(slot, CLOCK)
        rows = _drifting_arm(design, CLOCK, arm == "candidate", rng)
        for r in rows if task_of is not None else ():
            r["prompt_class"] = task_of(float(r["start_unix_s"]))
        arms[arm] = _write(tmp_path / arm / "r0", rows, design,
                           [CLOCK + s for s in range(81)] if arm == "candidate" else None)
    return arms


def test_drift_that_slows_the_machine_is_no_difference_under_the_interleaved_design(tmp_path):
    arms = _drifting_pair(tmp_path)
    level = api.verdict_for([arms["baseline"]], [arms["candidate"]]).levels[0]
    assert level.design == INTERLEAVED
    for key in ("tpot_p50_ms", "tpot_p90_ms", "output_tok_s"):
        change = level.changes[key]
        assert change.unit == "block pairs" and change.units == 8
        assert level.directions[key] not in ("better", "worse"), (key, change)


def test_the_self_test_counts_false_claims_and_reports_each_levels_noise_floor(tmp_path):
    plan = Design.planned(INTERLEAVED, (1,), 80.0, 1.0, 2, 5.0)
    rng = np.random.default_rng(5)
    arms = []
    for slot, arm in enumerate(("baseline", "candidate")):
        design = plan.for_slot(slot, CLOCK)
        arms.append(_write(tmp_path / arm / "r0", _drifting_arm(design, CLOCK, False, rng), design, None))
    found = aa.self_test(api.verdict_for([arms[0]], [arms[1]]))
    assert [q.metric for q in found.quantities] == ["tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms",
                                                    "output_tok_s"]
    assert found.claims == 0 and found.rate == 0.0 and found.shipped == ()
    doc = json.loads(aa.render_json(found))
    assert doc["compared"] == 4 and set(doc["noise_floor_pct"]["1"]) == {"tpot_p50_ms", "tpot_p90_ms",
                                                                          "ttft_p50_ms", "output_tok_s"}
    # a rate with its exact interval, per layer: 0 of 4 cannot say the rate is below 5%
    assert doc["intervals_excluding_zero"]["levels"]["ci95"] == pytest.approx([0.0, 0.6024], abs=1e-4)
    assert doc["words"]["levels"] == {"count": 0, "of": 1, "rate": 0.0, "ci95": [0.0, pytest.approx(0.975)]}
    text = aa.render_text(found)
    assert text.startswith("A/A self-test: 0 of 4 compared quantities claimed better or worse (their 95% "
                           "interval excludes 0")
    assert "1 user: TPOT p50 +-" in text and "False claims" not in text
    assert "One run of 4 quantities cannot pin a rate down" in text


def test_the_same_drift_between_sequential_arms_is_taken_for_a_difference(tmp_path):
    # The old way: the baseline's whole ladder, then the candidate's: the later arm ran on a slower machine.
    rng = np.random.default_rng(5)
    arms = {}
    for i, arm in enumerate(("baseline", "candidate")):
        start = CLOCK + 45.0 * i
        design = Design.planned(INTERLEAVED, (1,), 40.0, 1.0, 1, 5.0).for_slot(0, start)
        rows = _drifting_arm(design, CLOCK, arm == "candidate", rng)
        arms[arm] = _write(tmp_path / arm / "r0", rows, None,
                           [start + s for s in range(41)] if arm == "candidate" else None)
    level = api.verdict_for([arms["baseline"]], [arms["candidate"]]).levels[0]
    assert level.changes["tpot_p50_ms"].unit == "blocks"
    assert level.directions["tpot_p50_ms"] == "worse"  # drift, which no interval of this design can see


def test_acceptance_never_switches_off_on_its_own_even_at_zero_over_four_requests(tmp_path):
    # A replay of real vLLM captures at one user: 4 requests in 6 s, none of 18,336 drafted tokens accepted.
    def arm(name: str, speculative: bool) -> Path:
        rows = [_row(CLOCK + 1.5 * i, 1, 10.0, f"p{i}", 0 if speculative else None,
                     4584 if speculative else None) for i in range(4)]
        return _write(tmp_path / name / "r0", rows, None,
                      [CLOCK + s for s in range(8)] if speculative else None, acceptance=0.0)

    verdict = api.verdict_for([arm("off", False)], [arm("on", True)])
    level = verdict.levels[0]
    assert level.acceptance == 0.0 and (level.acceptance_ci.lo, level.acceptance_ci.hi) == (0.0, 0.0)
    assert level.acceptance_ci.unit == "prompts" and level.acceptance_ci.units == 4
    # identical arms can accept little (SpecBench's tasks did): only measured timings may say off
    assert level.verdict == "inconclusive", level.reasons
    assert any("only 4 requests" in r for r in level.reasons)


def test_thousands_of_requests_in_lockstep_get_a_verdict(tmp_path, capsys):
    # 2,560 requests at 64 users, fixed output length and full-k drafts: accepted and drafted per request
    # move in lockstep (the old normal approximation's covariance was singular: LinAlgError, exit 2).
    def arm(name: str, speculative: bool) -> Path:
        drafted = [400 + 4 * (i % 5) for i in range(2560)]
        rows = [_row(CLOCK + i * 0.02, 64, 10.0 + (i % 7) * 0.1, f"p{i % 300}",
                     round(0.75 * d) if speculative else None, d if speculative else None,
                     chunks=40 if speculative else TOKENS) for i, d in enumerate(drafted)]
        return _write(tmp_path / name / "r0", rows, None,
                      [CLOCK + s for s in range(56)] if speculative else None, acceptance=0.75)

    base, cand = arm("off", False), arm("on", True)
    assert spec_verdict([str(base), str(cand), "--format", "json"]) == 0, capsys.readouterr().err
    level = json.loads(capsys.readouterr().out)["levels"][0]
    assert level["acceptance_ci95"] == [0.75, 0.75] and level["verdict"] in VERDICTS
    assert level["metrics"]["tpot_p50_ms"]["units"]["unit"] == "blocks"


def test_a_tasks_intervals_are_over_the_block_pairs_that_hold_its_requests(tmp_path):
    # "rare" is sent in the level's first three block groups only, "code" in the other five: a task's
    # interval counts the pairs that hold its requests (an empty pair is no evidence) and pairs the arms.
    arms = _drifting_pair(tmp_path, lambda start: "rare" if start < CLOCK + 30 else "code")
    verdict = api.verdict_for([arms["baseline"]], [arms["candidate"]])
    pairs = {t.task: t.levels[0].changes for t in verdict.tasks}
    for task, held in (("rare", 3), ("code", 5)):
        for key in ("tpot_p50_ms", "output_tok_s"):
            assert (pairs[task][key].unit, pairs[task][key].units) == ("block pairs", held), (task, key)
