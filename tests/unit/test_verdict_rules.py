"""The verdict rules, level by level and overall, as tables of cases."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from locust_spec.analysis import stats
from locust_spec.analysis.model import ArmMetrics, Batch, ClientLag, LevelInput, SpecStats
from locust_spec.analysis.stats import Interval
from locust_spec.analysis.verdict import (
    DEPENDS,
    INCONCLUSIVE,
    OFF,
    SHIP,
    TRADEOFF,
    Thresholds,
    build_verdict,
    crossover,
    judge_level,
    ladder_summary,
    overall,
)

TH = Thresholds()


def arm(itl=20.0, tput=100.0, *, requests=50, failures=0, tokens=10_000, ttft=50.0, gap=20.0, tpc=1.0,
        spread=None) -> ArmMetrics:
    return ArmMetrics(requests=requests, failures=failures, ttft_p50_ms=ttft, itl_p50_ms=itl,
                      itl_p95_ms=itl * 2, tpot_p50_ms=itl, tpot_p90_ms=itl * 1.5, chunk_gap_p50_ms=gap,
                      output_tok_s=tput,
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
        # the declared rule (latency): TPOT p50 better beyond the band, every guard within its 5% margin
        (0.80, -30, +20, SHIP),
        (0.80, -30, -1.9, SHIP),  # a throughput fall inside the band does not count
        (0.80, -30, -4.9, SHIP),  # nor one inside the 5% non-inferiority margin
        (0.80, -30, -10, TRADEOFF),  # latency better, throughput fell beyond the margin
        (0.80, +10, -10, OFF),  # a measured loss on the primary
        (0.80, +10, 0, OFF),
        (0.60, 0, -10, OFF),  # a guard's measured loss while the primary did not improve
        (0.60, -2.5, 0, SHIP),  # just outside the band counts
        # nothing moved on the primary: no word, whatever acceptance says
        (0.95, 0, 0, INCONCLUSIVE),
        (0.60, 0, +10, INCONCLUSIVE),  # throughput is a guard here, not the question
        (0.60, 1.5, -1.5, INCONCLUSIVE),  # both inside the 2% band: a tie
        (0.60, 2.0, -2.0, INCONCLUSIVE),  # exactly on the band edge is still inside
        # acceptance never ships nor switches off on its own
        (0.49, -30, +20, SHIP),
        (0.0, -30, +20, SHIP),
        (2 / 3, 0, 0, INCONCLUSIVE),
    ],
)
def test_level_rule_table(acceptance, itl_change, tput_change, expected):
    result = judge_level(level(acceptance, itl_change, tput_change), TH)
    assert result.verdict == expected, result.reasons


@pytest.mark.parametrize(
    ("itl_change", "tput_change", "expected"),
    [(0, +10, SHIP), (-30, +1, INCONCLUSIVE), (-30, -10, OFF), (+10, +10, TRADEOFF)],
)
def test_the_throughput_objective_asks_about_tokens_per_second_with_latency_as_its_guard(
        itl_change, tput_change, expected):
    result = judge_level(level(0.8, itl_change, tput_change), Thresholds(objective="throughput"))
    assert result.verdict == expected, result.reasons
    assert result.tests["output_tok_s"]["role"] == "primary"
    assert result.tests["tpot_p50_ms"]["role"] == "guard"


def test_tradeoff_reason_states_both_numbers_and_directions():
    result = judge_level(level(0.6, -30, -10), TH)
    reason = result.reasons[0]
    assert "TPOT p50 20.0 -> 14.0 ms (-30.0%, better)" in reason
    assert "output 100.0 -> 90.0 tok/s (-10.0%, worse)" in reason
    assert "decision to make, not a result" in reason


@pytest.mark.parametrize(
    ("kwargs", "reason_part"),
    [
        ({"baseline": arm(requests=50, failures=3)}, "baseline failed 3 of 50"),
        ({"candidate": arm(requests=4)}, "candidate has only 4 requests"),
        ({"candidate": arm(tokens=50)}, "candidate has only 50 output tokens"),
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
    assert judge_level(level(0.9, -30, +20), Thresholds(noise_pct=50)).verdict == INCONCLUSIVE
    assert judge_level(level(0.9, -30, -10), Thresholds(margin_pct=15)).verdict == SHIP


def test_repeats_spread_widens_the_noise_band():
    base = arm(spread={"tpot_p50_ms": (18.0, 22.0), "output_tok_s": (90.0, 110.0)})
    cand = arm(itl=19.0, tput=105.0)
    result = judge_level(LevelInput(1, base, cand, spec(0.6)), TH)
    assert result.verdict == INCONCLUSIVE  # a 5% move inside a 20% spread is noise


def test_change_pct_is_candidate_relative_to_baseline():
    result = judge_level(level(0.9, -25, +50), TH)
    assert result.change_pct["tpot_p50_ms"] == pytest.approx(-25)
    assert result.change_pct["output_tok_s"] == pytest.approx(50)
    assert result.acceptance == 0.9


def _judged(*pairs):
    return [judge_level(level(acc, itl, tput, users=u), TH) for u, (acc, itl, tput) in pairs]


SHIPS, OFFS, TRADES = (0.9, -30, 20), (0.3, 10, -10), (0.6, -30, -10)


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([(1, SHIPS), (4, SHIPS), (16, OFFS), (64, OFFS)],
         "ship up to 4 concurrent users; off from 16 concurrent users: "
         "at 16: TPOT p50 +10.0%, output -10.0%; at 64: TPOT p50 +10.0%, output -10.0%"),
        ([(1, SHIPS), (8, TRADES), (64, OFFS)],
         "ship at 1 concurrent user; tradeoff at 8 concurrent users: TPOT p50 -30.0%, output -10.0%; "
         "off at 64 concurrent users: TPOT p50 +10.0%, output -10.0%"),
        ([(1, SHIPS), (8, SHIPS)], "ship at every measured level (1 to 8 concurrent users)"),
        ([(4, OFFS)], "off at 4 concurrent users: TPOT p50 +10.0%, output -10.0%"),
        ([(2, SHIPS), (8, TRADES), (16, TRADES), (32, OFFS)],
         "ship up to 2 concurrent users; tradeoff from 8 to 16 concurrent users: "
         "at 8: TPOT p50 -30.0%, output -10.0%; at 16: TPOT p50 -30.0%, output -10.0%; "
         "off at 32 concurrent users: TPOT p50 +10.0%, output -10.0%"),
    ],
)
def test_ladder_summary_names_the_crossover(pairs, expected):
    assert ladder_summary(_judged(*pairs)) == expected


def test_overall_is_the_serving_level_verdict_when_given():
    judged = _judged((1, SHIPS), (64, OFFS))
    verdict, summary = overall(judged, 64)
    assert verdict == OFF
    assert "at your serving concurrency (64 concurrent users)" in summary
    # between measured levels that disagree: no word from the nearest one, but where to measure
    for serving in (30, 33, 48, 2):
        verdict, summary = overall(judged, serving)
        assert verdict == INCONCLUSIVE, summary
        assert (f"not measured at your serving concurrency ({serving} concurrent users), and the measured "
                f"levels around it disagree (ship at 1 concurrent user, off at 64 concurrent users): measure "
                f"there, e.g. --levels 1,{serving},64") in summary
    agreeing = _judged((1, SHIPS), (16, SHIPS), (64, OFFS))
    verdict, summary = overall(agreeing, 4)
    assert verdict == SHIP and "nearest your serving concurrency (4)" in summary
    assert overall(agreeing, 100)[0] == OFF  # beyond the ladder: the nearest level's, said so


def test_overall_without_serving_level():
    assert overall(_judged((1, SHIPS), (4, SHIPS)), None)[0] == SHIP
    assert overall(_judged((1, SHIPS), (64, OFFS)), None)[0] == DEPENDS
    assert overall(_judged((1, TRADES), (64, TRADES)), None)[0] == TRADEOFF, "tradeoff: TPOT vs throughput"
    assert overall(_judged((1, OFFS), (64, OFFS)), None)[0] == OFF
    inconclusive = judge_level(level(0.6, 0, 0, users=8), TH)
    assert overall([inconclusive], None)[0] == INCONCLUSIVE
    # one word cannot cover a ladder with a level that could not be judged; the summary names both
    verdict, summary = overall([inconclusive, *_judged((1, SHIPS))], None)
    assert verdict == INCONCLUSIVE
    assert summary.startswith("Speculative decoding: ship at 1 concurrent user; inconclusive at 8 ")


def test_build_verdict_carries_run_warnings_as_warnings_and_disagreements_as_cross_check_diagnoses():
    warned = [("candidate", "client saw 5% more tokens")]
    result = build_verdict([level(0.9, -30, 20)], TH,
                           run_warnings=[*warned, ("baseline", "event loop lagged")], crosscheck=warned)
    assert result.warnings == ("candidate: client saw 5% more tokens", "baseline: event loop lagged")
    assert [d.kind for d in result.diagnoses] == ["cross_check"]
    assert result.diagnoses[0].evidence == {"arm": "candidate", "warning": "client saw 5% more tokens"}


def test_acceptance_explains_and_predicts_but_the_timings_decide():
    # identical arms whose prompts accept below one half (SpecBench's tasks): no longer judged off
    same = judge_level(level(0.41, 0, 0), TH)
    assert same.verdict == INCONCLUSIVE
    assert "acceptance 0.41 suggests it does not pay, but only the timings decide" in same.reasons[0]
    assert "TPOT p50 +0.0%: its interval lies inside the +-2% band" in same.reasons[0]
    hopeful = judge_level(level(0.78, -1, 0), TH)
    assert "acceptance 0.78 suggests it pays" in hopeful.reasons[0]
    # a nearly free drafter that pays below the rule of thumb ships on its measurements
    assert judge_level(level(0.41, -70, +175), TH).verdict == SHIP


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
    assert result.verdict == INCONCLUSIVE
    assert result.summary.startswith("Speculative decoding: ship at 1 concurrent user; inconclusive at 64 "
                                     "concurrent users: candidate: the load generator was behind 30.0%")


def _with(acc, changes: dict, acceptance_ci=None, **arms) -> LevelInput:
    base, cand = arms.get("baseline", arm()), arms.get("candidate", arm())
    return LevelInput(users=4, baseline=base, candidate=cand, spec=spec(acc),
                      changes={k: Interval(*v) for k, v in changes.items()}, acceptance_ci=acceptance_ci)


def test_a_2pct_change_inside_its_interval_is_inconclusive():
    # Per-request TPOT of two arms 2% apart in 12 block pairs of 5 requests, with the spread real requests
    # have; throughput per block as tokens over seconds.
    rng = np.random.default_rng(11)
    base_tpot = rng.lognormal(np.log(20), 0.3, 60)
    cand_tpot = rng.lognormal(np.log(20 * 0.98), 0.3, 60)
    units, pairs = np.repeat(np.arange(12), 5), stats.Units.single(12, "block pairs")
    tpot, tpot90 = stats.quantile_changes(base_tpot, units, cand_tpot, units, (0.5, 0.9), pairs)
    seconds = np.bincount(units, base_tpot * 0.1), np.bincount(units, cand_tpot * 0.1)
    tokens = np.full(12, 500.0)
    tput = stats.ratio_change(tokens, seconds[0], tokens, seconds[1], pairs, point_change=2.1)
    assert tput.lo < 2.0 < tput.hi and tpot.lo < -2.0 < tpot.hi  # each straddles the band
    measured = LevelInput(4, arm(), arm(itl=20 * 0.98, tput=102.1), spec(0.6),
                          changes={"tpot_p50_ms": tpot, "tpot_p90_ms": tpot90, "output_tok_s": tput})
    result = judge_level(measured, TH)
    assert result.verdict == INCONCLUSIVE, result.reasons
    assert "TPOT p50 -1.0% [-13.6, +17.5]: its interval straddles the +-2% band" in result.reasons[0]
    # the same +2.1% throughput as a bare point would have counted as better
    assert judge_level(level(0.6, -2.0, +2.1), Thresholds(objective="throughput")).verdict == SHIP


def test_burst_pattern_better_token_weighted_itl_but_worse_tpot_and_throughput_is_off():
    # The README demo at 64 users: bursts of tokens make the token-weighted ITL median fall while every
    # reader waits longer per token and the server delivers fewer tokens per second.
    base = arm(itl=11.18, tput=2132.0)
    cand = replace(arm(itl=7.03, tput=1427.0), tpot_p50_ms=11.34 * 1.3)
    changes = {"tpot_p50_ms": (30.0, 25.0, 35.0), "tpot_p90_ms": (31.0, 28.0, 36.0),
               "output_tok_s": (-33.1, -34.4, -31.8), "itl_p50_ms": (-37.1, None, None)}
    result = judge_level(_with(0.6, changes, baseline=base, candidate=cand), TH)
    assert result.verdict == OFF, result.reasons
    assert result.changes["itl_p50_ms"].estimate < 0  # ITL "improved", and it did not decide
    assert "TPOT p50" in result.reasons[0] and "-33.1% [-34.4, -31.8]" in result.reasons[0]
    assert "ITL" not in result.reasons[0]


def test_an_acceptance_interval_never_decides_the_measurements_do():
    changes = {"tpot_p50_ms": (-1.0, -1.5, -0.5), "tpot_p90_ms": (-1.0, -1.5, -0.5),
               "output_tok_s": (-12.0, -14.0, -11.0)}
    for acc, ci in ((0.75, Interval(0.75, 0.70, 0.80)), (0.75, Interval(0.75, 0.55, 0.90)),
                    (0.0, Interval(0.0, 0.0, 0.0))):
        result = judge_level(_with(acc, changes, acceptance_ci=ci), TH)
        assert result.verdict == OFF, result.reasons
        assert result.reasons[0].startswith(
            "output tok/s -12.0% [-14.0, -11.0] worse beyond its 5% margin while TPOT p50 -1.0% [-1.5, -0.5] "
            "did not improve: a measured loss, switch it off")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # TPOT p50 better but its tail worse: a tradeoff, not a ship
        ({"tpot_p50_ms": (-20, -25, -15), "tpot_p90_ms": (15, 10, 20), "output_tok_s": (10, 5, 15)},
         TRADEOFF),
        # high acceptance but a throughput interval across the band: a fall cannot be ruled out
        ({"tpot_p50_ms": (-20, -25, -15), "tpot_p90_ms": (-20, -25, -15), "output_tok_s": (-1, -6, 4)},
         INCONCLUSIVE),
        ({"tpot_p50_ms": (-20, -25, -15), "tpot_p90_ms": (-20, -25, -15), "output_tok_s": (10, 5, 15)}, SHIP),
    ],
)
def test_high_acceptance_judged_by_intervals(changes, expected):
    result = judge_level(_with(0.9, changes, acceptance_ci=Interval(0.9, 0.85, 0.95)), TH)
    assert result.verdict == expected, result.reasons


def test_crossover_interpolates_where_speculation_stops_paying_with_the_batch_there():
    def lv(users, tpot, tput, batch):
        level = _with(0.6, {"tpot_p50_ms": tpot, "tpot_p90_ms": tpot, "output_tok_s": tput})
        return replace(level, users=users, candidate_batch=Batch(batch, batch, 0.0, 0.0, 10))

    result = build_verdict([lv(1, (-40, -45, -35), (60, 50, 70), 1.0),
                            lv(4, (-10, -14, -6), (20, 14, 26), 4.0),
                            lv(16, (10, 6, 14), (-20, -26, -14), 15.0)], TH)
    tpot, tput = result.crossover
    assert tpot.metric == "tpot_p50_ms" and tput.metric == "output_tok_s"
    assert tpot.between_users == (4, 16) and 4 < tpot.users < 16
    assert tpot.users_ci95[0] < tpot.users < tpot.users_ci95[1]
    assert 4.0 < tpot.batch < 15.0
    assert "stops paying at about" in tpot.note
    assert "ship up to 4 concurrent users (batch ~1 to ~4); off at 16 concurrent users (batch ~15): " \
           "TPOT p50 +10.0% [+6.0, +14.0]" in result.summary


def test_crossover_says_when_the_top_level_gain_is_not_clear_of_zero():
    def lv(users, tpot):
        return replace(_with(0.6, {"tpot_p50_ms": tpot, "tpot_p90_ms": tpot, "output_tok_s": (10, 5, 15)}),
                       users=users)

    tpot, tput = build_verdict([lv(1, (-60, -65, -55)), lv(64, (0.0, -4.8, 3.8))], TH).crossover
    assert tpot.users is None
    assert tpot.note == "TPOT p50: no crossing the intervals support (better at 1; inconclusive at 64)"
    assert tput.note == "output: speculation pays at every measured level"


def test_crossover_lines_claim_only_what_the_intervals_show():
    def lv(users, tput):
        return replace(_with(0.6, {"tpot_p50_ms": (-5, -9, -3), "tpot_p90_ms": (-5, -9, -3),
                                   "output_tok_s": tput}), users=users)

    # real vLLM A/A: the estimate fell at the lowest level, but its interval held zero
    _, tput = build_verdict([lv(1, (-6.3, -27.4, 14.9)), lv(4, (-12.0, -30.0, 8.0))], TH).crossover
    assert "does not pay" not in tput.note and tput.users is None
    assert tput.note == "output: no crossing the intervals support (inconclusive at 1, 4)"
    # estimates that cross zero between two unclear levels are no crossing either
    _, tput = build_verdict([lv(1, (6.0, -5.0, 17.0)), lv(4, (-6.0, -17.0, 5.0))], TH).crossover
    assert tput.users is None and "no crossing" in tput.note
    # a clearly worse lowest level does not pay
    _, tput = build_verdict([lv(1, (-20.0, -27.0, -13.0)), lv(4, (-30.0, -37.0, -23.0))], TH).crossover
    assert tput.note == "output: speculation does not pay even at the lowest level"


def test_levels_that_disagree_say_depends_and_up_to_which_level_speculation_pays():
    judged = _judged((1, SHIPS), (4, SHIPS), (16, TRADES), (64, OFFS))
    verdict, summary = overall(judged, None, crossover(judged, "output_tok_s"))
    assert verdict == DEPENDS
    sentence = summary.split(". ", 1)[1]
    assert sentence.startswith("Speculation pays up to 4 concurrent users, not at 16 concurrent users "
                               "(tradeoff); ")
    # the crossover the verdict computes (TPOT better at 4, worse at 64) says where the turn lies
    assert "speculation stops paying at about" in sentence and "between 4 and" in sentence
    assert sentence.endswith("spec-verdict --serving-concurrency N gives the verdict at the concurrency you "
                             "serve.")
    # one that does not pay at the bottom of the ladder says so, and where it ships
    verdict, summary = overall(_judged((1, OFFS), (64, SHIPS)), None)
    assert verdict == DEPENDS and "It does not pay at the lowest level (1 concurrent user: off); it ships " \
        "only at 64 concurrent users." in summary
