"""Each diagnosis: when it fires, when it stays quiet, and the evidence it carries."""

from __future__ import annotations

import pytest
from locust_spec.analysis import diagnoses
from locust_spec.analysis.model import Batch, ClassStats, LevelInput
from locust_spec.analysis.stats import Interval
from locust_spec.analysis.verdict import Thresholds, judge_level

from tests.unit.test_verdict_rules import arm, spec


@pytest.mark.parametrize(
    ("per_position", "suggested_k"),
    [
        ((0.9, 0.6, 0.3, 0.1), 2),  # position 2 below half of position 0
        ((0.8, 0.35, 0.2), 1),  # position 1 already below half; k never below 1
        ((0.4, 0.1, 0.05), 1),
    ],
)
def test_proposal_length_fires_on_a_steep_fall_and_names_k(per_position, suggested_k):
    found = diagnoses.proposal_length(per_position, 0.5)
    assert found is not None and found.kind == "proposal_length"
    assert found.evidence["suggested_k"] == suggested_k
    assert f"num_speculative_tokens to {suggested_k}" in found.message


@pytest.mark.parametrize(
    "per_position",
    [
        (0.794, 0.569, 0.424, 0.318),  # the real vLLM capture: falls gently
        (0.9, 0.85, 0.8),
        (0.9,),
        (),
        (0.9, 0.6, 0.5),  # position 2 (0.5) stays above half of position 0 (0.45)
    ],
)
def test_proposal_length_quiet_when_acceptance_holds(per_position):
    assert diagnoses.proposal_length(per_position, 0.5) is None


def _inactive(spec_stats, rows_show=False):
    return diagnoses.speculation_inactive(LevelInput(4, arm(), arm(), spec_stats, rows_show))


@pytest.mark.parametrize(
    ("spec_stats", "rows_show", "cause"),
    [
        (spec(None, (), 0, 0, gen=0), False, "points at another server"),
        (spec(None, (), 0, 0, gen=5000), True, "per-request stats show drafted tokens"),
        (spec(None, (), 0, 0, gen=5000, families=("vllm:generation_tokens",)), False,
         "exposes no speculative-decoding counters"),
        (spec(None, (), 0, 0, gen=5000), False, "grammar"),
        (spec(None, (), 0, 0, gen=5000), False, "num_speculative_tokens_per_batch_size"),
    ],
)
def test_speculation_inactive_says_which_cause(spec_stats, rows_show, cause):
    found = _inactive(spec_stats, rows_show)
    assert found is not None and found.kind == "speculation_inactive"
    assert cause in found.message
    assert found.evidence["completed_requests"] == 50


def test_speculation_inactive_at_one_level_of_a_drafting_ladder_blames_a_batch_size_schedule():
    level = LevelInput(4, arm(), arm(), spec(None, (), 0, 0, gen=5000),
                       candidate_batch=Batch(4.0, 4.0, 0.0, 0.0, 30))
    found = diagnoses.speculation_inactive(level, speculating_levels=(1, 4))
    assert "drafted at 1 user but not here (batch ~4)" in found.message
    assert "num_speculative_tokens_per_batch_size" in found.message
    assert found.evidence["speculating_levels"] == [1] and found.evidence["batch"] == 4.0


def test_speculation_inactive_quiet_when_drafts_moved_or_no_counters():
    assert _inactive(spec(0.7)) is None
    assert _inactive(None) is None


@pytest.mark.parametrize(("acceptance", "fires"), [(0.0, True), (0.05, True), (0.1, False), (0.6, False)])
def test_draft_disagrees_on_near_zero_acceptance(acceptance, fires):
    found = diagnoses.draft_disagrees(spec(acceptance), 0.1)
    assert (found is not None) == fires
    if fires:
        assert "spec-verdict vocab TARGET DRAFT" in found.message
        assert found.evidence["acceptance"] == acceptance


def _changes(tpc, step, tpot, ttft=(0.0, -1.0, 1.0)) -> dict[str, Interval]:
    return {"tokens_per_chunk": Interval(*tpc), "step_ms": Interval(*step), "tpot_p50_ms": Interval(*tpot),
            "ttft_p50_ms": Interval(*ttft)}


