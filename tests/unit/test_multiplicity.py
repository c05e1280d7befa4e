"""Many questions at once: Holm keeps the chance of any false claim among the levels at alpha, Benjamini-
Hochberg the share of false claims among a breakdown's, and a p-value never disagrees with its interval."""

from __future__ import annotations

import numpy as np
import pytest
from locust_spec.analysis import multiplicity, stats
from locust_spec.analysis import rule as rules
from locust_spec.analysis.model import LevelInput
from locust_spec.analysis.stats import Interval
from locust_spec.analysis.verdict import INCONCLUSIVE, SHIP, Thresholds, build_verdict

from tests.unit.test_verdict_rules import arm, spec


def test_holm_multiplies_the_smallest_by_the_number_of_questions_and_steps_down():
    assert multiplicity.holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert multiplicity.holm([0.2, 0.5]) == pytest.approx([0.4, 0.5])
    assert multiplicity.holm([0.9, 0.8]) == [1.0, 1.0]


def test_benjamini_hochberg_q_values_are_monotone_in_p():
    # sorted 0.01, 0.03, 0.04, 0.5 -> 0.04, 0.06, 0.0533, 0.5, then the running minimum from the top
    q = multiplicity.benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert multiplicity.benjamini_hochberg([None, 0.02]) == [None, 0.02]


def test_each_members_smallest_weighted_p_is_its_p_and_its_questions_carry_its_adjustment():
    # two levels, their questions' p-values already weighted on the level's alpha (rule.weighted)
    out = multiplicity.adjust([{"p": 0.01, "g1": 0.02, "g2": 0.5}, {"p": 0.02, "g1": 0.9}], multiplicity.HOLM)
    # Holm over the levels' smallest (0.01, 0.02) -> 0.02, 0.02: the first level's questions doubled
    assert out == [{"p": pytest.approx(0.02), "g1": pytest.approx(0.04), "g2": pytest.approx(1.0)},
                   {"p": pytest.approx(0.02), "g1": pytest.approx(0.9)}]


def test_a_level_spends_most_of_its_alpha_on_its_primary_and_the_rest_on_its_guards():
    rule = rules.rule_for("latency", "output_tok_s", offered=False, margin_pct=5, noise_pct=2)
    weighted = rules.weighted(rule, {"tpot_p50_ms": 0.04, "tpot_p90_ms": 0.01, "ttft_p50_ms": None,
                                     "output_tok_s": 0.001})
    assert weighted == {"tpot_p50_ms": pytest.approx(0.05), "tpot_p90_ms": pytest.approx(0.15),
                        "ttft_p50_ms": None, "output_tok_s": pytest.approx(0.015)}


@pytest.mark.parametrize("df", [3, 5, 11, 23])
def test_a_p_value_is_at_or_below_alpha_exactly_when_the_interval_clears_the_bound(df):
    rng = np.random.default_rng(df)
    for _ in range(200):
        est = rng.normal(0, 10)
        lo, hi = est - abs(rng.normal(5, 3)), est + abs(rng.normal(5, 3))
        ci = Interval(est, lo, hi, method="paired t", df=df)
        for bound in (-2.0, 2.0, 5.0, -5.0):
            above = stats.p_beyond(ci, bound, above=True)
            below = stats.p_beyond(ci, bound, above=False)
            assert (above <= 0.05 + 1e-9) == (lo > bound - 1e-9) or abs(lo - bound) < 1e-6
            assert (below <= 0.05 + 1e-9) == (hi < bound + 1e-9) or abs(hi - bound) < 1e-6


def _level(users: int, tpot: tuple[float, float, float]) -> LevelInput:
    guards = {"tpot_p90_ms": Interval(-20.0, -25.0, -15.0, method="t", df=5),
              "ttft_p50_ms": Interval(0.0, -1.0, 1.0, method="t", df=5),
              "output_tok_s": Interval(20.0, 15.0, 25.0, method="t", df=5)}
    return LevelInput(users, arm(), arm(itl=20.0 * (1 + tpot[0] / 100)), spec(0.8),
                      changes={"tpot_p50_ms": Interval(*tpot, method="t", df=5), **guards})


def test_a_level_that_clears_the_band_alone_is_inconclusive_when_holm_over_the_ladder_says_chance():
    # 1 user: TPOT p50 clears the band by a hair (p just under 0.05); the other levels do not move at all
    marginal = (-8.0, -14.0, -2.5)
    alone = build_verdict([_level(1, marginal)], Thresholds())
    assert alone.levels[0].verdict == SHIP
    ladder = build_verdict([_level(1, marginal), _level(4, (0.0, -1.0, 1.0)), _level(16, (0.5, -1.0, 1.5))],
                           Thresholds())
    first = ladder.levels[0]
    assert first.verdict == INCONCLUSIVE, first.reasons
    assert "its interval clears the band, but not after Holm's step-down over the levels" in first.reasons[0]
    assert first.tests["tpot_p50_ms"]["p_value"] < 0.05 < first.tests["tpot_p50_ms"]["p_adjusted"]
    # a strong effect survives the same ladder
    strong = build_verdict([_level(1, (-40.0, -45.0, -35.0)), _level(4, (0.0, -1.0, 1.0))], Thresholds())
    assert strong.levels[0].verdict == SHIP


def test_an_interval_end_piled_on_its_estimate_is_no_certainty():
    # a task's TPOT p90 over a few requests per block pair: every replicate on one side of the estimate
    piled = Interval(14.9, 14.9, 84.7, method="paired bootstrap", df=5)
    assert stats.p_beyond(piled, 5.0, above=True) > 0.05  # the other side's width stands in
    assert stats.p_beyond(Interval(10.0, 10.0, 10.0, method="paired bootstrap", df=5), 5.0, above=True) == 0.0
