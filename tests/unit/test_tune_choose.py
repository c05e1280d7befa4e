"""Choosing k per level: objectives, intervals, the smaller k when tied; the batch a level ran at;
filling a server command template; judging the confirmation pass."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import numpy as np
import pytest

from locust_spec.metrics import batch
from locust_spec.metrics.exposition import Sample as Metric
from locust_spec.metrics.exposition import Snapshot
from locust_spec.tune import choose, confirm, intervals, servers
from locust_spec.tune.choose import Sample, Slo


def tokens(k: int, mean: float, blocks: int = 20, spread: float = 0.05, users: int = 1, seed: int = 0,
           clock: float | None = None, drift: np.ndarray | None = None) -> Sample:
    """An arm delivering about `mean` tok/s in `blocks` 5 s blocks; with `clock`, blocks of a session that
    pair with other arms' of the same clock; `drift`: each block's share of the machine's state."""
    rng = np.random.default_rng(seed + k)
    seconds = np.full(blocks, 5.0)
    state = np.ones(blocks) if drift is None else drift
    amount = mean * seconds * state * rng.normal(1.0, spread, blocks).clip(0.1)
    keys = tuple((clock, 0, j) if clock is not None else (None, k, users, j) for j in range(blocks))
    return Sample(k, users, amount, seconds, None, keys, np.zeros(blocks, dtype=np.int64), blocks * 10,
                  float(users))


def tpot(k: int, ms: float, blocks: int = 10) -> Sample:
    """Five requests per block around `ms` TPOT."""
    values = np.full(blocks * 5, ms) + np.tile(np.linspace(0, 0.5, 5), blocks)
    keys = tuple((None, k, 1, j) for j in range(blocks))
    return Sample(k, 1, values, None, np.repeat(np.arange(blocks), 5), keys, np.zeros(blocks, dtype=np.int64),
                  blocks * 5, 1.0)


def test_clearly_best_k_is_chosen():
    d = choose.choose([tokens(0, 100), tokens(2, 150), tokens(4, 120)], "throughput")
    assert d.k == 2 and d.best_k == 2 and d.tied == ()
    best = d.arm(2).interval
    assert best.lo < best.estimate < best.hi
    assert d.arm(4).versus_best.hi < 0  # k=4 significantly worse than k=2 (a % change)


def test_a_tie_goes_to_the_smaller_k():
    # shown equivalent: the whole interval of k=2's change from the best within +-2%
    arms = [tokens(0, 100, clock=0.0), tokens(2, 150, seed=1, spread=0.01, clock=0.0),
            tokens(4, 150.3, seed=2, spread=0.01, clock=0.0)]
    d = choose.choose(arms, "throughput")
    assert d.best_k in (2, 4) and d.k == 2
    assert "tied" in d.reason


def test_an_interval_holding_zero_but_reaching_past_the_band_is_no_tie():
    # real vLLM at one user: k=4 measured +17% over k=0 with an interval holding 0; k=0 was chosen and
    # served 71.8 tok/s against 219.2 for k=4
    d = choose.choose([tokens(0, 100, blocks=6, spread=0.3), tokens(4, 117, blocks=6, spread=0.3, seed=5)],
                      "throughput")
    change = d.arm(0).versus_best
    assert change.lo < 0 < change.hi and d.best_k == 4
    assert d.k == 4 and d.tied == ()
    assert "k=0 not shown within +-2% of it (an interval reaching past the band is no tie)" in d.reason


def test_tpot_prefers_lower():
    assert choose.choose([tpot(0, 9.0), tpot(3, 4.0)], "tpot").k == 3


def test_an_arm_with_too_few_requests_is_left_out_and_none_means_no_choice():
    few = replace(tokens(4, 500, blocks=2), requests=2)
    d = choose.choose([tokens(0, 100), few], "throughput")
    assert d.k == 0 and d.arm(4).interval is None
    d = choose.choose([few], "throughput")
    assert d.k is None and "no arm" in d.reason


