"""A locustfile's own task (a conversation growing turn by turn, locustfiles/multiturn.py) is measured like
the built-in one: the same rows, Locust events and histograms, against a real spec-sim on loopback."""

from __future__ import annotations

import json

import pytest

from tests.e2e.chat_runs import assert_reconciles, chat
from tests.support import REPO, start_spec_sim

MULTITURN = str(REPO / "locustfiles" / "multiturn.py")
BUILT_IN = str(REPO / "locustfiles" / "chat.py")
TURNS = ("turn-1", "turn-2", "turn-3")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multiturn")
    sim = start_spec_sim(tmp, "--time-scale", "0.05")
    try:
        # 3 s: 60-63 whole conversations of three turns (6 s before: 114-117)
        custom = chat(tmp, sim.url, "--metrics-url", "off", users=3, seconds=3, name="multiturn",
                      locustfile=MULTITURN)
        built_in = chat(tmp, sim.url, "--metrics-url", "off", users=3, seconds=3, name="builtin",
                        locustfile=BUILT_IN)
    finally:
        sim.stop()
    return custom, built_in


def filled(row: dict) -> set[str]:
    return {k for k, v in row.items() if v != ""}


def test_every_turn_is_a_row_and_locust_counts_what_the_rows_say(runs):
    custom, _ = runs
    rows = assert_reconciles(custom)
    assert {r["prompt_class"] for r in rows} <= set(TURNS)
    ok = [r for r in rows if not r["error"]]
    assert {r["prompt_class"] for r in ok} == set(TURNS), "every turn of a conversation measured"
    assert all(int(r["output_tokens"]) <= 96 for r in ok)  # the task's own max_tokens


def test_a_turn_row_holds_what_a_built_in_row_holds(runs):
    custom, built_in = runs
    custom_ok = [r for r in custom.rows() if not r["error"]]
    built_ok = [r for r in built_in.rows() if not r["error"]]
    assert custom_ok and built_ok
    assert set(custom.rows()[0]) == set(built_in.rows()[0])  # same columns
    assert set().union(*map(filled, custom_ok)) == set().union(*map(filled, built_ok))


def test_the_conversation_grows_turn_by_turn(runs):
    custom, _ = runs
    ok = [r for r in custom.rows() if not r["error"]]
    tokens = {t: [int(r["prompt_tokens"]) for r in ok if r["prompt_class"] == t] for t in TURNS}
    # each turn sends the previous turns, the assistant's replies included
    assert max(tokens["turn-1"]) < min(tokens["turn-2"])
    assert max(tokens["turn-2"]) < min(tokens["turn-3"])


def test_the_exact_histograms_hold_each_turn(runs):
    custom, _ = runs
    latency = json.loads(custom.prefix.with_name("multiturn_latency.json").read_text())
    ok = [r for r in custom.rows() if not r["error"]]
    for turn in TURNS:
        assert latency["metrics"]["ttft"][turn]["count"] == sum(r["prompt_class"] == turn for r in ok)
