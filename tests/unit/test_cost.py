"""Cost and energy per level and arm (analysis/cost.py, metrics/power.py): dollars per million output tokens
from the level's throughput with its interval mapped exactly, joules per token from a DCGM exporter's
series over the arm's block windows, in the headline, verdict.json and the reports."""

from __future__ import annotations

import json

import numpy as np
import pytest
from locust_spec.analysis import cost
from locust_spec.analysis.api import render, verdict_for
from locust_spec.analysis.cli import run as spec_verdict
from locust_spec.analysis.model import Pricing
from locust_spec.analysis.stats import Interval

from locust_spec.metrics import power
from locust_spec.metrics.exposition import Sample, Snapshot, parse_exposition
from locust_spec.sim.power import GpuPower, PowerModel, power_model
from locust_spec.sim.roofline import GPUS
from tests.data.run_builder import ENERGY, POWER, ArmSpec, write_run

ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 60}}


def _pair(root, base_watts=(), cand_watts=(), series=(ENERGY, POWER)):
    base = write_run(root / "off" / "run", ArmSpec(speculative=False, seed=1, gpu_watts=base_watts,
                                                   power_series=series, **ONE_LEVEL))
    cand = write_run(root / "on" / "run", ArmSpec(speculative=True, seed=2, gpu_watts=cand_watts,
                                                  power_series=series, **ONE_LEVEL))
    return base, cand


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _pair(tmp_path_factory.mktemp("cost"), (400.0,), (450.0,))


@pytest.fixture(scope="module")
def priced(runs):
    return verdict_for([runs[0]], [runs[1]], pricing=Pricing(2.5, 1, 2))


def _value(level, key):
    return next(v for v in level.economy if v.key == key)


def test_cost_per_million_tokens_is_the_gpu_hour_over_the_levels_throughput(runs):
    verdict = verdict_for([runs[0]], [runs[1]], pricing=Pricing(2.5))
    level = verdict.levels[0]
    found = _value(level, cost.USD_PER_MTOK)
    for arm, usd in (("baseline", found.baseline), ("candidate", found.candidate)):
        tok_s = getattr(level, arm).output_tok_s
        assert usd == pytest.approx(2.5 / 3600 / tok_s * 1e6, rel=0.005)
    doc = json.loads(render(verdict, "json"))
    assert doc["schema"] == 7
    assert doc["pricing"] == {"usd_per_gpu_hour": 2.5, "gpus": {"baseline": 1.0, "candidate": 1.0}}
    assert doc["levels"][0]["cost_per_mtok_usd"]["candidate"] == pytest.approx(found.candidate)
    # the headline says it in dollars, at the level
    assert f"cuts the cost per million output tokens from ${found.baseline:.2f} to ${found.candidate:.2f}" \
        in verdict.summary


def test_the_cost_change_is_throughputs_interval_through_the_gpu_ratio(priced):
    level = priced.levels[0]
    tput, usd = level.changes["output_tok_s"], _value(level, cost.USD_PER_MTOK).change
    assert tput.measured and usd.measured
    # the candidate holds two GPUs: cost ratio = 2 x baseline tok/s / candidate tok/s, bounds swapped
    assert usd.estimate == pytest.approx((2 / (1 + tput.estimate / 100) - 1) * 100)
    assert usd.lo == pytest.approx((2 / (1 + tput.hi / 100) - 1) * 100)
    assert usd.hi == pytest.approx((2 / (1 + tput.lo / 100) - 1) * 100)
    assert (usd.units, usd.unit) == (tput.units, tput.unit)


def test_inverse_change_of_a_halving_is_a_doubling_and_has_none_at_minus_100():
    found = cost.inverse_change(Interval(-50.0, -60.0, -40.0, method="m", units=5, unit="blocks", df=4))
    assert (found.estimate, found.lo, found.hi) == pytest.approx((100.0, 100 / 0.6 - 100, 150.0))
    assert cost.inverse_change(Interval(-100.0, -100.0, -90.0)).estimate is None


def test_an_energy_counter_at_a_known_rate_gives_joules_per_token_within_2pct(priced):
    level = priced.levels[0]
    jpt, watts = _value(level, cost.JOULES_PER_TOKEN), _value(level, cost.POWER_W)
    # Under load the GPUs draw exactly 400 W (baseline) and 450 W (candidate): J/token = W / (tok/s).
    assert jpt.baseline == pytest.approx(400.0 / level.baseline.output_tok_s, rel=0.02)
    assert jpt.candidate == pytest.approx(450.0 / level.candidate.output_tok_s, rel=0.02)
    assert watts.candidate == pytest.approx(450.0, rel=0.02)
    assert _value(level, cost.TOKENS_PER_JOULE).candidate == pytest.approx(1 / jpt.candidate)
    assert jpt.change.measured and jpt.change.lo < jpt.change.estimate < jpt.change.hi
    assert priced.power["candidate"].source == power.COUNTER
    assert "the energy per output token from" in priced.summary


def test_only_the_power_gauge_gives_joules_per_token_within_5pct(tmp_path):
    base, cand = _pair(tmp_path, (300.0,), (350.0,), series=(POWER,))
    verdict = verdict_for([base], [cand])
    level = verdict.levels[0]
    jpt = _value(level, cost.JOULES_PER_TOKEN)
    assert jpt.baseline == pytest.approx(300.0 / level.baseline.output_tok_s, rel=0.05)
    assert jpt.candidate == pytest.approx(350.0 / level.candidate.output_tok_s, rel=0.05)
    assert verdict.power["baseline"].source == power.GAUGE
    assert verdict.pricing is None and not any(v.key == cost.USD_PER_MTOK for v in level.economy)


