"""The load generator's own budget: chunks handled and CPU per level, combined over processes, and the
process count planned for a load."""

from __future__ import annotations

import gevent

from locust_spec.ab.capacity import next_calibration
from locust_spec.recording.budget import (
    ClientBudget,
    Cost,
    combine,
    measured_costs,
    one_process_enough,
    processes_for,
    share_bound,
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
                         "cpu_headroom": 0.97, "cpu_us_per_chunk": 10.0, "loaded_s": 1.0,
                         "loaded_cpu_share": 0.03, "holds": 0, "held_s": 0.0, "merged_chunks": 0}
    assert got["64"]["cpu_headroom"] == 0.5 and got["64"]["chunks_per_s"] == 12000.0


def test_a_level_with_no_time_or_no_chunk_has_no_rate():
    budget = ClientBudget()
    budget.add_time(2, 0.1, 1.0)
    assert budget.summary()["2"]["cpu_us_per_chunk"] is None
    budget.add_chunks(1, 5)
    assert budget.summary()["1"]["chunks_per_s"] == 0.0


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


def test_the_cpu_of_idle_time_is_no_chunks_cost_and_stays_in_the_share_of_the_level():
    budget = ClientBudget()
    budget.add_chunks(16, 3000)
    budget.add_time(16, cpu_s=0.03, wall_s=1.0)
    budget.add_time(16, cpu_s=0.02, wall_s=1.0, loaded=False)  # the other arm's block: users waiting
    got = budget.summary()["16"]
    assert got["cpu_us_per_chunk"] == 10.0  # 16.67 when the idle block's CPU counted
    assert got["wall_s"] == 2.0 and got["cpu_share"] == 0.025 and got["loaded_s"] == 1.0


def test_the_cost_per_chunk_is_the_cpu_of_the_samples_and_the_drain_over_the_chunks_they_handled():
    budget = ClientBudget()
    budget.add_chunks(64, 1000)
    budget.add_time(64, cpu_s=0.02, wall_s=1.0)
    budget.add_chunks(64, 1000)  # handled after the last sample: in the stop's drain
    budget.add_last(64, cpu_s=0.03)
    got = budget.summary()["64"]
    assert got["chunks"] == 2000 and got["cpu_us_per_chunk"] == 25.0 and got["wall_s"] == 1.0
    state = {"active": False}
    spawning = ClientBudget(active=lambda: state["active"], sample_s=0.01)
    spawning.start()
    spawning.add_chunks(64, 500)  # while users spawn, which no CPU sample measures
    gevent.sleep(0.03)
    state["active"] = True
    gevent.sleep(0.03)
    spawning.stop()
    assert spawning.by_level[0].wall_s > 0 and spawning.summary()["64"]["cpu_us_per_chunk"] is None


def test_a_sample_is_loaded_time_in_the_arms_block_or_when_it_handled_chunks():
    budget = ClientBudget(sample_s=0.01, loaded=lambda: False)
    budget.start()
    gevent.sleep(0.05)
    assert budget.by_level[0].wall_s > 0 and budget.by_level[0].loaded_s == 0.0
    for _ in range(3):  # a request of the block just ended finishes: its chunks make the sample loaded
        budget.add_chunks(0, 100)
        gevent.sleep(0.015)
    budget.stop()
    assert 0 < budget.by_level[0].loaded_s < budget.by_level[0].wall_s
    busy = ClientBudget(sample_s=0.01)  # no design: every sample is loaded
    busy.start()
    gevent.sleep(0.03)
    busy.stop()
    assert busy.by_level[0].loaded_s == busy.by_level[0].wall_s > 0


def test_process_count_follows_the_chunk_rate_the_measured_cost_and_the_cores():
    fast, slow = Cost(16.0, "calibrated", 64), Cost(40.0, "a previous run", 64)
    assert processes_for(64, 8, [fast])[0] == 1
    count, reason, _ = processes_for(1024, 8, [fast])  # 102,400 chunks/s; 256 streams a process: 41%
    assert count == 4 and "102,400 chunks/s" in reason and "16.0 us" in reason and "calibrated" in reason
    assert processes_for(256, 8, [fast])[0] == 1
    count, reason, _ = processes_for(256, 8, [slow])  # 86 streams a process: 34% (128: 51%)
    assert count == 3 and "40.0 us" in reason and "a previous run" in reason
    count, reason, _ = processes_for(1024, 2, [fast])
    assert count == 2 and "capped at the cores available (2)" in reason
    # A simultaneous design's arms load the machine together: each run gets its share of the cores.
    count, reason, _ = processes_for(256, 4, [slow], runs_at_once=2)
    assert count == 2 and "capped at the cores available (4, 2 runs at once)" in reason
    assert processes_for(256, 2, [slow], runs_at_once=2)[0] == 1
    assert one_process_enough(32) and not one_process_enough(256)


