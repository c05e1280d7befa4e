"""The usual mistakes at start stop the run in one line, exit 2, instead of a flood. Before: `--model WRONG`
sent thousands of requests (each a 404) and blamed the load generator; a `--metrics-url` answering 404 gave a
warning every second and exit 0 with no acceptance. Neither run has a run time: only the check can end it."""

from __future__ import annotations

import subprocess

from tests.hostile import runs
from tests.hostile.server import chat_stream, metrics_text, models

SERVED = {"/v1/models": models("served-model"), "/v1/chat/completions": chat_stream()}


def _run(tmp, host: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    result = subprocess.run(runs.locust_cmd(tmp, host, "--headless", "-u", "4", "-r", "4", *extra),
                            cwd=tmp, capture_output=True, text=True, timeout=60)
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out[-3000:]
    return result, [line for line in out.splitlines() if "/ERROR/" in line]


def test_a_model_the_server_does_not_list_stops_before_any_request(hostile, tmp_path):
    server = hostile({**SERVED, "/metrics": metrics_text})
    result, errors = _run(tmp_path, server.url, "--model", "WRONG")
    assert result.returncode == 2
    assert len(errors) == 1, errors
    assert (f"{server.url} does not serve the model 'WRONG' (GET /v1/models lists 'served-model')"
            in errors[0]), errors[0]
    assert server.requests_to("/v1/chat/completions") == []
    # the reason and its fix again as the last line, below Locust's empty tables
    last = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()][-1]
    assert last.startswith("locust-spec: the run stopped early (exit code 2): "), last
    assert "pass --model" in last, last


def test_a_metrics_url_answering_404_stops_the_run_in_one_line(hostile, tmp_path):
    server = hostile(SERVED)  # no /metrics: 404 (as HOST/metrics, the default, it stays a warning)
    result, errors = _run(tmp_path, server.url, "--model", "served-model", "--metrics-url",
                          server.url + "/metrics")
    assert result.returncode == 2
    assert len(errors) == 1, errors
    assert f"the metrics URL {server.url}/metrics answers HTTP 404" in errors[0], errors[0]
    assert "--metrics-url off" in errors[0]
    assert "a gap in the server counters" not in result.stderr, "the refusal is not also a scrape warning"
