"""Confidence intervals: they cover the truth about as often as they claim, and shrink with evidence."""

from __future__ import annotations

import numpy as np
import pytest
from locust_spec.analysis import stats


def test_quantile_matches_numpy():
    x = np.random.default_rng(3).normal(size=101)
    for q in (0.1, 0.5, 0.9, 0.99):
        assert stats.quantile(x, q) == pytest.approx(np.quantile(x, q))
    assert stats.quantile([], 0.5) is None


@pytest.mark.parametrize("statistic", [0.5, 0.9, stats.MEAN])
def test_change_interval_covers_a_null_change_about_95_percent(statistic):
    rng = np.random.default_rng(7)
    hits = 0
    trials = 200
    for i in range(trials):
        base, cand = rng.lognormal(2, 0.4, 200), rng.lognormal(2, 0.4, 200)
        ci = stats.change_ci(base, cand, statistic, seed=i)
        hits += ci.lo <= 0 <= ci.hi
    assert 0.88 <= hits / trials <= 0.995


def test_change_interval_finds_a_real_change_and_shrinks_with_requests():
    rng = np.random.default_rng(1)
    small = stats.change_ci(rng.lognormal(2, 0.3, 50), rng.lognormal(2, 0.3, 50) * 1.2, 0.5)
    large = stats.change_ci(rng.lognormal(2, 0.3, 50_000), rng.lognormal(2, 0.3, 50_000) * 1.2, 0.5)
    assert large.lo > 15 and large.hi < 25
    assert (large.hi - large.lo) < (small.hi - small.lo) / 10


def test_million_rows_are_exact_and_cheap_enough_to_run_here():
    rng = np.random.default_rng(2)
    x = rng.lognormal(2, 0.5, 1_000_000)
    ci = stats.change_ci(x, x * 1.05, 0.9)
    assert ci.lo < 5 < ci.hi and ci.hi - ci.lo < 1.5
    tokens = np.full(len(x), 100.0)
    rate = stats.rate_change_ci(tokens, x, tokens, x * 1.05)
    assert rate.lo < -100 / 21 < rate.hi  # 1/1.05 - 1


def test_too_few_values_give_no_interval():
    assert not stats.change_ci([1.0], [2.0, 3.0]).measured
    assert not stats.quantile_ci([1.0], 0.5).measured
    assert stats.ratio_ci([3], [4]).estimate == 0.75
    assert not stats.ratio_ci([3], [4]).measured
    assert stats.ratio_ci([], []).estimate is None


def test_acceptance_is_resampled_by_unit_not_by_token():
    # Six requests, each all-or-nothing: as tokens they would look like 6000 independent trials.
    accepted = np.array([1000, 0, 1000, 0, 1000, 1000])
    drafted = np.full(6, 1000)
    ci = stats.ratio_ci(accepted, drafted)
    assert ci.estimate == pytest.approx(4 / 6)
    assert ci.hi - ci.lo > 0.4
    # Decisive with few units: nothing accepted anywhere.
    none = stats.ratio_ci(np.zeros(6), np.full(6, 3056))
    assert (none.lo, none.hi) == (0.0, 0.0)


def test_rate_interval_is_centred_on_the_callers_point_change():
    rng = np.random.default_rng(4)
    dur = rng.lognormal(0, 0.2, 300)
    tokens = np.full(300, 100.0)
    ci = stats.rate_change_ci(tokens, dur, tokens, dur * 0.8, point_change=30.0)
    assert ci.estimate == 30.0 and ci.lo < 30.0 < ci.hi


def test_repeats_widen_the_interval_by_the_spread_between_runs():
    rng = np.random.default_rng(5)
    runs = [rng.normal(10 + shift, 1, 2000) for shift in (-0.4, 0.0, 0.4)]
    values, groups = np.concatenate(runs), np.repeat([0, 1, 2], 2000)
    pooled = stats.quantile_ci(values, 0.5)
    clustered = stats.quantile_ci(values, 0.5, groups=groups)
    assert (clustered.hi - clustered.lo) > 3 * (pooled.hi - pooled.lo)
    with pytest.raises(ValueError):
        stats.quantile_ci(values, 0.5, groups=groups[:10])


@pytest.mark.parametrize(
    ("lo", "hi", "lower_is_better", "expected"),
    [
        (-9.0, -3.0, True, stats.BETTER),
        (-9.0, -3.0, False, stats.WORSE),
        (3.0, 9.0, True, stats.WORSE),
        (-1.5, 1.9, True, stats.SAME),
        (-1.0, 5.0, True, stats.INCONCLUSIVE),
        (-2.0, 2.0, False, stats.SAME),  # on the band edge is inside
    ],
)
def test_classify_against_the_band(lo, hi, lower_is_better, expected):
    interval = stats.Interval((lo + hi) / 2, lo, hi)
    assert stats.classify(interval, 2.0, lower_is_better=lower_is_better) == expected
    assert stats.classify(stats.UNKNOWN, 2.0, lower_is_better=True) == stats.UNKNOWN_DIRECTION


def test_crossing_interpolates_in_log_concurrency_with_its_interval():
    gains = [stats.Interval(30, 20, 40), stats.Interval(10, 2, 18), stats.Interval(-5, -12, 1),
             stats.Interval(-20, -25, -15)]
    found = stats.crossing([1, 4, 16, 64], gains)
    assert found.between == (4.0, 16.0)
    assert 4 < found.lo < found.x < found.hi < 64
    assert stats.crossing([1, 4], gains[:2]).x is None