@pytest.mark.parametrize(
    ("tpc", "step", "tpot", "fires"),
    [
        ((50, 40, 60), (100, 90, 110), (33, 25, 40), True),  # step time doubled, tokens per chunk +50%
        ((150, 140, 160), (100, 90, 110), (-20, -25, -15), False),  # earns its cost: TPOT fell
        # real vLLM: tokens per chunk 1.00 -> 1.00 (nothing drafted); a slower step is not a draft's cost
        ((0.0, -0.4, 0.4), (10, 6, 14), (10, 6, 14), False),
        ((50, 40, 60), (5, -1, 11), (3, -2, 8), False),  # the step's rise is not outside the noise
        ((50, 30, 70), (60, 45, 75), (7, -3, 17), False),  # the two rises' intervals overlap
    ],
)
def test_draft_cost_needs_drafting_and_a_step_slower_than_that_outside_the_noise(tpc, step, tpot, fires):
    level = LevelInput(4, arm(gap=20.0, tpc=1.0), arm(gap=40.0, tpc=1.5), spec(0.6),
                       changes=_changes(tpc, step, tpot))
    found = diagnoses.draft_cost(level, 2.0)
    assert (found is not None) == fires
    if fires:
        assert "eats more than it earns" in found.message
        assert found.evidence["step_change_pct"] == list(step)


@pytest.mark.parametrize(
    ("ttft", "word"),
    [((20.0, 15.0, 25.0), "rose"),
     ((-48.0, -55.0, -40.0), None),  # an improvement is no cost of speculation to diagnose
     ((2.7, -1.0, 6.4), None)],  # real vLLM: +2.7% whose interval straddles the band is not a finding
)
def test_ttft_change_is_a_rise_whose_interval_clears_the_band(ttft, word):
    cand = arm(ttft=50.0 * (1 + ttft[0] / 100))
    level = LevelInput(1, arm(ttft=50.0), cand, spec(0.8), changes={"ttft_p50_ms": Interval(*ttft)})
    found = judge_level(level, Thresholds())
    found = [d for d in found.diagnoses if d.kind == "ttft_change"]
    if word is None:
        assert not found
    else:
        assert word in found[0].message and found[0].evidence["ci95_pct"] == [ttft[1], ttft[2]]


def test_per_class_names_where_it_pays():
    stats = [ClassStats("json", 0.85, 900, 20, 20.0, 11.0), ClassStats("code", 0.7, 800, 20, 20.0, 13.0),
             ClassStats("creative", 0.2, 700, 20, 20.0, 24.0), ClassStats("chat", 0.55, 700, 20, 20.0, 19.0),
             ClassStats("unmeasured", None, 0, 20, 20.0, 20.0)]
    found = diagnoses.per_class(stats, 2 / 3, 0.5)
    assert "pays on json, code" in found.message
    assert "not on creative" in found.message
    assert "in between on chat" in found.message
    assert [c["class"] for c in found.evidence["classes"]] == ["json", "code", "creative", "chat"]


def test_per_class_quiet_without_per_request_stats():
    assert diagnoses.per_class([ClassStats("json", None, 0, 20, 20.0, 11.0)], 2 / 3, 0.5) is None


def test_cross_check_one_diagnosis_per_warning():
    found = diagnoses.cross_check([("baseline", "a"), ("candidate", "b")])
    assert [(d.kind, d.message) for d in found] == [("cross_check", "baseline: a"),
                                                    ("cross_check", "candidate: b")]


def test_level_verdict_collects_its_diagnoses():
    lv = LevelInput(1, arm(gap=20.0, tpc=1.0, ttft=50.0), arm(itl=15, gap=45.0, tpc=1.5, ttft=70.0),
                    spec(0.05, (0.1, 0.01, 0.0)),
                    changes=_changes((50, 40, 60), (125, 110, 140), (50, 40, 60), (40, 35, 45)))
    kinds = {d.kind for d in judge_level(lv, Thresholds()).diagnoses}
    assert kinds == {"draft_disagrees", "proposal_length", "draft_cost", "ttft_change"}


def test_requests_that_outlast_their_blocks_are_said_to_pull_the_difference_towards_zero():
    long = LevelInput(64, arm(), arm(), spec(0.65), spill={"baseline": 0.22, "candidate": 0.41}, block_s=5.0)
    found = diagnoses.block_spill(long)
    assert found is not None and "41% of the candidate's request time at 64 users" in found.message
    assert "(blocks of 5s)" in found.message and "baseline 22%" in found.message
    assert diagnoses.block_spill(LevelInput(1, arm(), arm(), spec(0.65),
                                            spill={"baseline": 0.12, "candidate": 0.18})) is None
    assert diagnoses.block_spill(LevelInput(1, arm(), arm(), spec(0.65))) is None  # sequential: no blocks
