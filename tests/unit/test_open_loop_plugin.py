"""Open loop in the plugin: a process's share of the arrivals, the rate ladder's plans, and the master's
ledger of what was owed against what was sent."""

from __future__ import annotations

import time
from argparse import Namespace
from pathlib import Path

import gevent
import pytest
from locust import User, constant, task
from locust.env import Environment

from locust_spec.ab import cli as ab
from locust_spec.client.client import hold_until
from locust_spec.core.arrivals import GAMMA, MAX_RATE, ArrivalPlan, arrivals, check_level_arrivals
from locust_spec.core.level import Level, LevelBoard, runner_users
from locust_spec.recording.ledger import MAX_LATENESS_P99_MS, ArrivalLedger
from locust_spec.recording.records import make_row
from locust_spec.recording.timeline import CLIENT_FIELDS, Timeline
from locust_spec.wiring.openloop import (
    LOCAL_SLOT,
    ArrivalQueue,
    check_processes,
    check_run,
    parse_burstiness,
    parse_rate,
    users_refusal,
)
from locust_spec.wiring.run import SpecRun, attach
from locust_spec.wiring.shape import ConcurrencyLadder, parse_rates

T0 = 1_800_000_000.0


def level(rate: float, start: float, end: float = T0 + 1000, slots=(LOCAL_SLOT,), warmup_s: float = 0.0,
          seed: int = 3) -> Level:
    return Level(64, start + warmup_s, ArrivalPlan(rate, seed=seed, start_unix_s=start, end_unix_s=end,
                                                   slots=slots))


def test_a_process_takes_its_share_in_order_and_a_new_plan_ends_the_old_one_where_it_starts():
    queue = ArrivalQueue("w1")
    first = level(10, T0, slots=("w0", "w1"))
    queue.level_changed(first)
    queue.level_changed(level(50, T0 + 5, slots=("w0", "w1"), seed=4))
    taken = [queue.take() for _ in range(40)]
    own = [(i, t) for i, t in arrivals(first.plan, 1) if t < T0 + 5]
    assert [(a.index, a.intended_unix_s) for a in taken[:len(own)]] == own
    assert all(a.level is first for a in taken[:len(own)])
    rest = taken[len(own):]
    assert rest and all(a.level.rate == 50 and a.index % 2 == 1 for a in rest)
    assert [a.intended_unix_s for a in taken] == sorted(a.intended_unix_s for a in taken)


def test_a_process_outside_the_plan_takes_nothing_until_a_plan_names_it():
    queue = ArrivalQueue("late")
    queue.level_changed(level(10, T0, slots=("w0",)))
    waiting = gevent.spawn(queue.take)
    gevent.sleep(0.01)
    assert not waiting.ready()
    queue.level_changed(level(10, T0 + 5, slots=("w0", "late")))
    assert waiting.get(timeout=1).index == 1


class _Idle(User):
    wait_time = constant(1)

    @task
    def nothing(self):
        pass


def test_the_rate_ladder_plans_each_level_once_ending_at_its_stage_end():
    ladder = ConcurrencyLadder()
    options = Namespace(levels="1", stage_time="10s", warmup="2s", rates="2,8", rate=None,
                        max_concurrency="32", arrival="constant", burstiness="1", seed=5, headless=True)
    env = Environment(user_classes=[_Idle], shape_class=ladder, parsed_options=options)
    env.create_local_runner()
    run = attach(env, SpecRun(env, LevelBoard(runner_users(env))))
    ladder.reset_time()
    assert ladder.tick() == (32, 32.0)  # the users are spawned first
    assert run.levels.current().plan is None  # no arrival before they are ready
    env.runner.target_user_count = 32
    for _ in range(32):
        run.user_prepared()
    before = time.time()
    assert ladder.tick() == (32, 32.0)
    first = run.levels.current()
    assert (first.users, first.rate, first.key) == (32, 2.0, "2/s")
    assert first.plan.arrival == "constant" and first.plan.end_unix_s == pytest.approx(before + 10, abs=0.5)
    assert first.warmup_until_unix_s == pytest.approx(first.plan.start_unix_s + 2)
    ladder.reset_time()  # Locust's test start, right after the first tick: the level stands
    ladder.start_time = time.perf_counter() - 10.5
    assert ladder.tick() == (32, 32.0)
    second = run.levels.current()
    assert second.key == "8/s" and second.plan.seed != first.plan.seed
    assert second.plan.end_unix_s - second.plan.start_unix_s == pytest.approx(20 - 10.5, abs=0.5)
    with pytest.raises(ValueError):
        parse_rates("1,0")


