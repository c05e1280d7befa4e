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


def _blocks(rng, pairs: int, per_block: int, shift: float = 0.0, block_sd: float = 0.2):
    """Two arms' per-request values in `pairs` block pairs: each pair shares a state of the machine
    (a shift both arms see), each block adds its own, requests scatter around it."""
    state = rng.normal(0, block_sd, pairs)
    units = np.repeat(np.arange(pairs), per_block)
    base = np.exp(2 + state[units] + np.repeat(rng.normal(0, 0.1, pairs), per_block)
                  + rng.normal(0, 0.3, len(units)))
    cand = np.exp(2 + shift + state[units] + np.repeat(rng.normal(0, 0.1, pairs), per_block)
                  + rng.normal(0, 0.3, len(units)))
    return base, cand, units


@pytest.mark.parametrize("pairs", [4, 12])
def test_a_null_change_is_covered_at_least_95_percent_over_few_or_many_block_pairs(pairs):
    rng = np.random.default_rng(7)
    hits = trials = 150
    for i in range(trials):
        base, cand, units = _blocks(rng, pairs, 8)
        p50, p90 = stats.quantile_changes(base, units, cand, units, (0.5, 0.9),
                                          stats.Units.single(pairs, "block pairs"), seed=i, resamples=400)
        hits -= not (p50.lo <= 0 <= p50.hi)
    assert 0.93 <= hits / trials <= 1.0


def test_requests_of_one_block_are_not_independent_units():
    # Six blocks whose states differ a lot: resampling the 600 requests would pretend to a narrow interval.
    rng = np.random.default_rng(3)
    base, cand, units = _blocks(rng, 6, 100, block_sd=0.0)
    cand *= np.exp(np.repeat(rng.normal(0, 0.15, 6), 100))  # each candidate block off by its own state
    by_block = stats.quantile_changes(base, units, cand, units, (0.5,), stats.Units.single(6, "blocks"))[0]
    by_request = stats.quantile_changes(base, np.arange(600), cand, np.arange(600), (0.5,),
                                        stats.Units.single(600, "requests"))[0]
    assert (by_block.hi - by_block.lo) > 3 * (by_request.hi - by_request.lo)
    assert by_block.units == 6 and by_block.df == 5 and by_block.unit == "blocks"


def test_a_real_change_is_found_and_the_interval_shrinks_with_units():
    rng = np.random.default_rng(1)
    def change(pairs: int) -> stats.Interval:
        base, cand, units = _blocks(rng, pairs, 10, shift=np.log(1.2))
        return stats.quantile_changes(base, units, cand, units, (0.5,), stats.Units.single(pairs))[0]

    few, many = change(4), change(60)
    assert many.lo > 5 and 10 < many.estimate < 30
    assert (many.hi - many.lo) < (few.hi - few.lo) / 2


def test_unpaired_arms_are_resampled_each_on_its_own_units():
    rng = np.random.default_rng(8)
    base, cand, units = _blocks(rng, 10, 10, shift=np.log(1.3))
    ci = stats.quantile_changes(base, units, cand, units, (0.5,), stats.Units.single(10, "blocks"),
                                stats.Units.single(10, "blocks"))[0]
    assert ci.units == 20 and ci.df == 9 and ci.lo < 30 < ci.hi and "paired" not in ci.method


def test_million_rows_are_cheap_enough_to_run_here_and_many_units_are_merged():
    rng = np.random.default_rng(2)
    x = rng.lognormal(2, 0.5, 1_000_000)
    units = np.repeat(np.arange(1000), 1000)  # a long level: 1000 blocks, merged to 100 neighbours
    p50, p90 = stats.quantile_changes(x, units, x * 1.05, units, (0.5, 0.9), stats.Units.single(1000))
    assert p90.lo == pytest.approx(5) and p90.hi == pytest.approx(5)  # every block exactly 5% slower
    assert p90.units == stats.MAX_UNITS_PER_RUN
    tokens, seconds = np.full(1000, 1e5), np.bincount(units, x)
    rate = stats.ratio_change(tokens, seconds, tokens, seconds * 1.05, stats.Units.single(1000))
    # every unit exactly 1/1.05 - 1: the paired t has no spread to widen it
    assert rate.lo == pytest.approx(-100 / 21) and rate.hi == pytest.approx(-100 / 21)