def test_a_good_request_is_successful_and_inside_every_limit():
    ok = np.array([True, True, True, False])
    ttft, tpot_ms, e2e = np.array([100.0, 100, 900, 10]), np.array([10.0, 60, np.nan, 5]), \
        np.array([1100.0, 3100, 900, 50])
    assert list(choose.good(ok, ttft, tpot_ms, e2e, Slo(ttft_ms=500, tpot_ms=50))) == [1, 0, 0, 0]
    assert list(choose.good(ok, ttft, tpot_ms, e2e, Slo(tpot_ms=50))) == [1, 0, 1, 0]  # one token: no TPOT
    assert list(choose.good(ok, ttft, tpot_ms, e2e, Slo(e2e_ms=1000))) == [0, 0, 1, 0]


def test_parse_slo():
    assert choose.parse_slo("ttft=500, tpot=50ms") == Slo(ttft_ms=500, tpot_ms=50)
    assert choose.parse_slo("e2e=2s") == Slo(e2e_ms=2000)
    with pytest.raises(ValueError, match="not an SLO part"):
        choose.parse_slo("itl=5")


def test_throughput_is_tokens_over_the_blocks_seconds_with_an_interval_over_blocks():
    small, large = tokens(0, 100, blocks=6, spread=0.1), tokens(0, 100, blocks=60, spread=0.1)
    one = intervals.level("throughput", small)
    assert one.estimate == pytest.approx(small.values.sum() / small.seconds.sum())
    assert one.lo < one.estimate < one.hi and one.unit == "blocks" and one.units == 6
    many = intervals.level("throughput", large)
    assert (many.hi - many.lo) < (one.hi - one.lo) / 1.5


def test_arms_on_one_clock_are_compared_block_pair_by_block_pair():
    # The machine slows down and recovers; both arms' blocks of a group see the same state.
    drift = 1 + 0.4 * np.sin(np.arange(20))
    a, b = tokens(0, 100, clock=1.0, drift=drift), tokens(4, 110, clock=1.0, drift=drift)
    paired = choose.compare(b, a, "throughput")
    apart = choose.compare(replace(b, keys=tuple((None, 4, 1, j) for j in range(20))), a, "throughput")
    assert paired.unit == "block groups" and apart.unit == "blocks"
    assert paired.lo > 0 and apart.lo < 0 < apart.hi, "the shared drift cancels only when paired"


def test_repeats_are_clusters():
    a = tokens(2, 150)
    other = tokens(2, 190, seed=9)
    repeated = replace(a, values=np.concatenate([a.values, other.values]),
                       seconds=np.concatenate([a.seconds, other.seconds]), keys=a.keys + other.keys,
                       runs=np.repeat([0, 1], 20))
    one = choose.estimate(a, "throughput")
    both = choose.estimate(repeated, "throughput")
    # Two runs that disagree by far more than their own noise: the interval shows the disagreement.
    assert (both.hi - both.lo) / both.estimate > 2 * (one.hi - one.lo) / one.estimate


def test_best_static_weighs_every_level_the_same():
    low = choose.choose([tokens(0, 100), tokens(2, 200), tokens(4, 210)], "throughput")
    high = choose.choose([tokens(0, 5000, users=64), tokens(2, 4000, users=64), tokens(4, 2000, users=64)],
                         "throughput")
    # k=2: (200/210 + 4000/5000) / 2 = 0.88 beats k=0 (0.74) and k=4 (0.70)
    assert choose.best_static([low, high], "throughput") == 2


def snap(t: float, running: float, url: str = "u") -> Snapshot:
    return Snapshot(t, url, (Metric("vllm:num_requests_running", (("engine", "0"),), running),))


def test_batch_is_time_weighted_and_summed_over_replicas():
    snaps = [snap(0, 1), snap(10, 4), snap(12, 8), snap(20, 0)]
    # over [5, 15]: 1 for 5 s, 4 for 2 s, 8 for 3 s -> (5 + 8 + 24) / 10
    assert batch.mean_running(snaps, 5, 15) == pytest.approx(3.7)
    assert batch.mean_running([*snaps, snap(0, 2, "v")], 5, 15) == pytest.approx(5.7)
    assert batch.mean_running([snap(20, 3)], 5, 15) is None


