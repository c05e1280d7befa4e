"""The concurrency ladder: schedule math, option parsing, and the levels it publishes."""

from __future__ import annotations

import time
from argparse import Namespace

import pytest
from locust import User, constant, task
from locust.env import Environment

from locust_spec.core.ladder import (
    RAMP_S,
    Stage,
    parse_duration,
    parse_levels,
    parse_stage_time,
    spawn_rate,
    stage_at,
)
from locust_spec.core.level import LevelBoard, runner_users
from locust_spec.wiring.run import SpecRun, attach, run_of
from locust_spec.wiring.shape import ConcurrencyLadder

LEVELS = (1, 4, 16, 64)


def test_the_first_stage_starts_at_zero_with_its_warmup():
    assert stage_at(0.0, LEVELS, 60, 5) == Stage(index=0, users=1, start_s=0, warmup_end_s=5, end_s=60)


def test_a_stage_runs_from_its_start_up_to_but_not_including_its_end():
    assert stage_at(59.999, LEVELS, 60, 5).index == 0
    assert stage_at(60.0, LEVELS, 60, 5) == Stage(index=1, users=4, start_s=60, warmup_end_s=65, end_s=120)
    assert stage_at(239.0, LEVELS, 60, 5).users == 64


def test_the_ladder_ends_after_the_last_stage():
    assert stage_at(240.0, LEVELS, 60, 5) is None
    assert stage_at(1e9, LEVELS, 60, 5) is None


def test_a_warmup_longer_than_the_stage_covers_the_whole_stage():
    stage = stage_at(12.0, LEVELS, 10, 30)
    assert stage.warmup_end_s == stage.end_s == 20


def test_fractional_stage_times_are_exact():
    assert stage_at(7.4, (1, 64), 2.5, 0.5) is None
    assert stage_at(2.6, (1, 64), 2.5, 0.5) == Stage(1, 64, 2.5, 3.0, 5.0)


def test_a_non_positive_stage_time_is_refused():
    with pytest.raises(ValueError):
        stage_at(0.0, LEVELS, 0, 0)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("2.5", 2.5), ("30s", 30), ("2m", 120), ("1h30m", 5400), ("1m30s", 90),
    ("500ms", 0.5), ("1.5s", 1.5), (" 5s ", 5), ("0", 0),
])
def test_durations_read_like_locusts_run_time(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5x", "s", "5s junk", "-3", "1m-2s"])
def test_a_malformed_duration_is_refused_with_a_readable_message(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_a_stage_time_of_zero_is_refused():
    with pytest.raises(ValueError, match="above zero"):
        parse_stage_time("0s")


def test_levels_are_comma_separated_user_counts():
    assert parse_levels("1,4,16,64") == LEVELS
    assert parse_levels("8") == (8,)


@pytest.mark.parametrize("text", ["", "1,,4", "1,x", "0,4", "-1", "1.5"])
def test_malformed_levels_are_refused(text):
    with pytest.raises(ValueError):
        parse_levels(text)


def test_every_level_change_ramps_within_the_ramp_time():
    for previous, users in [(0, 1), (1, 64), (64, 4), (4, 4)]:
        assert abs(users - previous) / spawn_rate(previous, users) <= RAMP_S


class _Idle(User):
    wait_time = constant(1)

    @task
    def nothing(self):
        pass


def _ladder(levels: str = "1,8", stage_time: str = "10s",
            warmup: str = "2s") -> tuple[ConcurrencyLadder, Environment]:
    ladder = ConcurrencyLadder()
    options = Namespace(levels=levels, stage_time=stage_time, warmup=warmup, headless=True)
    env = Environment(user_classes=[_Idle], shape_class=ladder, parsed_options=options)
    env.create_local_runner()
    attach(env, SpecRun(env, LevelBoard(runner_users(env))))
    ladder.reset_time()
    return ladder, env


def _at(ladder: ConcurrencyLadder, elapsed_s: float) -> None:
    ladder.start_time = time.perf_counter() - elapsed_s


def current(env: Environment):
    return run_of(env).levels.current()


def test_the_ladder_publishes_each_level_with_its_warmup_end_as_it_starts():
    ladder, env = _ladder()
    before = time.time()
    assert ladder.tick() == (1, 1.0)
    published = current(env)
    assert published.users == 1
    assert before + 2 <= published.warmup_until_unix_s <= time.time() + 2
    assert published.in_warmup(before + 1) and not published.in_warmup(time.time() + 2.01)

    _at(ladder, 10.5)
    users, rate = ladder.tick()
    assert (users, current(env).users) == (8, 8)
    assert rate == spawn_rate(1, 8)


def test_the_ladder_publishes_once_per_level_not_once_per_tick():
    ladder, env = _ladder()
    ladder.tick()
    first = current(env)
    _at(ladder, 5)
    ladder.tick()
    assert current(env) is first


def test_the_ladder_stops_the_test_after_its_last_level():
    ladder, _ = _ladder()
    ladder.tick()
    _at(ladder, 20.0)
    assert ladder.tick() is None


def test_a_ladder_with_bad_options_stops_at_once_instead_of_raising():
    ladder, _ = _ladder(levels="1,zero")
    assert ladder.tick() is None


def test_restarting_the_test_starts_the_ladder_over():
    ladder, env = _ladder()
    ladder.tick()
    _at(ladder, 11)
    ladder.tick()
    ladder.reset_time()
    assert ladder.tick()[0] == 1
    assert current(env).users == 1


def test_the_plugins_test_stop_listener_has_the_next_test_publish_its_first_level_again():
    from locust_spec import plugin

    ladder, env = _ladder()
    ladder.tick()
    first = current(env)
    plugin._on_test_stop(env)
    ladder.reset_time()
    assert ladder.tick() == (1, spawn_rate(0, 1))  # from no users
    assert current(env) is not first and current(env).users == 1  # published for this test, with its warm-up
