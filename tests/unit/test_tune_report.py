"""spec-tune's report in every format from one result: the decisions, the schedule, the confirmation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from locust_spec.analysis.model import Pricing

from locust_spec.core import schedule
from locust_spec.tune import choose, confirm, report
from locust_spec.tune.result import TuneResult
from tests.unit.test_tune_choose import tokens


def result() -> TuneResult:
    low = choose.choose([tokens(0, 100), tokens(4, 200)], "throughput")
    high = choose.choose([tokens(0, 5000, users=64), tokens(4, 3000, users=64)], "throughput")
    built = schedule.build([schedule.Point(d.users, d.batch, d.k) for d in (low, high)], 256)
    config = schedule.speculative_config({"method": "ngram"}, built.entries)
    now = {"schedule": tokens(4, 200), "static": tokens(4, 190), "off": tokens(0, 100)}
    levels = (confirm.check_level(low, now, "throughput", "static"),)
    swing = {"schedule": tokens(4, 900), "static": tokens(4, 2500), "off": tokens(0, 2550)}
    swings = (confirm.check_swing(8, (1, 64), [low, high], swing, "throughput"),)
    conf = confirm.Confirmation(4, levels, swings, confirm.summarize(levels, swings))
    return TuneResult("throughput", None, (0, 4), (1, 64), 256, (low, high), built, config, 4, conf,
                      ("a note <b>",))


def test_every_format_carries_the_schedule_and_the_confirmation():
    r = result()
    assert r.built.entries == ((1, 8, 4), (9, 256, 0))
    text = report.render(r, "text")
    assert "[[1, 8, 4], [9, 256, 0]]" in text and "--speculative-config" in text and "COLLAPSE" in text
    assert "1 user: k=4 is best" in text
    # what the fixed-k arm is, said where the confirmation prints
    assert ("Confirmation on the ladder (the schedule against static k=4: the one fixed k best over the "
            "whole ladder") in text
    data = json.loads(report.render(r, "json"))
    assert data["schedule"][schedule.KEY] == [[1, 8, 4], [9, 256, 0]]
    assert data["confirmation"]["swings"][0]["collapse"] is True
    assert data["decisions"][0]["arms"][1]["interval"]["lo"] is not None
    md = report.render(r, "markdown")
    assert "| users | batch | k=0 | k=4 | chosen |" in md and "Swing across each threshold" in md
    page = report.render(r, "html")
    assert page.count("data:image/png;base64,") == 1 and "a note &lt;b&gt;" in page
    assert report.plot(r).startswith(b"\x89PNG")
    written = r.schedule_json()
    assert json.loads(written["speculative_config_arg"].split(" ", 1)[1].strip("'")) == r.speculative_config


def test_priced_arms_carry_their_cost_per_million_tokens_from_their_throughput():
    r = result()
    samples = {0: {1: tokens(0, 100)}, 4: {1: tokens(4, 200)}}
    pricing = Pricing(2.5, gpus_baseline=1, gpus_candidate=2)
    low = choose.priced(r.decisions[:1], samples, pricing)[0]
    for k, gpus in ((0, 1), (4, 2)):
        tput, usd = low.arm(k).interval, low.arm(k).cost_per_mtok_usd
        assert usd.estimate == pytest.approx(2.5 * gpus / 3600 / tput.estimate * 1e6)
        assert (usd.lo, usd.hi) == pytest.approx((2.5 * gpus / 3600 / tput.hi * 1e6,
                                                  2.5 * gpus / 3600 / tput.lo * 1e6))
    priced = replace(r, decisions=(low, *r.decisions[1:]), pricing=pricing)
    data = json.loads(report.render(priced, "json"))
    assert data["schema"] == "locust-spec/tune/3" and data["pricing"]["gpus"]["candidate"] == 2
    assert data["decisions"][0]["arms"][1]["cost_per_mtok_usd"]["estimate"] == pytest.approx(
        low.arm(4).cost_per_mtok_usd.estimate)
    assert data["decisions"][1]["arms"][0]["cost_per_mtok_usd"] is None
    assert "$ per M output tokens: chosen k (k=0)" in report.render(priced, "markdown")
