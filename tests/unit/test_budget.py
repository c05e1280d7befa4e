"""The load generator's own budget: chunks handled and CPU per level, combined over processes, and the
process count planned for a load."""

from __future__ import annotations

from locust_spec.recording.budget import (
    ClientBudget,
    Cost,
    combine,
    measured_cost,
    one_process_enough,
    processes_for,
)
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


def test_a_busy_process_is_a_warning_naming_the_fix_and_the_process_count_its_cost_wants():
    busy = {"requests": 1, "failures": 0, "budget_by_level": {"256": {
        "chunks": 410_000, "wall_s": 10.0, "chunks_per_s": 41000.0, "cpu_share": 0.95,
        "cpu_us_per_chunk": 23.2}}}
    summary = build_summary(None, None, [], {"local": busy})
    assert summary["client"]["generators"]["budget_by_level"]["256"]["cpu_share"] == 0.95
    warning = next(w for w in summary["warnings"] if "256 users" in w)
    assert "23.2 us per chunk" in warning and "41,000 chunks/s want --processes 2" in warning


def test_process_count_follows_the_chunk_rate_the_measured_cost_and_the_cores():
    fast, slow = Cost(16.0, "calibrated"), Cost(40.0, "a previous run")
    assert processes_for(64, 8, fast)[0] == 1
    count, reason = processes_for(1024, 8, fast)  # 102,400 chunks/s, 31,250 a process at half a core
    assert count == 4 and "102,400 chunks/s" in reason and "16.0 us" in reason and "calibrated" in reason
    assert processes_for(256, 8, fast)[0] == 1
    count, reason = processes_for(256, 8, slow)  # 25,600 chunks/s, 12,500 a process
    assert count == 3 and "40.0 us" in reason and "a previous run" in reason
    count, reason = processes_for(1024, 2, fast)
    assert count == 2 and "capped at the cores available (2)" in reason
    # A simultaneous design's arms load the machine together: each run gets its share of the cores.
    count, reason = processes_for(256, 4, slow, runs_at_once=2)
    assert count == 2 and "capped at the cores available (4, 2 runs at once)" in reason
    assert processes_for(256, 2, slow, runs_at_once=2)[0] == 1
    assert one_process_enough(32) and not one_process_enough(256)


def test_the_cost_a_run_measured_is_its_dearest_well_measured_level():
    def level(chunks, us):
        return {"chunks": chunks, "cpu_us_per_chunk": us}

    summary = {"client": {"generators": {"by_process": {
        "w1": {"budget_by_level": {"16": level(900, 90.0), "64": level(80_000, 31.5)}},
        "w2": {"budget_by_level": {"64": level(79_000, 33.0), "256": level(300_000, 24.0)}}}}}}
    assert measured_cost(summary, "r1") == Cost(33.0, "r1")
    assert measured_cost({"client": {}}, "r1") is None
    assert measured_cost({"client": {"generators": {"by_process": {"w": {"budget_by_level": {
        "4": level(100, 50.0)}}}}}}, "r1") is None


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
