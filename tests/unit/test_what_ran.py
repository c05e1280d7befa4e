"""Which speculation each arm ran, recorded: the config given (spec-ab's --speculative-config-baseline and
-candidate, Locust's --speculative-config), else what the server's counters show, marked as inferred."""

from __future__ import annotations

import json
from pathlib import Path

from locust_spec.analysis import api
from locust_spec.analysis.cli import run

from locust_spec.recording.provenance import speculative_part
from locust_spec.sim.metrics import SimMetrics
from tests.data.run_builder import ArmSpec, write_run

ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 12}}


def sim_texts(k: int) -> tuple[str, str]:
    """spec-sim's own /metrics before and after some speculative steps with k draft positions."""
    metrics = SimMetrics("tiny-llama", num_spec_tokens=k)
    before = metrics.exposition().decode()
    for _ in range(50):
        metrics.step(gen=3, prompt=0, cached=0, itls=[0.01], drafts=1, draft_tokens=k, accepted=2,
                     per_pos=[1, 1, *([0] * (k - 2))], running=1, waiting=0, kv_usage=0.1)
    return before, metrics.exposition().decode()


def test_k_is_inferred_from_spec_sims_per_position_counters_and_the_baseline_drafted_nothing(tmp_path):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, **ONE_LEVEL))
    for k in (3, 5):
        spec = ArmSpec(speculative=True, seed=2, metrics_texts=sim_texts(k), **ONE_LEVEL)
        cand = write_run(tmp_path / f"k{k}" / "run", spec)
        baseline, candidate = api.verdict_for([base], [cand]).what_ran
        assert (candidate.drafted, candidate.k, candidate.given) == (True, k, None)
        assert (baseline.drafted, baseline.k) == (False, None)
        assert candidate.line() == f"given: not given; inferred: drafted, k={k} (per-position counters)"


def test_the_config_given_is_recorded_and_shown_in_verdict_json_and_the_reports(tmp_path, capsys):
    config = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, speculative_config="none",
                                                       **ONE_LEVEL))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, speculative_config=config,
                                                      **ONE_LEVEL))
    html = tmp_path / "report.html"
    assert run([str(base), str(cand), "--format", "json", "-o", str(html)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["speculation"] == {
        "baseline": {"given": "none", "inferred": {"drafted": False, "k": None, "signs": []}},
        "candidate": {"given": config, "inferred": {"drafted": True, "k": 4, "signs": []}}}
    assert "given: {&#x27;method&#x27;: &#x27;ngram&#x27;" in Path(html).read_text()


def test_locusts_option_is_recorded_as_json_where_it_is_json():
    assert speculative_part('{"method": "ngram"}') == {"config": {"method": "ngram"}, "source": "given"}
    assert speculative_part("none") == {"config": "none", "source": "given"}
    assert speculative_part("") is None