def busy(t: float, seconds: float, running: float) -> Snapshot:
    return Snapshot(t, "u", (Metric("vllm:num_requests_running", (), running),
                             Metric("vllm:request_inference_time_seconds_sum", (), seconds)))


def test_batch_from_the_running_time_counter_beats_an_aliased_gauge():
    # 64 requests running all along (64 running-seconds per second), but one scrape caught them between
    # two synchronized cohorts.
    snaps = [busy(0, 0, 64), busy(2, 128, 2), busy(4, 256, 64), busy(6, 384, 64)]
    assert batch.mean_running(snaps, 0, 6) == pytest.approx(64.0)
    assert batch.time_weighted([(s.timestamp_unix_s, s.samples[0].value) for s in snaps], 0, 6) < 50
    restarted = [busy(0, 500, 64), busy(2, 10, 64), busy(4, 138, 64)]
    assert batch.counter_rate([(s.timestamp_unix_s, s.samples[1].value) for s in restarted], 0, 4) is None
    assert batch.mean_running(restarted, 0, 4) == pytest.approx(64.0)  # the gauge, then


def test_server_command_template():
    words = servers.parse_template("vllm serve m --port {port} --speculative-config {speculative_config}")
    on = servers.command_for(words, 8123, {"method": "ngram", "num_speculative_tokens": 2})
    assert on == ["vllm", "serve", "m", "--port", "8123", "--speculative-config",
                  '{"method":"ngram","num_speculative_tokens":2}']
    assert servers.command_for(words, 8123, None) == ["vllm", "serve", "m", "--port", "8123"]
    eq = servers.parse_template("srv --port={port} --speculative-config={speculative_config} -v")
    assert servers.command_for(eq, 1, None) == ["srv", "--port=1", "-v"]
    with pytest.raises(ValueError, match="speculative_config"):
        servers.parse_template("vllm serve m --port {port}")
    assert servers.parse_server("4=http://b:8000") == ("k4", "http://b:8000")
    assert servers.parse_server("schedule=http://c") == ("schedule", "http://c")
    with pytest.raises(ValueError):
        servers.parse_server("http://a")


CONFIG = {"method": "ngram", "num_speculative_tokens": 2, "model": "it's"}
JSON = json.dumps(CONFIG, separators=(",", ":"))


@pytest.mark.parametrize(("template", "off", "on"), [
    ('sh -c "exec vllm serve m --port {port} --speculative-config {speculative_config}"',
     "exec vllm serve m --port 8123",
     ["exec", "vllm", "serve", "m", "--port", "8123", "--speculative-config", JSON]),
    ("""sh -c 'cd /srv && vllm serve m --speculative-config "{speculative_config}" --port {port} -v'""",
     "cd /srv && vllm serve m --port 8123 -v",
     ["cd", "/srv", "&&", "vllm", "serve", "m", "--speculative-config", JSON, "--port", "8123", "-v"]),
    ("""bash -lc "vllm serve m --speculative-config='{speculative_config}' --port {port}" """,
     "vllm serve m --port 8123",
     ["vllm", "serve", "m", f"--speculative-config={JSON}", "--port", "8123"]),
])
def test_a_shell_command_template_keeps_every_other_word_at_k0(template, off, on):
    """`sh -c "..."`: the command is one word holding the placeholder. With no speculation only its option
    and placeholder leave the command; with a config the JSON goes in shell-quoted (one word to the
    shell, an apostrophe in it too). Before: at k=0 the whole command was dropped, `sh -c` left bare."""
    words = servers.parse_template(template)
    assert servers.command_for(words, 8123, None) == [*words[:2], off]
    filled = servers.command_for(words, 8123, CONFIG)
    assert filled[:2] == words[:2] and len(filled) == 3
    assert shlex.split(filled[2]) == on


def test_a_template_keeps_a_short_option_before_the_placeholder():
    """Only a long option (`--speculative-config`) goes with the placeholder at k=0: a `-c` is the shell's."""
    words = servers.parse_template("sh -c {speculative_config} --port {port}")
    assert servers.command_for(words, 1, None) == ["sh", "-c", "--port", "1"]