def test_too_few_units_give_no_interval():
    one = stats.Units.single(1)
    assert not stats.quantile_changes([1.0, 2.0], [0, 0], [2.0, 3.0], [0, 0], (0.5,), one)[0].measured
    two = stats.Units.single(2)
    assert not stats.quantile_changes([1.0], [0], [2.0, 3.0], [0, 0], (0.5,), two)[0].measured
    assert not stats.quantile_interval([1.0, 2.0], [0, 0], 0.5, one).measured
    assert stats.ratio_interval([3], [4], one).estimate == 0.75
    assert not stats.ratio_interval([3], [4], one).measured
    assert stats.ratio_interval([], [], stats.Units.single(0)).estimate is None


def test_acceptance_is_resampled_by_unit_not_by_token():
    # Six prompts, each all-or-nothing: as tokens they would look like 6000 independent trials.
    accepted = np.array([1000, 0, 1000, 0, 1000, 1000])
    drafted = np.full(6, 1000)
    ci = stats.ratio_interval(accepted, drafted, stats.Units.single(6, "prompts"))
    assert ci.estimate == pytest.approx(4 / 6)
    assert ci.hi - ci.lo > 0.4
    # Decisive with few units: nothing accepted anywhere (18,336 drafted tokens in 4 requests).
    none = stats.ratio_interval(np.zeros(4), np.full(4, 4584), stats.Units.single(4, "prompts"))
    assert (none.lo, none.hi) == (0.0, 0.0)


def test_thousands_of_units_moving_in_lockstep_need_no_matrix_to_be_positive_definite():
    # 2,560 requests at 64 users with fixed output lengths and full-k drafts: accepted and drafted are
    # proportional; the old normal approximation of the resampled sums failed on their singular covariance.
    drafted = np.full(2560, 256.0)
    ci = stats.ratio_interval(drafted * 0.75, drafted, stats.Units.single(2560, "prompts"))
    assert (ci.estimate, ci.lo, ci.hi) == pytest.approx((0.75, 0.75, 0.75))


def test_ratio_interval_is_moved_onto_the_callers_point():
    rng = np.random.default_rng(4)
    seconds = rng.lognormal(0, 0.2, 30)
    ci = stats.ratio_interval(np.full(30, 100.0), seconds, stats.Units.single(30), point=150.0)
    assert ci.estimate == 150.0 and ci.lo < 150.0 < ci.hi


def test_repeats_are_an_outer_cluster_that_widens_the_interval():
    rng = np.random.default_rng(5)
    units = np.repeat(np.arange(30), 100)
    runs = np.repeat([0, 1, 2], 10)  # three runs of ten blocks, each run off by its own state
    values = rng.normal(10 + np.repeat([-0.4, 0.0, 0.4], 1000), 1.0)
    pooled = stats.quantile_interval(values, units, 0.5, stats.Units.single(30))
    clustered = stats.quantile_interval(values, units, 0.5, stats.Units(runs))
    assert (clustered.hi - clustered.lo) > 2 * (pooled.hi - pooled.lo)
    with pytest.raises(ValueError):
        stats.quantile_interval(values, units[:10], 0.5, stats.Units.single(30))


def test_t_quantiles_and_the_smallest_detectable_change():
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert stats.t_quantile(0.975, 5) == pytest.approx(2.571, abs=1e-3)
    assert stats.t_quantile(0.8, 10) == pytest.approx(0.879, abs=1e-3)
    assert stats.t_quantile(0.025, 30) == pytest.approx(-2.042, abs=1e-3)
    # +-10% in log terms over 10 units: SE = log(1.1) / t(9); MDE = band + d SE, d the noncentral t's
    t9 = stats.t_quantile(0.975, 9)
    ci = stats.Interval(0.0, (1 / 1.1 - 1) * 100, 10.0, units=10, df=9)
    d = t9 + 0.8416212335729143 * np.sqrt(1 + t9 ** 2 / 18)
    assert ci.mde_pct(2.0) == pytest.approx((np.exp(np.log(1.02) + d * np.log(1.1) / t9) - 1) * 100)
    assert stats.Interval.point(3.0).mde_pct(2.0) is None and stats.UNKNOWN.mde_pct(2.0) is None


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


