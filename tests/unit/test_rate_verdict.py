"""spec-verdict on open-loop runs: levels are rates (req/s), a level whose schedule was not kept is
inconclusive, and the JSON speaks of rates where a ladder's speaks of users."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from locust_spec.analysis import api
from locust_spec.analysis.model import Rate
from locust_spec.analysis.runs import InputError

from locust_spec.core.runfiles import COLUMNS
from tests.data.run_builder import write_pair

RATES = {1: 1.0, 64: 16.0}


def as_rate_run(prefix: Path, late_ms: dict[float, float] | None = None,
                missed: dict[float, int] | None = None) -> Path:
    """The users run at `prefix` rewritten as the open-loop run it stands for: each users level a rate
    (RATES), rows sent `late_ms` after their intended start, the summary's account of each rate level."""
    late_ms, missed = late_ms or {}, missed or {}
    path = Path(f"{prefix}_requests.csv")
    rows = list(csv.DictReader(path.open()))
    for i, row in enumerate(rows):
        rate = RATES[int(row.pop("level_users"))]
        late = late_ms.get(rate, 1.0)
        row.update(level_users="", level_rate=f"{rate:.3f}", arrival=i, lateness_ms=f"{late:.3f}",
                   intended_unix_s=f"{float(row['start_unix_s']) - late / 1000:.6f}")
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    latency_path = Path(f"{prefix}_latency.json")
    latency = json.loads(latency_path.read_text())
    latency["levels"] = {f"{RATES[int(k)]:g}/s": v for k, v in latency["levels"].items()}
    latency_path.write_text(json.dumps(latency))
    summary_path = Path(f"{prefix}_summary.json")
    summary = json.loads(summary_path.read_text())
    counts = {rate: sum(1 for r in rows if float(r["level_rate"]) == rate and r["warmup"] == "0")
              for rate in RATES.values()}
    summary["arrivals"] = {f"{rate:g}/s": {"rate": rate, "scheduled": n + missed.get(rate, 0),
                                           "missed": missed.get(rate, 0), "achieved_rate": rate * 0.99,
                                           "scheduled_rate": rate}
                           for rate, n in counts.items()}
    summary_path.write_text(json.dumps(summary))
    return prefix


def test_an_open_loop_ab_is_judged_per_rate_with_its_crossover_in_requests_per_second(tmp_path):
    base, cand = (as_rate_run(p) for p in write_pair(tmp_path))
    verdict = api.verdict_for([base], [cand])
    assert verdict.axis == "rate"
    assert [lv.users for lv in verdict.levels] == [1.0, 16.0]
    assert all(isinstance(lv.users, Rate) for lv in verdict.levels)
    assert [lv.verdict for lv in verdict.levels] == ["ship", "off"]
    assert "ship at 1 req/s" in verdict.summary and "off at 16 req/s" in verdict.summary
    tpot = next(p for p in verdict.crossover if p.metric == "tpot_p50_ms")
    assert isinstance(tpot.users, Rate) and 1 < tpot.users < 16 and "req/s" in tpot.note
    # throughput is the offered load at a rate level: latency decides, and no throughput crossover
    assert [p.metric for p in verdict.crossover] == ["tpot_p50_ms"]

    doc = json.loads(api.render(verdict, "json"))
    assert doc["schema"] == 7 and doc["axis"] == "rate"
    # a rate level's output rate is the offered load: the declared rule guards latency only
    assert doc["decision_rule"]["guards"] == ["tpot_p90_ms", "ttft_p50_ms"]
    level = doc["levels"][0]
    assert (level["users"], level["rate"]) == (None, 1.0)
    assert level["arrivals"]["candidate"]["lateness_p99_ms"] == pytest.approx(1.0)
    assert level["arrivals"]["baseline"]["scheduled"] == verdict.levels[0].baseline.requests
    crossing = doc["crossover"]["tpot_p50_ms"]
    assert crossing["users"] is None and crossing["rate"] == pytest.approx(float(tpot.users))
    assert "16 req/s" in api.render(verdict, "text")


def test_a_rate_level_whose_arrivals_went_out_late_or_never_is_inconclusive(tmp_path):
    base, cand = write_pair(tmp_path)
    as_rate_run(base, missed={1.0: 5})
    as_rate_run(cand, late_ms={16.0: 400.0})
    verdict = api.verdict_for([base], [cand])
    low, high = verdict.levels
    assert low.verdict == high.verdict == "inconclusive"
    assert any("never sent" in r and r.startswith("baseline") for r in low.reasons)
    assert any("late (lateness p99 400 ms" in r and r.startswith("candidate") for r in high.reasons)


def tiny_run(prefix: Path, **level) -> Path:
    """A run of three finished requests at one level (`level_users=` or `level_rate=`)."""
    with Path(f"{prefix}_requests.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({"start_unix_s": 1.8e9 + i, "prompt_class": "c", "prompt_id": "p",
                          "output_tokens": 10, "ttft_ms": 5, "tpot_ms": 1, "e2e_ms": 15, "warmup": 0, **level}
                         for i in range(3))
    return prefix


def test_rate_runs_are_not_compared_with_users_runs_nor_mixed_with_them(tmp_path):
    users, rate = tiny_run(tmp_path / "users", level_users=4), tiny_run(tmp_path / "rate", level_rate=4.0)
    with pytest.raises(InputError, match="mix rate levels"):
        api.verdict_for([users], [rate])
    mixed = tiny_run(tmp_path / "mixed", level_rate=4.0)
    with Path(f"{mixed}_requests.csv").open("a", newline="") as fh:
        csv.DictWriter(fh, fieldnames=COLUMNS).writerow({"start_unix_s": 1.8e9, "level_users": 4,
                                                          "prompt_class": "c", "prompt_id": "p", "warmup": 0})
    with pytest.raises(InputError, match="mixes users levels and rate levels"):
        api.verdict_for([mixed], [rate])