def row(rate: float, index: int, intended: float, late_ms: float, warmup: bool = False, error=None):
    return make_row(intended + late_ms / 1000, None, "code", "p", warmup, None, error, level_rate=rate,
                    arrival=index, intended_unix_s=intended, lateness_ms=late_ms)


def test_the_ledger_names_the_slot_whose_arrivals_never_came_and_flags_the_level():
    ledger = ArrivalLedger()
    planned = level(20, T0, end=T0 + 10, slots=("w0", "w1"), warmup_s=2)
    ledger.planned(planned)
    owed = [(i, t) for slot in (0, 1) for i, t in arrivals(planned.plan, slot) if t < T0 + 10]
    for i, t in owed:
        if i % 2 == 0 or t < T0 + 5:  # w1 died five seconds in
            ledger.add(row(20, i, t, 1.0, warmup=t < T0 + 2))
    ledger.stopped(T0 + 12)
    (key, entry), = ledger.summary(now_unix_s=T0 + 20, workers=("w0", "w1", "w2"))[0].items()
    assert key == "20/s" and entry["window_s"] == 8
    assert entry["joined_late"] == ["w2"]  # it connected after the plan: no share, nothing missed
    measured = [(i, t) for i, t in owed if t >= T0 + 2]
    assert entry["scheduled"] == len(measured)
    lost = sum(1 for i, t in measured if i % 2 == 1 and t >= T0 + 5)
    assert entry["missed"] == lost and entry["missed_by_slot"] == {"w1": lost}
    assert entry["flagged"] and "never sent" in entry["why"][0]
    assert entry["lateness_ms"]["p99"] == pytest.approx(1.0, abs=0.01)


def test_the_ledger_flags_late_arrivals_but_not_what_the_stop_delayed():
    ledger = ArrivalLedger()
    planned = level(10, T0, end=T0 + 10)
    ledger.planned(planned)
    ledger.stopped(T0 + 10)
    for i, t in arrivals(planned.plan):
        ledger.add(row(10, i, t, 2.0 if t < T0 + 9.9 else 500.0))  # the last ones went out after the stop
    entry = ledger.summary(now_unix_s=T0 + 20)[0]["10/s"]
    assert not entry["flagged"] and entry["lateness_ms"]["max"] < MAX_LATENESS_P99_MS
    late = ArrivalLedger()
    late.planned(planned)
    for i, t in arrivals(planned.plan):
        late.add(row(10, i, t, 2.0 if i % 10 else 300.0))
    late.stopped(T0 + 10)
    entry, warnings = late.summary(now_unix_s=T0 + 20)
    assert entry["10/s"]["flagged"] and "lateness p99 300 ms" in warnings[0]


def test_a_rate_run_twice_in_a_sweep_adds_to_one_account():
    ledger = ArrivalLedger()
    plans = [level(10, T0, end=T0 + 5), level(20, T0 + 5, end=T0 + 10, seed=4),
             level(10, T0 + 10, end=T0 + 15)]
    for planned in plans:
        ledger.planned(planned)
        for i, t in arrivals(planned.plan):
            ledger.add(row(planned.rate, i, t, 1.0))  # the same indices again in the second 10/s level
    ledger.stopped(T0 + 15)
    accounts = ledger.summary(now_unix_s=T0 + 20)[0]
    tens = accounts["10/s"]
    assert tens["window_s"] == 10 and not tens["flagged"]
    owed = sum(len(list(arrivals(p.plan))) for p in plans if p.rate == 10)
    assert tens["scheduled"] == tens["started"] == owed


def test_the_live_timeline_shows_the_rate_asked_the_rate_sent_and_how_late():
    timeline = Timeline(tick_s=2.0, window_s=10.0)
    timeline.start(T0)
    timeline.level(T0, "8/s")
    for i in range(40):  # 8 a second for five seconds, the last few late
        timeline.request(20.0, 5.0, 100, True, lateness_ms=1.0 if i < 36 else 120.0)
    timeline.tick(T0 + 5, 64, {}, rate=8.0)
    point = dict(zip(CLIENT_FIELDS, timeline.to_json()["client"]["points"][-1], strict=True))
    assert (point["rate_target"], point["rate_sent"]) == (8.0, 8.0)
    assert point["late_p99"] == pytest.approx(120.0, rel=0.01)
    assert timeline.to_json()["levels"] == [[T0, "8/s"]]


