"""The verdict rules, level by level and overall, as tables of cases."""

from __future__ import annotations

import pytest
from locust_spec.analysis.model import ArmMetrics, ClientLag, LevelInput, SpecStats
from locust_spec.analysis.verdict import (
    INCONCLUSIVE,
    OFF,
    SHIP,
    TRADEOFF,
    Thresholds,
    build_verdict,
    judge_level,
    ladder_summary,
    overall,
)

TH = Thresholds()


def arm(itl=20.0, tput=100.0, *, requests=50, failures=0, tokens=10_000, ttft=50.0, gap=20.0, tpc=1.0,
        spread=None) -> ArmMetrics:
    return ArmMetrics(requests=requests, failures=failures, ttft_p50_ms=ttft, itl_p50_ms=itl,
                      itl_p95_ms=itl * 2, tpot_p50_ms=itl, chunk_gap_p50_ms=gap, output_tok_s=tput,
                      tokens_per_chunk=tpc, output_tokens=tokens, spread=spread or {})


def spec(acceptance=0.8, per_position=(0.9, 0.8, 0.7), drafts=100.0, draft_tokens=300.0, gen=1000.0,
         families=("vllm:spec_decode_num_drafts",)) -> SpecStats:
    return SpecStats(acceptance=acceptance, mean_acceptance_length=1 + sum(per_position),
                     per_position=per_position,
                     drafts=drafts, draft_tokens=draft_tokens, accepted=(acceptance or 0) * draft_tokens,
                     generation_tokens=gen, server_kind="vllm-v1", families_seen=families)


def level(acc, itl_change, tput_change, users=1, **kw) -> LevelInput:
    base = arm()
    cand = arm(itl=20.0 * (1 + itl_change / 100), tput=100.0 * (1 + tput_change / 100))
    return LevelInput(users=users, baseline=kw.get("baseline", base), candidate=kw.get("candidate", cand),
                      spec=kw.get("spec", spec(acc)), baseline_lag=kw.get("baseline_lag"),
                      candidate_lag=kw.get("candidate_lag"))


@pytest.mark.parametrize(
    ("acceptance", "itl_change", "tput_change", "expected"),
    [
        # acceptance at or above 2/3: ship unless throughput fell beyond the band
        (0.80, -30, +20, SHIP),
        (2 / 3, -30, +20, SHIP),  # exactly 2/3 ships
        (0.80, -30, -1.9, SHIP),  # throughput fall inside the band does not count
        (0.80, -30, -10, TRADEOFF),  # latency better, throughput fell
        (0.80, +10, -10, OFF),  # both worse: nothing traded, measurements override the rule of thumb
        (0.80, +10, 0, TRADEOFF),  # latency worse, throughput held
        (0.80, 0, 0, SHIP),
        # below 1/2: off whatever the measurements
        (0.49, -30, +20, OFF),
        (0.0, -30, +20, OFF),
        # exactly 1/2 is in between: the measurements decide
        (0.50, -30, +20, SHIP),
        (0.50, -30, -10, TRADEOFF),
        (0.50, +10, -10, OFF),
        (0.60, -30, 0, SHIP),  # one better, the other inside the band
        (0.60, 0, +10, SHIP),
        (0.60, +10, +10, TRADEOFF),
        (0.60, +10, 0, OFF),  # none better, one worse
        (0.60, 1.5, -1.5, INCONCLUSIVE),  # both inside the 2% band: a tie
        (0.60, 2.0, -2.0, INCONCLUSIVE),  # exactly on the band edge is still inside
        (0.60, -2.5, 0, SHIP),  # just outside the band counts
    ],
)
def test_level_rule_table(acceptance, itl_change, tput_change, expected):
    result = judge_level(level(acceptance, itl_change, tput_change), TH)
    assert result.verdict == expected, result.reasons


