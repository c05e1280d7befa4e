"""The open-loop arrival schedule (core/arrivals.py): counts, spread, shape, and every process's share."""

from __future__ import annotations

import math

import numpy as np
import pytest

from locust_spec.core.arrivals import (
    TRACE,
    ArrivalPlan,
    SlotCounter,
    arrivals,
    coefficient_of_variation,
    count_by_slot,
    level_seed,
    offsets,
)

T0 = 1_700_000_000.0


def times(plan: ArrivalPlan, seconds: float, slot: int = 0) -> np.ndarray:
    return np.array([t for _, t in arrivals(plan, slot, T0 + seconds)])


def test_poisson_arrivals_come_at_the_rate_with_exponential_gaps():
    got = times(ArrivalPlan(40, seed=7, start_unix_s=T0), 600)
    assert abs(len(got) - 24_000) < 3 * math.sqrt(24_000)  # Poisson count: within three sigma
    assert 0.97 < coefficient_of_variation(got) < 1.03
    assert got[0] == T0 and np.all(np.diff(got) >= 0)


def test_constant_arrivals_are_exactly_one_gap_apart():
    got = times(ArrivalPlan(40, "constant", start_unix_s=T0), 60)
    assert len(got) == 2400
    assert coefficient_of_variation(got) < 1e-4  # what float unix times leave of zero
    assert got[-1] - T0 == pytest.approx(2399 / 40, abs=1e-6)  # multiples, not a running sum


@pytest.mark.parametrize("shape", [0.25, 4.0])
def test_gamma_gaps_have_the_mean_gap_and_the_spread_of_their_shape(shape):
    gaps = np.diff(times(ArrivalPlan(10, "gamma", shape, seed=3, start_unix_s=T0), 3000))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std(ddof=1) / gaps.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.06)


def test_shares_are_disjoint_complete_and_the_same_times_as_one_process():
    whole = list(arrivals(ArrivalPlan(50, seed=11, start_unix_s=T0), 0, T0 + 30))
    plan = ArrivalPlan(50, seed=11, start_unix_s=T0, slots=("w0", "w1", "w2"))
    shares = [list(arrivals(plan, slot, T0 + 30)) for slot in range(3)]
    indices = [i for share in shares for i, _ in share]
    assert len(indices) == len(set(indices))  # no arrival is started twice
    assert sorted(indices) == list(range(len(whole)))  # and none is left out
    assert sorted(a for share in shares for a in share) == whole
    assert all(i % 3 == slot for slot, share in enumerate(shares) for i, _ in share)
    assert count_by_slot(plan, T0, T0 + 30) == [len(s) for s in shares]


def test_the_schedule_is_a_function_of_the_plan_alone():
    plan = ArrivalPlan(20, "gamma", 0.5, seed=5, start_unix_s=T0)
    in_small_blocks = np.concatenate([b for b, _ in zip(offsets(plan, block=7), range(100), strict=False)])
    # the same draws whatever the block size (the sums differ in their last bits only)
    assert np.allclose(in_small_blocks, next(offsets(plan, block=700)), rtol=0, atol=1e-9)
    other = ArrivalPlan(20, "gamma", 0.5, seed=6, start_unix_s=T0)
    assert not np.array_equal(times(plan, 10), times(other, 10))
    assert level_seed(1, 0) != level_seed(1, 1)
    assert level_seed(1, 2) == level_seed(1, 2)


def test_a_plan_ends_at_its_end_and_counts_only_its_window():
    plan = ArrivalPlan(10, "constant", start_unix_s=T0, end_unix_s=T0 + 5)
    assert len(list(arrivals(plan))) == 50
    assert count_by_slot(plan, T0 + 1, T0 + 100) == [40]
    with pytest.raises(ValueError):
        count_by_slot(ArrivalPlan(10, start_unix_s=T0), T0, math.inf)


def test_a_plan_travels_as_a_message_and_refuses_what_is_no_schedule():
    plan = ArrivalPlan(2.5, "gamma", 0.5, 9, T0, T0 + 60, ("a", "b"))
    assert ArrivalPlan.from_message(plan.to_message()) == plan
    endless = ArrivalPlan(1, start_unix_s=T0)
    assert ArrivalPlan.from_message(endless.to_message()) == endless
    assert plan.slot_of("b") == 1 and plan.slot_of("late") is None
    for bad in ({"rate": 0}, {"rate": math.inf}, {"rate": 1, "arrival": "uniform"},
                {"rate": 1, "burstiness": 0}, {"rate": 1, "slots": ()}):
        with pytest.raises(ValueError):
            ArrivalPlan(**bad)


def test_a_running_window_is_counted_on_from_where_it_stopped():
    plan = ArrivalPlan(30, seed=2, start_unix_s=T0, slots=("a", "b"))
    counter = SlotCounter(plan, T0 + 1)
    assert [counter.until(T0 + s) for s in (0.5, 10, 200, 600)] == [
        count_by_slot(plan, T0 + 1, T0 + s) for s in (0.5, 10, 200, 600)]
    assert counter.until(T0 + 10) == count_by_slot(plan, T0 + 1, T0 + 10)  # an end moved back


def test_a_trace_plan_sends_the_traces_times_shared_across_slots_and_then_none():
    trace_times = (0.0, 0.25, 0.25, 1.0, 3.0)
    plan = ArrivalPlan(5 / 3, TRACE, start_unix_s=T0, slots=("w1", "w2"), times=trace_times)
    assert list(arrivals(plan, 0)) == [(0, T0), (2, T0 + 0.25), (4, T0 + 3.0)]  # ends: no arrival after
    assert list(arrivals(plan, 1)) == [(1, T0 + 0.25), (3, T0 + 1.0)]
    blocks = [b for _, b in zip(range(4), offsets(plan, block=2), strict=False)]
    assert [b.tolist() for b in blocks] == [[0.0, 0.25], [0.25, 1.0], [3.0], [math.inf]]
    assert count_by_slot(plan, T0 + 0.1, T0 + 100) == [2, 2]
    assert ArrivalPlan.from_message(plan.to_message()) == plan


@pytest.mark.parametrize("kw", [dict(arrival=TRACE), dict(times=(0.0, 1.0)),
                                dict(arrival=TRACE, times=(1.0, 0.5)),
                                dict(arrival=TRACE, times=(0.0, math.inf)),
                                dict(arrival=TRACE, times=(0.0,), windows=((T0, T0 + 1, 0),))])
def test_a_trace_plan_has_its_times_in_order_and_a_drawn_one_none(kw):
    with pytest.raises(ValueError):
        ArrivalPlan(1.0, **kw)