def test_spec_ab_gives_both_arms_the_same_rates_and_arrival_options():
    ladder = ab.Ladder("1,64", "20s", "4s", "1,16")
    load = ab.Load(("code",), None, False, 3, "", 1, ("--arrival", "gamma", "--burstiness", "0.5"))
    commands = [ab.locust_command(ab.Run(arm, 0, Path(arm)), "http://h", ladder, load)
                for arm in ("baseline", "candidate")]
    for cmd in commands:
        at = cmd.index("--rates")
        assert cmd[at:at + 6] == ["--rates", "1,16", "--arrival", "gamma", "--burstiness", "0.5"]
        assert cmd[cmd.index("--seed") + 1] == "3"  # the same arrival schedule on both
    assert ladder.seconds == 40 and ladder.settings().steps == (1.0, 16.0)


def test_an_arrival_is_never_sent_before_it_is_due():
    due = time.time() + 0.003
    hold_until(due)
    assert time.time() >= due
    started = time.perf_counter()
    hold_until(time.time() + 60)  # a clock stepped back: held a few milliseconds, not a minute
    assert time.perf_counter() - started < 0.05


def test_rates_burstiness_and_a_levels_arrivals_are_bounded_with_one_line_refusals():
    # before: --rate 1e9 ran, and counting its arrivals held the loop for minutes, deaf to SIGTERM
    with pytest.raises(ValueError, match="1e\\+09 requests per second is above the 10000 allowed"):
        parse_rate("1e9")
    assert parse_rate("10000") == MAX_RATE
    # before: --burstiness 1e-9 drew 68.5 million arrivals for a 10 req/s, 5 s level
    for bad in ("1e-9", "0.01", "1e6", "nan", "inf"):
        with pytest.raises(ValueError, match="burstiness must be between 0.05 and 1000"):
            parse_burstiness(bad)
    with pytest.raises(ValueError, match="burstiness must be a number"):
        parse_burstiness("lots")
    assert parse_burstiness("0.05") == 0.05 and parse_burstiness("1000") == 1000.0
    with pytest.raises(ValueError, match="burstiness"):
        ArrivalPlan(10, GAMMA, 1e-9)
    check_level_arrivals(1000, 5000)  # exactly the most a level may schedule
    with pytest.raises(ValueError, match="is 5,000,010 arrivals in one level, above the 5,000,000 allowed"):
        check_level_arrivals(1000, 5000.01)


def test_a_plain_rate_and_a_rate_ladder_are_refused_at_start_when_a_level_is_too_long():
    with pytest.raises(ValueError, match="10000 requests per second for 3600 s"):
        check_run(Namespace(rate="10000", run_time=3600, rates=None))
    check_run(Namespace(rate="10000", run_time=60, rates=None))
    check_run(Namespace(rate="10000", run_time=None, rates=None))  # the web UI's endless test: counted on
    ladder = {"levels": "1", "warmup": "0s", "max_concurrency": None, "arrival": "poisson", "burstiness": "1",
              "seed": 0, "rate": None}
    with pytest.raises(ValueError, match="5000 requests per second for 1200 s"):
        ConcurrencyLadder.check_options(Namespace(**ladder, rates="1,5000", stage_time="20m"))
    ConcurrencyLadder.check_options(Namespace(**ladder, rates="1,5000", stage_time="60s"))
    with pytest.raises(ValueError, match="5000 requests per second for 1200 s"):  # spec-ab and spec-tune's
        ab.Ladder("1", "20m", "0s", "1,5000").check()


def test_an_open_loop_on_more_processes_than_users_is_refused_not_run_silent():
    # before: --rate 20 --processes 2 without -u: one user on one worker, the other never ready; 30 s,
    # 0 requests, exit 0
    assert users_refusal(1, 2) == ("--rate sends through Locust's users, and each of the 2 processes sends a "
                                   "share of the arrivals: 1 user leaves a process none; give -u 2 or more")
    assert "3 users leave a process none; give -u 4" in users_refusal(3, 4)
    assert users_refusal(2, 2) is None and users_refusal(1, 1) is None and users_refusal(0, 1) is None

    def options(**kw):
        return Namespace(**{"rate": "20", "rates": None, "headless": True, "num_users": None,
                            "processes": None, "expect_workers": 1, **kw})

    for forked in (False, True):  # the master of --processes and each worker it forks
        with pytest.raises(ValueError, match="give -u 2 or more"):
            check_processes(options(processes=2), master=not forked)
    with pytest.raises(ValueError, match="give -u 3 or more"):
        check_processes(options(expect_workers=3, num_users=2), master=True)
    check_processes(options(processes=2, num_users=2), master=True)
    check_processes(options(expect_workers=3), master=False)  # a worker of its own: it knows no count
    check_processes(options(processes=2, headless=False), master=True)  # the web UI's form: at test start
    check_processes(options(processes=2, rate=None), master=True)  # closed loop: Locust spreads users