def test_tradeoff_reason_states_both_numbers_and_directions():
    result = judge_level(level(0.6, -30, -10), TH)
    reason = result.reasons[0]
    assert "ITL p50 20.0 -> 14.0 ms (-30.0%, better)" in reason
    assert "output 100.0 -> 90.0 tok/s (-10.0%, worse)" in reason
    assert "decision to make, not a result" in reason


@pytest.mark.parametrize(
    ("kwargs", "reason_part"),
    [
        ({"baseline": arm(requests=50, failures=3)}, "baseline failed 3 of 50"),
        ({"candidate": arm(requests=5)}, "candidate has only 5 requests"),
        ({"candidate": arm(tokens=500)}, "candidate has only 500 output tokens"),
        ({"baseline": arm(requests=0)}, "baseline has no requests"),
        ({"spec": None}, "no server counters on the candidate"),
        ({"spec": spec(acceptance=None, drafts=0, draft_tokens=0)}, "draft counters did not move"),
    ],
)
def test_inconclusive_when_evidence_is_missing(kwargs, reason_part):
    result = judge_level(level(0.9, -30, +20, **kwargs), TH)
    assert result.verdict == INCONCLUSIVE
    assert any(reason_part in r for r in result.reasons), result.reasons


def test_failure_rate_at_the_threshold_is_accepted():
    result = judge_level(level(0.9, -30, +20, baseline=arm(requests=100, failures=5)), TH)
    assert result.verdict == SHIP


def test_thresholds_are_parameters():
    strict = Thresholds(ship_acceptance=0.95, off_acceptance=0.9, noise_pct=50)
    assert judge_level(level(0.92, -30, +20), strict).verdict == INCONCLUSIVE
    assert judge_level(level(0.85, -30, +20), strict).verdict == OFF


def test_repeats_spread_widens_the_noise_band():
    base = arm(spread={"itl_p50_ms": (18.0, 22.0), "output_tok_s": (90.0, 110.0)})
    cand = arm(itl=19.0, tput=105.0)
    result = judge_level(LevelInput(1, base, cand, spec(0.6)), TH)
    assert result.verdict == INCONCLUSIVE  # a 5% move inside a 20% spread is noise


def test_change_pct_is_candidate_relative_to_baseline():
    result = judge_level(level(0.9, -25, +50), TH)
    assert result.change_pct["itl_p50_ms"] == pytest.approx(-25)
    assert result.change_pct["output_tok_s"] == pytest.approx(50)
    assert result.acceptance == 0.9


def _judged(*pairs):
    return [judge_level(level(acc, itl, tput, users=u), TH) for u, (acc, itl, tput) in pairs]


SHIPS, OFFS, TRADES = (0.9, -30, 20), (0.3, 10, -10), (0.6, -30, -10)


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([(1, SHIPS), (4, SHIPS), (16, OFFS), (64, OFFS)],
         "ship up to 4 concurrent users; off from 16 concurrent users"),
        ([(1, SHIPS), (8, TRADES), (64, OFFS)],
         "ship at 1 concurrent user; tradeoff at 8 concurrent users; off from 64 concurrent users"),
        ([(1, SHIPS), (8, SHIPS)], "ship at every measured level (1 to 8 concurrent users)"),
        ([(4, OFFS)], "off at 4 concurrent users"),
        ([(2, SHIPS), (8, TRADES), (16, TRADES), (32, OFFS)],
         "ship up to 2 concurrent users; tradeoff from 8 to 16 concurrent users; "
         "off from 32 concurrent users"),
    ],
)
def test_ladder_summary_names_the_crossover(pairs, expected):
    assert ladder_summary(_judged(*pairs)) == expected


def test_overall_is_the_serving_level_verdict_when_given():
    judged = _judged((1, SHIPS), (64, OFFS))
    verdict, summary = overall(judged, 64)
    assert verdict == OFF
    assert "at your serving concurrency (64 concurrent users)" in summary
    verdict, summary = overall(judged, 48)
    assert verdict == OFF and "nearest your serving concurrency (48)" in summary
    assert overall(judged, 2)[0] == SHIP


