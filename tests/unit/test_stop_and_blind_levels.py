"""Two things a verdict hid: the requests the run's stop cut off (left out of every statistic, a stalled
one too), and a level whose intervals have no usable spread, whose "smallest detectable change" read
+-2,386,748% after a 30 s server stall. Now the first is a warning and the second is said in words."""

from __future__ import annotations

import csv

from locust_spec.analysis import api
from locust_spec.analysis.aa import _floor_text
from locust_spec.analysis.model import NO_DETECTION, LevelInput
from locust_spec.analysis.report.table import evidence_line
from locust_spec.analysis.stats import Interval
from locust_spec.analysis.verdict import Thresholds, judge_level

from tests.data.run_builder import ArmSpec, write_run
from tests.unit.test_verdict_rules import arm, spec

ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 30}}


def cut_off(prefix, waited_ms: float) -> None:
    """One request the stop cut off after `waited_ms`, as the client writes it, added to the run's rows."""
    path = f"{prefix}_requests.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    last = rows[-1]
    rows.append({**{k: "" for k in last}, "start_unix_s": f"{float(last['start_unix_s']) + 0.5:.6f}",
                 "level_users": last["level_users"], "prompt_class": last["prompt_class"],
                 "prompt_id": last["prompt_id"], "e2e_ms": f"{waited_ms:.3f}", "chunks": "0",
                 "error": "interrupted: test stopped", "warmup": "0"})
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(last))
        writer.writeheader()
        writer.writerows(rows)


def verdict(tmp_path, waited_ms: float | None):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, **ONE_LEVEL))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, **ONE_LEVEL))
    if waited_ms is not None:
        cut_off(cand, waited_ms)
    return api.verdict_for([base], [cand])


def test_a_request_the_stop_cut_off_after_a_stall_is_named_in_the_warnings(tmp_path):
    found = [w for w in verdict(tmp_path, 31_000.0).warnings if "in flight when the run stopped" in w]
    assert len(found) == 1, found
    assert found[0].startswith("candidate: 1 request(s) still in flight when the run stopped (interrupted) "
                               "are left out of the statistics; the longest had waited 31.0 s, longer than "
                               "any that finished (")
    assert found[0].endswith("s): a stall no percentile shows")


def test_a_request_cut_off_early_is_named_without_a_stall(tmp_path):
    found = [w for w in verdict(tmp_path, 300.0).warnings if "in flight when the run stopped" in w]
    assert found == ["candidate: 1 request(s) still in flight when the run stopped (interrupted) are left "
                     "out of the statistics; the longest had waited 0.3 s"]
    assert not [w for w in verdict(tmp_path / "none", None).warnings if "in flight" in w]


# A TPOT interval over 2 units, one of them a 30 s stall: no usable spread. Throughput's is an ordinary one.
BLIND = Interval(-40.0, -99.99, 5.0e5, units=2, unit="blocks", df=1, method="cluster bootstrap")
SEEN = Interval(3.0, 1.0, 5.0, units=40, unit="blocks", df=39, method="cluster bootstrap")


def test_a_level_without_usable_spread_cannot_detect_any_change_and_says_so():
    level = LevelInput(1, arm(), arm(), spec(), changes={"tpot_p50_ms": BLIND, "tpot_p90_ms": BLIND,
                                                         "output_tok_s": SEEN})
    lv = judge_level(level, Thresholds())
    assert lv.mde_pct["tpot_p50_ms"] > 1e6  # the figure itself stays in verdict.json
    assert lv.power_note == (f"under-powered: this level {NO_DETECTION} (TPOT p50, TPOT p90, over 2 "
                             "independent units); measure longer or repeat")
    line = evidence_line(lv)
    assert f"{NO_DETECTION} (TPOT p50, TPOT p90)" in line and "smallest detectable change output +-" in line
    assert "TPOT p50 +-" not in line
    assert _floor_text({"tpot_p50_ms": lv.mde_pct["tpot_p50_ms"], "output_tok_s": 4.25}) == \
        f"TPOT p50 {NO_DETECTION}, output tok/s +-4.2%"
