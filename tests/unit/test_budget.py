"""The load generator's own budget: chunks handled and CPU per level, combined over processes, and the
process count planned for a load."""

from __future__ import annotations

from locust_spec.recording.budget import ClientBudget, combine, processes_for
from locust_spec.recording.summary import build_summary


def test_each_level_gets_its_chunks_and_its_time():
    budget = ClientBudget()
    budget.add_chunks(16, 3000)
    budget.add_time(16, cpu_s=0.03, wall_s=1.0)
    budget.add_chunks(64, 12000)
    budget.add_time(64, cpu_s=0.5, wall_s=1.0)
    got = budget.summary()
    assert got["16"] == {"chunks": 3000, "wall_s": 1.0, "chunks_per_s": 3000.0, "cpu_share": 0.03,
                         "cpu_headroom": 0.97, "cpu_us_per_chunk": 10.0, "holds": 0, "held_s": 0.0}
    assert got["64"]["cpu_headroom"] == 0.5 and got["64"]["chunks_per_s"] == 12000.0


def test_a_level_with_no_time_or_no_chunk_has_no_rate():
    budget = ClientBudget()
    budget.add_chunks(1, 5)
    assert budget.summary()["1"]["chunks_per_s"] == 0.0
    budget.add_time(2, 0.1, 1.0)
    assert budget.summary()["2"]["cpu_us_per_chunk"] is None


def test_processes_combine_to_the_busiest_and_the_total_chunks():
    a = {"8": {"chunks": 100, "chunks_per_s": 100.0, "cpu_share": 0.2}}
    b = {"8": {"chunks": 300, "chunks_per_s": 300.0, "cpu_share": 0.6}, "16": {"chunks": 1, "cpu_share": 0.1}}
    got = combine([a, b])
    assert got["8"]["cpu_share"] == 0.6 and got["8"]["chunks_per_s"] == 300.0
    assert got["8"]["chunks_all_processes"] == 400 and list(got) == ["8", "16"]


def test_a_busy_process_is_a_warning_naming_the_fix():
    busy = {"requests": 1, "failures": 0, "budget_by_level": {"256": {"chunks_per_s": 41000.0,
                                                                       "cpu_share": 0.95}}}
    summary = build_summary(None, None, [], {"local": busy})
    assert summary["client"]["generators"]["budget_by_level"]["256"]["cpu_share"] == 0.95
    assert any("256 users" in w and "--processes" in w for w in summary["warnings"])


def test_process_count_follows_the_chunk_rate_and_the_cores():
    assert processes_for(64, 8)[0] == 1
    count, reason = processes_for(1024, 8)
    assert count == 4 and "102,400 chunks/s" in reason
    count, reason = processes_for(1024, 2)
    assert count == 2 and "capped at the cores available (2)" in reason


def test_time_held_back_at_the_servers_request_adds_up_over_processes_and_is_a_warning():
    one, two = ClientBudget(), ClientBudget()
    one.add_time(4, cpu_s=0.01, wall_s=10.0)
    one.add_held(4, 5.0)
    two.add_held(4, 3.0)
    two.add_held(4, 2.0)
    got = combine([one.summary(), two.summary()])
    assert got["4"]["holds"] == 3 and got["4"]["held_s"] == 10.0
    summary = build_summary(None, None, [], {"w1": {"budget_by_level": one.summary()},
                                             "w2": {"budget_by_level": two.summary()}})
    held = [w for w in summary["warnings"] if "waited" in w]
    assert held == ["at 4 users the server refused requests (429/503 or connections) and its users waited "
                    "10.0 s in all before sending again (25.0% of the level's user time): the server had "
                    "fewer users than that while they waited"]
