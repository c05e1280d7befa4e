"""Open loop under spec-ab's designs: at a rate level on the shared clock every arm plans alike; interleaved,
an arm's arrivals fall only in its own blocks, the arms' blocks of a group get the same arrivals, and the
ledger owes an arm only those (an arrival in the other arm's block is neither missed nor late)."""

from __future__ import annotations

import json
import time
from argparse import Namespace
from dataclasses import replace

import numpy as np
import pytest
from locust.env import Environment

from locust_spec.core.arrivals import ArrivalPlan, arrivals, count_by_slot
from locust_spec.core.design import INTERLEAVED, SIMULTANEOUS, Design
from locust_spec.core.level import LevelBoard, runner_users
from locust_spec.recording.ledger import ArrivalLedger
from locust_spec.wiring.openloop import OpenLoopSettings, designed_rate_level
from locust_spec.wiring.run import SpecRun, attach
from locust_spec.wiring.shape import ConcurrencyLadder
from locust_spec.wiring.turns import Turns
from tests.unit.test_open_loop_plugin import _Idle, row

T0 = 1_800_000_000.0
RATE = 10.0
PLAN = Design.planned(INTERLEAVED, (1,), 40.0, 1.0, 2, 5.0, rates=(RATE,))  # ABBABAAB, 5 s blocks


def _arm(slot: int):
    return designed_rate_level(None, OpenLoopSettings(seed=7), PLAN.for_slot(slot, T0), 0, 64)


def test_interleaved_arms_send_only_in_their_own_blocks_and_pair_their_arrivals_by_block_group():
    levels = [_arm(0), _arm(1)]
    times = [np.array([t for _, t in arrivals(lv.plan)]) for lv in levels]
    for slot, (lv, ts) in enumerate(zip(levels, times, strict=True)):
        own = PLAN.for_slot(slot, T0).own_blocks(0)
        assert lv.plan.start_unix_s == T0 and lv.plan.end_unix_s == T0 + 40
        assert lv.warmup_until_unix_s == own[0].start_unix_s + 1.0  # the arm's first block warms up
        inside = np.zeros(len(ts), dtype=bool)
        for b in own:
            inside |= (ts >= b.start_unix_s) & (ts < b.end_unix_s)
        assert inside.all() and abs(len(ts) - RATE * 20) < 4 * np.sqrt(RATE * 20)  # the rate, in its blocks
        assert count_by_slot(lv.plan, T0, T0 + 40) == [len(ts)]
    assert not set(times[0]) & set(times[1])
    for group in range(4):  # each block group: both arms' arrivals at the same offsets into their blocks
        offsets = []
        for slot, ts in enumerate(times):
            block = next(b for b in PLAN.for_slot(slot, T0).own_blocks(0) if b.group == group)
            offsets.append(ts[(ts >= block.start_unix_s) & (ts < block.end_unix_s)] - block.start_unix_s)
        assert len(offsets[0]) and np.allclose(*offsets)
    plan = levels[1].plan
    assert ArrivalPlan.from_message(json.loads(json.dumps(plan.to_message()))) == plan


def test_simultaneous_arms_share_one_schedule_from_the_clock():
    plan = Design.planned(SIMULTANEOUS, (1,), 20.0, 1.0, 2, 5.0, rates=(RATE,))
    a, b = (designed_rate_level(None, OpenLoopSettings(seed=7), plan.for_slot(s, T0), 0, 64) for s in (0, 1))
    assert a.plan == b.plan and a.plan.windows == () and a.plan.start_unix_s == T0


def test_the_ledger_owes_an_interleaved_arm_only_its_own_blocks_and_times_them():
    level = _arm(1)
    ledger = ArrivalLedger()
    ledger.planned(level)
    owed = list(arrivals(level.plan))
    last_of_block = {}
    for i, t in owed:
        last_of_block[level.plan.window_end(t)] = (i, t)
    late = set(last_of_block.values())  # each block's last arrival went out 2 s late, past its block's end
    for i, t in owed:
        ledger.add(row(RATE, i, t, 2000.0 if (i, t) in late else 1.0))
    ledger.stopped(T0 + 40)
    entry = ledger.summary(now_unix_s=T0 + 50)[0]["10/s"]
    warm = level.warmup_until_unix_s
    measured = [(i, t) for i, t in owed if t >= warm]
    assert entry["window_s"] == pytest.approx(level.plan.open_s(warm, T0 + 40)) == pytest.approx(19.0)
    assert entry["scheduled"] == entry["started"] == len(measured) and entry["missed"] == 0
    # sent in its window: not the ones that went out after their block ended
    sent = len(measured) - len([x for x in late if x[1] >= warm])
    assert entry["achieved_rate"] == pytest.approx(sent / 19.0, abs=1e-3)
    assert entry["flagged"] and "lateness" in entry["why"][0]  # 2 s late is late, whatever the blocks


def test_an_open_loop_request_enters_its_arrivals_block_without_waiting_and_never_reseeds_backwards():
    seeds, slept = [], []
    turns = Turns(PLAN.for_slot(0, T0), 3, seeds.append, clock=lambda: T0 + 30.0, sleep=slept.append)
    turns.enter(T0 + 0.5)  # group 0
    turns.enter(T0 + 3.0)  # the same block: the same order goes on
    turns.enter(T0 + 17.0)  # A's block 3, group 1
    turns.enter(T0 + 4.9)  # a group-0 arrival sent late: it takes the next prompt of group 1's order
    assert len(seeds) == 2 and seeds[0] != seeds[1] and not slept


def test_the_rate_ladder_on_the_shared_clock_plans_each_arms_level_from_the_clock():
    clock = time.time() + 30
    design = PLAN.for_slot(1, clock)
    ladder = ConcurrencyLadder()
    options = Namespace(levels="1", stage_time="40s", warmup="1s", rates="10", rate=None, max_concurrency="8",
                        arrival="poisson", burstiness="1", seed=7, headless=True,
                        blocks=json.dumps(design.to_dict()))
    env = Environment(user_classes=[_Idle], shape_class=ladder, parsed_options=options)
    env.create_local_runner()
    run = attach(env, SpecRun(env, LevelBoard(runner_users(env))))
    ladder.reset_time()
    env.runner.target_user_count = 8
    for _ in range(8):
        run.user_prepared()
    assert ladder.tick() == (8, 8.0)
    level = run.levels.current()
    assert level.plan.start_unix_s == clock and level.plan.end_unix_s == clock + 40
    own = design.own_blocks(0)
    assert [w[:2] for w in level.plan.windows] == [(b.start_unix_s, b.end_unix_s) for b in own]
    assert level.warmup_until_unix_s == design.warmup_until(0)
    ladder.start_time = time.perf_counter() - 100  # the run's own clock does not count: the shared one does
    assert ladder.tick() == (8, 8.0) and run.levels.current() is level
    design = PLAN.for_slot(1, time.time() - 39)  # a second before the level's end: the next one planned now
    options.blocks = json.dumps(replace(design, rates=(10.0, 20.0), levels=(1, 1)).to_dict())
    options.rates = "10,20"
    ladder.reset_time()
    assert ladder.tick() == (8, 8.0)
    level = run.levels.current()
    assert level.key == "20/s" and level.plan.start_unix_s == design.level_start(1) > time.time()
