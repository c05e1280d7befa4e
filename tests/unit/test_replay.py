"""Trace replay in the plugin (wiring/replay.py): the options, the one level a trace plans, and arrival j
sent as row j's prompt."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest

from locust_spec.core.arrivals import MAX_RATE, TRACE, arrivals
from locust_spec.core.trace_text import builtin_corpus, trace_prompt
from locust_spec.core.traces import MOONCAKE as MOONCAKE_FORMAT
from locust_spec.core.traces import Trace, TraceRow, Window
from locust_spec.wiring.openloop import LOCAL_SLOT, ArrivalQueue, open_loop
from locust_spec.wiring.replay import TracePrompts, TraceSettings, trace_level, trace_rate

MOONCAKE = str(Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake.jsonl")


def options(**kw) -> Namespace:
    base = dict(trace=MOONCAKE, trace_format=None, trace_speedup="2", trace_window=None,
                trace_block_tokens="512", rate=None, rates=None, seed=7)
    return Namespace(**{**base, **kw})


def test_the_options_name_the_trace_and_how_it_is_replayed():
    assert TraceSettings.from_options(options(trace=None)) is None
    settings = TraceSettings.from_options(options(trace_window="0.2:", trace_block_tokens="16"))
    assert settings == TraceSettings(MOONCAKE, None, Window(0.2), 2.0, 16)
    assert [r.index for r in settings.read().rows] == [1, 2, 3]
    assert open_loop(options()) and not open_loop(options(trace=None))


@pytest.mark.parametrize("kw, message", [(dict(rate="4"), "leave out --rate"), (dict(rates="1,2"), "--rates"),
                                         (dict(trace_window="5"), "trace window"),
                                         (dict(trace_block_tokens="0"), "trace block")])
def test_a_trace_beside_a_rate_or_with_bad_settings_is_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        TraceSettings.from_options(options(**kw))


def test_a_trace_plans_one_level_of_its_times_and_each_arrival_is_its_rows_prompt():
    settings = TraceSettings.from_options(options())
    trace = settings.read()
    level = trace_level(None, trace, seed=7, users=8)
    plan = level.plan
    assert plan.arrival == TRACE and plan.times == (0.0, 0.125, 0.5, 1.5) and plan.slots == (LOCAL_SLOT,)
    assert level.key == f"{trace_rate(trace):g}/s" == "2.667/s"  # 4 rows over 1.5 s
    assert level.warmup_until_unix_s == plan.start_unix_s  # every row is measured
    queue = ArrivalQueue(LOCAL_SLOT)
    queue.level_changed(level)
    taken = [queue.take() for _ in range(4)]
    assert [a.index for a in taken] == [0, 1, 2, 3]
    assert [round(a.intended_unix_s - plan.start_unix_s, 6) for a in taken] == [0.0, 0.125, 0.5, 1.5]
    assert list(arrivals(plan, 0))[-1][0] == 3  # none after the trace's last row
    prompts = TracePrompts(settings, seed=7)
    corpus = builtin_corpus()
    assert prompts.prompt(3) == trace_prompt(trace.rows[3], corpus, 7, 512)
    assert prompts.prompt(3).max_tokens == 64


def test_a_traces_rate_is_its_rows_over_its_seconds_within_the_bound_on_rates():
    def trace(*offsets: float) -> Trace:
        return Trace(MOONCAKE_FORMAT, tuple(TraceRow(i, t, 10, 1) for i, t in enumerate(offsets)))

    assert trace_rate(trace(0.0, 0.0, 0.0)) == 3.0  # all at once: their count
    assert trace_rate(trace(0.0, 1e-6)) == MAX_RATE
    level = trace_level(None, trace(0.0, 1e-6), seed=0, users=2)
    assert level.plan.times == (0.0, 1e-6)