def test_swing_collapse_when_the_schedule_is_worse_than_every_fixed_arm():
    low = choose.choose([tokens(0, 100), tokens(4, 200)], "throughput")
    high = choose.choose([tokens(0, 5000, users=32), tokens(4, 3000, users=32)], "throughput")
    fixed = {"static": tokens(4, 2500), "off": tokens(0, 2550)}
    bad = confirm.check_swing(8, (1, 32), [low, high], {"schedule": tokens(4, 1200), **fixed}, "throughput")
    assert bad.collapse and "COLLAPSE" in bad.status
    assert bad.predicted == pytest.approx((low.arm(4).interval.estimate + high.arm(0).interval.estimate) / 2)
    good = confirm.check_swing(8, (1, 32), [low, high], {"schedule": tokens(4, 2700), **fixed}, "throughput")
    assert not good.collapse and good.status.startswith("holds")
    alongside = {"static": tokens(4, 121, seed=7), "off": tokens(0, 100)}  # the 1-user level's fixed arms
    level = confirm.check_level(low, {"schedule": tokens(4, 200), **alongside}, "throughput")
    assert level.status == "as predicted"
    assert confirm.check_level(low, {"schedule": tokens(4, 120), **alongside}, "throughput").status == \
        "short of prediction"
    assert "COLLAPSE" in confirm.summarize([level], [bad])
    behind = confirm.check_swing(8, (1, 32), [low, high], {"schedule": tokens(4, 2500, seed=3),
                                                           "static": tokens(4, 2400), "off": tokens(0, 2700)},
                                 "throughput")
    assert behind.status == confirm.BEHIND
    assert "worse than one fixed k" in confirm.summarize([level], [behind])


def test_a_schedule_short_of_prediction_but_like_its_own_k_alongside_is_noise_or_drift():
    low = choose.choose([tokens(0, 100), tokens(4, 200)], "throughput")
    now = {"schedule": tokens(4, 150, seed=5), "static": tokens(4, 151, seed=6), "off": tokens(0, 100)}
    drift = confirm.check_level(low, now, "throughput", same="static")
    assert drift.status == confirm.DRIFTED
    assert "not the schedule" in confirm.summarize([drift], [])
    worse = {**now, "static": tokens(4, 200, seed=6)}
    beaten = confirm.check_level(low, worse, "throughput", same="static")
    assert beaten.status.startswith("beaten beyond noise by the static arm (-23.2% [-25.4, -20.9]")
    assert beaten.status.endswith("for the schedule): serve its k here")
    assert "beaten beyond noise by a fixed k served alongside at 1 users" in confirm.summarize([beaten], [])


def test_a_schedule_as_predicted_but_beaten_by_a_fixed_k_alongside_says_so():
    # the simulators: "as predicted" while a fixed k=4 beat the schedule by 18.9% [-22.2, -12.8]
    low = choose.choose([tokens(0, 100), tokens(4, 200, spread=0.3, blocks=6)], "throughput")
    now = {"schedule": tokens(4, 180, seed=5, spread=0.01), "static": tokens(4, 222, seed=6, spread=0.01)}
    assert confirm.against(180, low.arm(low.k).interval, "throughput") == "as predicted"
    check = confirm.check_level(low, now, "throughput", same="static")
    assert check.status.startswith(confirm.BEATEN + "the static arm")


def test_an_arm_compared_without_usable_spread_cannot_detect_any_change_and_says_so():
    """Three wild blocks each: before, the reason said "could show are k=2 +-8549%"."""
    wild = [replace(tokens(k, 100, blocks=3, spread=0.9, seed=seed), requests=100)
            for k, seed in ((0, 3), (2, 5))]
    d = choose.choose(wild, "throughput")
    assert d.arm(2).mde_pct > 900
    assert d.reason.endswith("; under-powered: k=2 against k=0: cannot detect any change with this data: "
                             "a tie may hide a real difference")