def test_the_arms_gpus_are_selected_by_label(tmp_path):
    base, cand = _pair(tmp_path, (300.0, 900.0), (350.0, 900.0))
    picked = {"baseline": power.parse_selection("gpu=0"), "candidate": power.parse_selection("gpu=0")}
    level = verdict_for([base], [cand], power_gpus=picked).levels[0]
    assert _value(level, cost.POWER_W).baseline == pytest.approx(300.0, rel=0.02)
    everything = verdict_for([base], [cand]).levels[0]
    assert _value(everything, cost.POWER_W).baseline == pytest.approx(1200.0, rel=0.02)


def test_a_verdict_without_price_or_power_has_null_cost_and_energy(tmp_path):
    base, cand = _pair(tmp_path)
    verdict = verdict_for([base], [cand])
    doc = json.loads(render(verdict, "json"))
    assert all(doc["levels"][0][key] is None for key in cost.KEYS)
    assert doc["pricing"] is None and doc["power"] == {"baseline": None, "candidate": None}
    assert "cost per million" not in verdict.summary and "$ per million" not in render(verdict, "text")


def _snap(t, value, metric=ENERGY, labels=(("gpu", "0"),)):
    return Snapshot(t, "http://dcgm/metrics", (Sample(metric, labels, value),))


def test_a_counter_that_falls_counts_nothing_then_reads_on_from_its_new_value():
    # 1 W for 10 s (10,000 mJ), a fall to 500 mJ (a reload, or a lie), then 1 W again: 10 + 10 J; a fall
    # to a value that is no reset (a duplicate series, a bad exporter) must not add its lifetime's joules
    snaps = [_snap(0.0, 1e9), _snap(10.0, 1e9 + 1e4), _snap(11.0, 500.0), _snap(21.0, 500.0 + 1e4),
             _snap(22.0, 1e9 + 2e4), _snap(22.0, 500.0 + 1e4), _snap(23.0, 500.0 + 1e4)]
    found = power.curves(snaps)
    assert power.window_joules(found, np.array([0.0]), np.array([21.0])) == pytest.approx([20.0])
    assert power.window_joules(found, np.array([21.0]), np.array([23.0])) == pytest.approx([0.0])
    nan = [_snap(0.0, 0.0), _snap(5.0, float("nan")), _snap(6.0, -3.0), _snap(10.0, 1e4)]
    assert power.window_joules(power.curves(nan), np.array([0.0]), np.array([10.0])) == pytest.approx([10.0])
    # the gauge of the same GPU is not counted twice when the counter is there
    both = power.curves([*snaps, *(_snap(t, 1.0, POWER) for t in (0.0, 21.0))])
    assert len(both) == 1 and power.source_of(both) == power.COUNTER


def test_a_window_beyond_the_scrapes_is_not_measured():
    found = power.curves([_snap(0.0, 0.0), _snap(10.0, 1e4)])
    assert power.window_joules(found, np.array([2.0]), np.array([30.0])) is None
    assert power.window_joules([], np.array([2.0]), np.array([3.0])) is None


def test_bad_options_are_one_line_errors(runs, capsys):
    assert spec_verdict([str(runs[0]), str(runs[1]), "--gpus", "2"]) == 2
    assert "--gpus counts GPUs for a cost: give --gpu-cost-per-hour too" in capsys.readouterr().err
    assert spec_verdict([str(runs[0]), str(runs[1]), "--gpu-cost-per-hour", "-1"]) == 2
    assert spec_verdict([str(runs[0]), str(runs[1]), "--power-gpus-baseline", "gpu"]) == 2
    assert "--power-gpus-baseline: 'gpu' is not LABEL=VALUE" in capsys.readouterr().err


def test_spec_sims_modelled_exporter_reads_back_as_the_energy_it_modelled():
    clock = iter([0.0, 0.0, 10.0])  # the model's start, then two scrapes
    gpu = GpuPower(PowerModel(idle_w=60.0, busy_w=400.0), "A100", clock=lambda: next(clock))
    texts = [gpu.exposition(lambda now: 0.0), gpu.exposition(lambda now: now / 2)]
    snaps = [Snapshot(t, "http://sim/metrics/dcgm", tuple(parse_exposition(text.decode())))
             for t, text in zip((0.0, 10.0), texts, strict=True)]
    found = power.curves(snaps)
    assert power.source_of(found) == power.COUNTER
    # 10 s idle at 60 W, 5 of them stepping at 400 W: 600 + 340 x 5 J
    assert power.window_joules(found, np.array([0.0]), np.array([10.0])) == pytest.approx([2300.0], abs=0.01)
    gauge = next(s for s in snaps[1].samples if s.metric == power.POWER)
    assert gauge.value == pytest.approx(230.0) and dict(gauge.labels)["gpu"] == "0"


def test_spec_sims_power_is_the_boards_or_the_option_and_follows_the_time_scale():
    assert power_model(GPUS["a100"]) == PowerModel(60.0, 400.0)
    assert power_model(GPUS["a100"], "50,300", time_scale=2.0) == PowerModel(25.0, 150.0)
    with pytest.raises(ValueError, match="IDLE,BUSY"):
        power_model(GPUS["a100"], "300,50")