def test_an_interval_holds_its_estimate_even_where_the_log_round_trip_loses_a_float_bit():
    # 26.377...% through log1p and back is 3.6e-15 less: a zero-width interval used to end below its estimate
    change = 26.377461897661405
    ci = stats.ratio_change(np.ones(5), np.ones(5), np.ones(5), np.ones(5), stats.Units.single(5),
                            point_change=change)
    assert ci.lo <= ci.estimate <= ci.hi
    assert stats.around(1.0, 1.0 - 1e-3, 1.0 - 2e-14) == (1.0 - 1e-3, 1.0)


def _tput_coverage(pairs: int, method: str, trials: int = 600) -> float:
    rng = np.random.default_rng(pairs)
    held = 0
    for i in range(trials):
        state = rng.normal(0, 0.2, pairs)  # both arms' blocks of a pair share the machine's state
        seconds = np.full(pairs, 5.0)
        base = 500 * np.exp(state + rng.normal(0, 0.08, pairs))
        cand = 500 * np.exp(state + rng.normal(0, 0.08, pairs))
        ci = stats.ratio_change(base, seconds, cand, seconds, stats.Units.single(pairs, "block pairs"),
                                seed=i, resamples=400, method=method)
        held += ci.lo <= 0 <= ci.hi
    return held / trials


@pytest.mark.parametrize("pairs", [4, 6])
def test_throughput_over_few_block_pairs_is_a_paired_t_that_covers_95_percent(pairs):
    # the bootstrap's spread shrinks by sqrt((n - 1) / n): over 4-6 pairs it covered about 91-93%
    assert 0.94 <= _tput_coverage(pairs, stats.PAIRED_T) <= 0.97
    assert _tput_coverage(pairs, stats.BOOTSTRAP) < 0.94


def test_the_paired_t_is_the_units_log_ratios_mean_plus_minus_t_standard_errors_around_the_point():
    seconds = np.full(5, 5.0)
    base, cand = np.array([500.0, 520, 480, 510, 490]), np.array([550.0, 560, 540, 575, 530])
    ci = stats.ratio_change(base, seconds, cand, seconds, stats.Units.single(5, "block pairs"))
    logs = np.log(cand / base)
    half = stats.t_quantile(0.975, 4) * logs.std(ddof=1) / np.sqrt(5)
    point = np.log(cand.sum() / base.sum())
    assert ci.estimate == pytest.approx(np.expm1(point) * 100)
    assert (ci.lo, ci.hi) == pytest.approx((np.expm1(point - half) * 100, np.expm1(point + half) * 100))
    assert ci.method == "paired t over block pairs" and ci.df == 4


def test_a_change_the_size_of_the_reported_mde_is_found_about_80_percent_of_the_time():
    rng, pairs, seconds = np.random.default_rng(5), 6, np.full(6, 5.0)
    units = stats.Units.single(pairs, "block pairs")

    def level(effect: float) -> stats.Interval:
        base = 500 * np.exp(rng.normal(0, 0.1, pairs))
        return stats.ratio_change(base, seconds, base * np.exp(effect + rng.normal(0, 0.1, pairs)), seconds,
                                  units)

    mde = float(np.median([level(0.0).mde_pct(2.0) for _ in range(400)]))
    found = [stats.classify(level(np.log1p(mde / 100)), 2.0, lower_is_better=False) == stats.BETTER
             for _ in range(1000)]
    assert 0.77 <= np.mean(found) <= 0.86  # (t + t_power) standard errors found it 74.7% of the time


def test_a_quantile_read_off_one_or_two_requests_gets_no_interval():
    rng = np.random.default_rng(4)
    base, cand, units = _blocks(rng, 5, 2)  # 10 requests per arm: the p90 lies between the last two
    p50, p90 = stats.quantile_changes(base, units, cand, units, (0.5, 0.9), stats.Units.single(5))
    assert p50.measured and not p90.measured and p90.estimate is not None
    assert p90.method == "too few requests for a p90 (10)"
    base, cand, units = _blocks(rng, 11, 1)  # eleven: one request beyond its position
    assert stats.quantile_changes(base, units, cand, units, (0.9,), stats.Units.single(11))[0].measured