def test_overall_without_serving_level():
    assert overall(_judged((1, SHIPS), (4, SHIPS)), None)[0] == SHIP
    assert overall(_judged((1, SHIPS), (64, OFFS)), None)[0] == TRADEOFF
    assert overall(_judged((1, OFFS), (64, OFFS)), None)[0] == OFF
    inconclusive = judge_level(level(0.6, 0, 0, users=8), TH)
    assert overall([inconclusive], None)[0] == INCONCLUSIVE
    assert overall([inconclusive, *_judged((1, SHIPS))], None)[0] == SHIP


def test_build_verdict_carries_run_warnings_as_warnings_and_disagreements_as_cross_check_diagnoses():
    warned = [("candidate", "client saw 5% more tokens")]
    result = build_verdict([level(0.9, -30, 20)], TH,
                           run_warnings=[*warned, ("baseline", "event loop lagged")], crosscheck=warned)
    assert result.warnings == ("candidate: client saw 5% more tokens", "baseline: event loop lagged")
    assert [d.kind for d in result.diagnoses] == ["cross_check"]
    assert result.diagnoses[0].evidence == {"arm": "candidate", "warning": "client saw 5% more tokens"}


def test_low_acceptance_is_off_but_says_when_both_measurements_improved():
    result = judge_level(level(0.41, -70, +175), TH)
    assert result.verdict == OFF
    assert "although both per-token latency and throughput improved" in result.reasons[0]
    assert "--off-acceptance 0.36" in result.reasons[0]
    plain = judge_level(level(0.41, +10, -10), TH)
    assert plain.verdict == OFF and "although" not in plain.reasons[0]


def lag(share: float, max_ms: float = 40.0) -> ClientLag:
    return ClientLag(samples=1000, late_samples=int(share * 1000), late_share=share, max_lag_ms=max_ms)


@pytest.mark.parametrize(
    ("baseline_lag", "candidate_lag", "expected"),
    [
        (None, None, SHIP),  # a summary without per-level lag judges as before
        (lag(0.0), lag(0.0), SHIP),
        (lag(0.05), lag(0.05), SHIP),  # exactly the threshold is still judged
        (lag(0.0), lag(0.0501), INCONCLUSIVE),  # just above it is not
        (lag(0.20), lag(0.0), INCONCLUSIVE),  # either arm lagging is enough
        (lag(0.20), None, INCONCLUSIVE),
    ],
)
def test_a_level_measured_by_a_lagging_client_is_inconclusive(baseline_lag, candidate_lag, expected):
    result = judge_level(level(0.9, -30, +20, baseline_lag=baseline_lag, candidate_lag=candidate_lag), TH)
    assert result.verdict == expected, result.reasons


def test_the_lag_reason_names_the_arm_the_share_the_worst_lag_and_the_remedy():
    result = judge_level(level(0.9, -30, +20, users=64, candidate_lag=lag(0.123, 87.4)), TH)
    assert result.reasons == ("candidate: the load generator was behind 12.3% of the time at this level "
                              "(max 87 ms): its numbers measure the client, not the server; "
                              "add --processes or workers",)


def test_the_client_lag_threshold_is_a_parameter():
    lagging = level(0.9, -30, +20, candidate_lag=lag(0.08))
    assert judge_level(lagging, TH).verdict == INCONCLUSIVE
    assert judge_level(lagging, Thresholds(max_client_late_share=0.1)).verdict == SHIP


def test_only_the_lagging_level_of_a_ladder_is_inconclusive():
    levels = [level(0.9, -30, +20, users=1, candidate_lag=lag(0.0)),
              level(0.9, -30, +20, users=64, candidate_lag=lag(0.3))]
    result = build_verdict(levels, TH)
    assert [lv.verdict for lv in result.levels] == [SHIP, INCONCLUSIVE]
    assert result.verdict == SHIP
