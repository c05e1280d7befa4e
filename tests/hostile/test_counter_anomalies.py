"""A /metrics that lies: a counter that falls by one, NaN and +Inf values, a series exposed twice, and the
series of another model on the same endpoint. The run's summary counts the model under test only, judges
restarts per series, and names each anomaly. Before: the fall was taken for a restart of every counter
(their lifetime totals added: acceptance 0.65 against a true 0.25), NaN gave NaN acceptance, the duplicate
a false restart, and the other model's series were summed in."""

from __future__ import annotations

import json
import math

import pytest

from tests.hostile import runs
from tests.hostile.server import chat_stream, models, scripted_metrics

MODEL = "hostile-model"
SPEC = "vllm:spec_decode_num_{}"
FALL, NAN, INF, TWICE = 3, 5, 6, 7  # the scrapes (from 0) where the server misbehaves


def exposition(n: int) -> str:
    """Scrape n: before the run the counters held lifetime totals at acceptance 0.9, the run adds 0.25."""
    ours = {"accepted_tokens": 9000 + 25 * n, "draft_tokens": 10000 + 100 * n, "drafts": 5000 + 25 * n}
    other = {"accepted_tokens": 10 * n, "draft_tokens": 1000 * n, "drafts": 250 * n}
    if n == FALL:
        ours["accepted_tokens"] = 9000 + 25 * (n - 1) - 1
    lines = ["# TYPE process_start_time_seconds gauge", "process_start_time_seconds 1.7e9"]
    for name in ours:
        lines.append(f"# TYPE {SPEC.format(name)}_total counter")
        for model, values in ((MODEL, ours), ("other-model", other)):
            labels = f'{{engine="0",model_name="{model}"}}'
            value = values[name]
            if model == MODEL and name == "accepted_tokens":
                value = {NAN: math.nan, INF: math.inf}.get(n, value)
            text = {math.nan: "NaN", math.inf: "+Inf"}.get(value, repr(float(value)))
            lines.append(f"{SPEC.format(name)}_total{labels} {text}")
            lines.append(f"{SPEC.format(name)}_created{labels} 1.7e9")
            if model == MODEL and name == "accepted_tokens" and n == TWICE:
                lines.append(f"{SPEC.format(name)}_total{labels} 1.0")
    return "\n".join(lines) + "\n"


def test_a_lying_metrics_endpoint_is_counted_for_the_model_under_test_with_each_anomaly_named(
        hostile, tmp_path):
    server = hostile({"/v1/models": models(MODEL), "/v1/chat/completions": chat_stream(),
                      "/metrics": scripted_metrics(exposition)})
    proc = runs.start(tmp_path, server.url, "--headless", "-u", "1", "-r", "1", "-t", "3s",
                      "--metrics-interval", "0.25")
    out, _ = proc.communicate(timeout=120)
    assert "Traceback" not in out, out[-3000:]
    assert len(server.requests_to("/metrics")) > TWICE + 2, out[-2000:]
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    window = summary["server"]
    assert window["acceptance_rate"] == pytest.approx(0.25)  # before: 0.65
    assert window["resets"] == 0
    assert summary["models"] == [MODEL]
    assert (window["models"], window["other_models"]) == ([MODEL], ["other-model"])
    kinds = {a["kind"]: a for a in window["anomalies"]}
    assert set(kinds) == {"counter_decrease", "not_finite", "duplicate_series"}
    assert all(a["series"].startswith(SPEC.format("accepted_tokens_total")) for a in kinds.values())
    assert {k: a["count"] for k, a in kinds.items()} == {"counter_decrease": 1, "not_finite": 2,  # NaN, +Inf
                                                         "duplicate_series": 1}
    warnings = " ".join(summary["warnings"])
    assert "series of other models on the same /metrics left out: other-model" in warnings
    assert warnings.count("server counter anomaly") == 3