def test_a_split_top_level_is_planned_at_the_streams_each_process_gets_not_at_the_top_levels_cost():
    # As measured on a 2-core VM: a process reads more streams per wake-up the more it serves.
    at_64, at_128, at_256 = Cost(47.0, "c", 64), Cost(43.0, "c", 128), Cost(29.0, "c", 256)
    # 256 streams in one process would cost 29 us a chunk (74% of a core), so 2 processes look enough; but
    # each then serves 128 streams, where a chunk costs 43 us (55%): 3 are needed.
    assert processes_for(256, 8, [at_256])[0] == 5  # nothing known below 256 streams: the worst case
    count, reason, bound = processes_for(256, 8, [at_64, at_128, at_256])
    assert count == 3 and bound.cost == at_64 and bound.streams == 86
    assert "47.0 us of CPU per chunk here at 64 streams" in reason
    assert "3 processes of 86 streams, 40% of a core each at most" in reason
    count, _, bound = processes_for(256, 8, [at_64, Cost(39.0, "c", 128)])  # 128 streams: 49.9%
    assert count == 2 and bound.cost.streams == 128
    # A cost at more streams bounds a process of fewer: its CPU does not rise as its streams fall.
    bound = share_bound(200, [Cost(15.0, "fast", 256)])
    assert bound.from_above and round(bound.share, 3) == 0.384
    count, reason, _ = processes_for(400, 8, [Cost(15.0, "fast", 256)])
    assert count == 2 and "38% of a core, and no more with fewer streams: 2 processes of 200" in reason
    # A cost at streams not known (an open loop's level, a failed calibration's worst case) holds for any.
    count, reason, _ = processes_for(256, 8, [Cost(40.0, "a rate level", 1)])
    assert count == 3 and "40.0 us of CPU per chunk here (a rate level)" in reason
    # Nothing measured: as many processes as keep each under half a core even at the worst cost.
    count, reason, bound = processes_for(256, 8, [])
    assert count == 5 and bound.cost is None
    assert "5 processes of 52 streams stay under 50% of a core even at 80 us" in reason


def test_a_second_calibration_measures_where_the_first_says_a_process_could_serve_twice_as_many():
    assert next_calibration(2048, Cost(47.0, "c", 64)) is None  # 106 streams at half a core: not worth it
    assert next_calibration(2048, Cost(20.0, "c", 64)) == 250  # a fast machine: measured unsaturated there
    assert next_calibration(2048, Cost(10.0, "c", 64)) == 256  # at most what a 2-core VM runs
    assert next_calibration(200, Cost(20.0, "c", 64)) is None  # one process serves the top level


def test_the_costs_a_run_measured_are_its_well_measured_levels_at_the_streams_a_process_served():
    def level(chunks, us):
        return {"chunks": chunks, "cpu_us_per_chunk": us}

    summary = {"client": {"generators": {"by_process": {
        "w1": {"budget_by_level": {"16": level(900, 90.0), "64": level(80_000, 31.5)}},
        "w2": {"budget_by_level": {"64": level(79_000, 33.0), "256": level(300_000, 24.0)}}}}}}
    assert measured_costs(summary, "r1") == [Cost(33.0, "r1", 32), Cost(24.0, "r1", 128)]
    assert measured_costs({"client": {}}, "r1") == []
    assert measured_costs({"client": {"generators": {"by_process": {"w": {"budget_by_level": {
        "4": level(100, 50.0)}}}}}}, "r1") == []
    rates = {"client": {"generators": {"by_process": {"w": {"budget_by_level": {"4/s": level(9000, 50.0)}}}}}}
    assert measured_costs(rates, "r1") == [Cost(50.0, "r1", 1)]  # streams in flight not known


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
    assert held == ["at 4 users the server refused requests (429/503, an answer any request would get, or "
                    "connections) and its users waited 10.0 s in all before sending again (25.0% of the "
                    "level's user time): the server had fewer users than that while they waited"]


def test_chunks_read_together_add_up_over_processes_and_past_one_percent_are_a_warning():
    one, two = ClientBudget(), ClientBudget()
    one.add_chunks(256, 6000, merged=90)
    two.add_chunks(256, 4000, merged=30)
    two.add_chunks(16, 5000, merged=2)  # a stall of the loop now and then: no warning
    got = combine([one.summary(), two.summary()])
    assert got["256"]["merged_chunks_all_processes"] == 120 and got["256"]["chunks_all_processes"] == 10000
    summary = build_summary(None, None, [], {"w1": {"budget_by_level": one.summary()},
                                             "w2": {"budget_by_level": two.summary()}})
    merged = [w for w in summary["warnings"] if "same read" in w]
    assert len(merged) == 1
    assert merged[0].startswith("at 256 users 1.2% of the token chunks arrived in the same read as the one")
    older = {"256": {"chunks": 6000, "cpu_share": 0.5}}  # a summary from before chunks were counted so
    assert not [w for w in build_summary(None, None, [], {"w": {"budget_by_level": older}})["warnings"]
                if "same read" in w]


def test_a_process_busy_in_its_own_blocks_is_a_warning_though_idle_blocks_halve_its_share():
    arm = ClientBudget()
    for _ in range(5):  # an interleaved arm: 0.9 of a core in its blocks, next to nothing in the other's
        arm.add_chunks(256, 25_000)
        arm.add_time(256, cpu_s=0.9, wall_s=1.0, loaded=True)
        arm.add_time(256, cpu_s=0.01, wall_s=1.0, loaded=False)
    spent = arm.summary()["256"]
    assert spent["cpu_share"] == 0.455 and spent["loaded_cpu_share"] == 0.9
    other = ClientBudget()
    other.add_time(256, cpu_s=0.5, wall_s=1.0)
    assert combine([other.summary(), arm.summary()])["256"]["loaded_cpu_share"] == 0.9  # whichever is busiest
    summary = build_summary(None, None, [], {"local": {"budget_by_level": arm.summary()}})
    busy = [w for w in summary["warnings"] if "of a core" in w]
    assert len(busy) == 1 and busy[0].startswith("load generator at 256 users: a process used 90% of a core "
                                                 "while loaded")
