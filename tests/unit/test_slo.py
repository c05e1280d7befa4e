"""The SLO (core/slo.py): one syntax and one rule per request for spec-verdict and spec-tune, so one run
has one goodput in both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from locust_spec.analysis.levels import run_levels
from locust_spec.analysis.runs import read_run

from locust_spec.core.slo import Slo, meets_slo, parse_slo
from locust_spec.tune import measure
from tests.data.run_builder import ArmSpec, write_run


def test_both_spellings_and_units_parse_to_one_slo():
    assert parse_slo("ttft=500, tpot=50ms") == parse_slo("ttft_ms=500,tpot_ms=50") == Slo(500, 50)
    assert parse_slo("e2e=2s") == parse_slo("e2e_ms=2000") == Slo(e2e_ms=2000)
    assert parse_slo("TTFT: 0.25s") == Slo(ttft_ms=250)


@pytest.mark.parametrize(("text", "named"), [
    ("itl=5", "not an SLO part: 'itl=5'"), ("ttft=", "not an SLO part"), ("ttft=-5", "not an SLO part"),
    ("ttft=0", "positive"), ("tpot=1e999", "positive"), ("ttft_ms=1s", "milliseconds, not seconds"),
    ("ttft=5,ttft_ms=6", "ttft is given twice"), ("", "at least one of"), (" , ", "at least one of"),
    ("x" * 10_000, "'" + "x" * 40 + "'"),
])
def test_a_bad_slo_is_one_named_error(text, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")) as e:
        parse_slo(text)
    assert len(str(e.value)) < 200


def test_a_good_request_succeeded_and_is_inside_every_limit_and_a_missing_tpot_meets_its_limit():
    ok = np.array([True, True, True, False, True])
    ttft = np.array([100.0, 100, 900, 10, np.nan])
    tpot = np.array([10.0, 60, np.nan, 5, np.nan])  # the third: a one-token answer
    e2e = np.array([1100.0, 3100, 900, 50, np.nan])
    assert list(meets_slo(Slo(ttft_ms=500, tpot_ms=50), ok, ttft, tpot, e2e)) == [1, 0, 0, 0, 0]
    assert list(meets_slo(Slo(tpot_ms=50), ok, ttft, tpot, e2e)) == [1, 0, 1, 0, 1]
    assert list(meets_slo(Slo(e2e_ms=1000), ok, ttft, tpot, e2e)) == [0, 0, 1, 0, 0]


def test_spec_tune_and_spec_verdict_count_the_same_good_requests_in_one_run(tmp_path):
    prefix = write_run(tmp_path / "run", ArmSpec(speculative=True, levels=(1,), requests_per_user={1: 40}))
    rows = pd.read_csv(f"{prefix}_requests.csv")
    one_token = rows.index[::5]  # one-token answers: no TPOT
    rows.loc[one_token, "tpot_ms"] = np.nan
    rows.to_csv(f"{prefix}_requests.csv", index=False)
    e2e_limit = float(rows["e2e_ms"].median())
    slo = parse_slo(f"tpot_ms=1000,e2e={e2e_limit}")

    verdict_level = run_levels(read_run(prefix), slo)[1]
    verdict_good = verdict_level.metrics.slo_share * verdict_level.metrics.requests
    tune_good = measure.level_samples([prefix], 0, "goodput", slo)[1].values.sum()

    measured = rows[(rows["warmup"] != 1) & rows["error"].isna()]
    tpot_met = (measured["tpot_ms"] <= 1000) | measured["tpot_ms"].isna()
    expected = (measured["e2e_ms"] <= e2e_limit) & tpot_met
    assert measured.loc[expected, "tpot_ms"].isna().any()  # one-token answers are among the good ones
    assert 0 < expected.sum() < len(measured)  # the E2E limit cuts some
    assert verdict_good == pytest.approx(tune_good) == pytest.approx(expected.sum())
