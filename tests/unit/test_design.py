"""The design of an A/B in time: blocks forward and back (ABBA, ABC CBA), one clock, each arm's warm-up
at its first block, a user's turn, and the same prompts for every arm of a block group."""

from __future__ import annotations

import numpy as np
import pytest

from locust_spec.core.design import INTERLEAVED, SEQUENTIAL, SIMULTANEOUS, Design, block_seed, parse_blocks
from locust_spec.core.prompts import PromptSampler
from locust_spec.wiring.turns import Turns

CLOCK = 1_000.0


def _continuations(design: Design, arm: int) -> int:
    """How often the arm's block follows its own (starting with its request still in flight)."""
    return sum(design.slot_of(j) == design.slot_of(j - 1) == arm for j in range(1, design.n_blocks))


def test_two_arms_alternate_abba_and_end_the_level_on_baab_so_both_are_treated_alike():
    two = Design.planned(INTERLEAVED, (1, 64), 60.0, 3.0, 2, 5.0)
    assert (two.n_blocks, two.block_s) == (12, 5.0)
    assert "".join("AB"[two.slot_of(j)] for j in range(12)) == "ABBAABBABAAB"
    assert [two.group_of(j) for j in range(4)] == [0, 0, 1, 1]  # AB, BA: each group holds both arms
    for design in (two, Design.planned(INTERLEAVED, (1,), 40.0, 2.0, 2, 5.0)):
        mean = [np.mean([j for j in range(design.n_blocks) if design.slot_of(j) == arm]) for arm in (0, 1)]
        assert mean[0] == mean[1], "a linear drift cancels"
        assert _continuations(design, 0) == _continuations(design, 1)
        assert design.slot_of(design.n_blocks - 1) == 1, "the next level starts on the other arm"
    three = Design.planned(INTERLEAVED, (1,), 90.0, 2.0, 3, 5.0)
    assert "".join("ABC"[three.slot_of(j)] for j in range(18)) == "ABCCBABCAACBCABBAC"
    assert {_continuations(three, arm) for arm in range(3)} == {1}
    # 50 s of 5 s blocks is no whole number of cycles: 8 longer blocks; never fewer than two cycles
    assert Design.planned(INTERLEAVED, (1,), 50.0, 2.0, 2, 5.0).n_blocks == 8
    assert Design.planned(INTERLEAVED, (1,), 20.0, 2.0, 2, 5.0).block_s == 2.5
    sim = Design.planned(SIMULTANEOUS, (1,), 30.0, 2.0, 2, 5.0)
    assert sim.n_blocks == 6 and {sim.slot_of(j) for j in range(6)} == {0}
    assert not Design.planned(SEQUENTIAL, (1,), 30.0, 2.0, 2).blocked
    with pytest.raises(ValueError, match="shorter than a block"):
        Design.planned(INTERLEAVED, (1,), 40.0, 6.0, 2, 5.0)


def test_each_arm_finds_its_blocks_on_the_shared_clock_and_warms_up_in_its_first_one():
    plan = Design.planned(INTERLEAVED, (1, 64), 40.0, 2.0, 2, 5.0)  # ABBABAAB, 5 s blocks
    a, b = plan.for_slot(0, CLOCK), plan.for_slot(1, CLOCK)
    assert a.block_at(CLOCK - 1) is None and a.block_at(CLOCK + 80) is None
    block = b.block_at(CLOCK + 47.0)  # level 2, block 2 of ABBABAAB: B's
    assert (block.level_index, block.level, block.index, block.slot, block.group) == (1, 64, 1, 1, 0)
    assert [blk.index for blk in b.own_blocks(0)] == [1, 2, 4, 7]
    assert a.next_own_start(CLOCK - 3) == CLOCK and b.next_own_start(CLOCK - 3) == CLOCK + 5
    assert a.next_own_start(CLOCK + 6) == CLOCK + 15 and b.next_own_start(CLOCK + 6) == CLOCK + 6
    assert b.next_own_start(CLOCK + 79) == CLOCK + 79 and a.next_own_start(CLOCK + 79) is None
    assert (a.warmup_until(0), b.warmup_until(0), b.warmup_until(1)) == (CLOCK + 2, CLOCK + 7, CLOCK + 47)


def test_a_design_travels_as_json_and_a_bad_one_is_one_clear_error():
    design = Design.planned(INTERLEAVED, (1, 64), 40.0, 2.0, 2, 5.0).for_slot(1, CLOCK)
    assert Design.from_dict(design.to_dict()) == design
    assert parse_blocks("") is None
    good = design.to_dict()
    for bad, words in [({**good, "schema": 2}, "schema"), ({**good, "slot": 2}, "slot"),
                       ({**good, "block_s": 7.0}, "whole blocks"),
                       ({**good, "levels": [0]}, "levels"),
                       ({**good, "clock_unix_s": None}, "clock_unix_s"),
                       ({**good, "stage_s": float("nan")}, "stage_s"), ([], "object"),
                       ({**good, "order": [0, 0, 1, 1, 0, 1, 1, 0]}, "each arm once"),
                       ({**good, "order": None}, "order")]:
        with pytest.raises(ValueError, match=words):
            Design.from_dict(bad)
    with pytest.raises(ValueError, match="not JSON"):
        parse_blocks("{")


class FakeTime:
    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_user_waits_for_its_arms_block_and_each_group_starts_on_its_own_prompt_order():
    design = Design.planned(INTERLEAVED, (1,), 40.0, 2.0, 2, 5.0).for_slot(1, CLOCK)  # ABBABAAB
    t = FakeTime(CLOCK + 1.0)
    seeds: list[int] = []
    turns = Turns(design, 7, seeds.append, clock=lambda: t.now, sleep=t.sleep)
    assert turns.wait() and t.now == pytest.approx(CLOCK + 5.0)  # B's first block
    assert max(t.slept) <= 1.0, "a waiting user looks at the clock every second"
    assert turns.wait() and len(seeds) == 1, "the same block: no new order"
    t.now = CLOCK + 12.0  # block 3 (B again, group 1)
    assert turns.wait() and seeds == [block_seed(7, 0, 0), block_seed(7, 0, 1)]
    t.now = CLOCK + 40.0  # the ladder is over
    assert not turns.wait()


def test_every_arm_of_a_group_draws_the_same_prompts_whatever_it_drew_before():
    a, b = PromptSampler(["quote", "code:3"], seed=1), PromptSampler(["quote", "code:3"], seed=1)
    for _ in range(17):
        a.next()  # the faster arm got further in the previous block
    seed = block_seed(1, 0, 3)
    a.reseed(seed)
    b.reseed(seed)
    assert [a.next().id for _ in range(30)] == [b.next().id for _ in range(30)]
    assert block_seed(1, 0, 3) != block_seed(1, 0, 4) != block_seed(1, 1, 3)
