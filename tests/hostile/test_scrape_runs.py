"""Whole headless runs whose /metrics is hostile: the load runs and ends on time, the scrape's problem
is a warning. Before: a /metrics answering a byte a second held test_start, and the run sent nothing and
never ended."""

from __future__ import annotations

import csv
import json
import subprocess

from tests.hostile import runs
from tests.hostile.server import chat_stream, huge_metrics, metrics_text, models, slow

LOAD = {"/v1/models": models(), "/v1/chat/completions": chat_stream()}


def _rows(tmp) -> list[dict]:
    with (tmp / "run_requests.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _summary(tmp) -> dict:
    return json.loads((tmp / "run_summary.json").read_text())


def test_a_metrics_endpoint_sending_a_byte_a_second_neither_blocks_the_load_nor_the_end(hostile, tmp_path):
    server = hostile({**LOAD, "/metrics": slow(1.0)})
    proc = runs.start(tmp_path, server.url, "--headless", "-u", "2", "-r", "2", "-t", "4s",
                      "--metrics-timeout", "2", "--metrics-interval", "1")
    out, _ = proc.communicate(timeout=120)  # before: it never exited
    assert "Traceback" not in out, out[-3000:]
    rows = _rows(tmp_path)
    # a request still in flight when the run ends is `interrupted`; every other one is fine
    assert len(rows) > 10 and all(r["error"] == "" or r["error"].startswith("interrupted") for r in rows)
    warnings = " ".join(_summary(tmp_path)["warnings"])
    assert f"metrics scrape of {server.url}/metrics failed" in warnings
    assert "timed out: no complete answer within 2 s" in warnings


def test_a_metrics_answer_over_the_cap_is_a_warning_and_one_under_it_is_read(hostile, tmp_path):
    server = hostile({**LOAD, "/metrics": huge_metrics(3 << 20), "/real/metrics": metrics_text})
    proc = runs.start(tmp_path, server.url, "--headless", "-u", "2", "-r", "2", "-t", "3s",
                      "--metrics-max-bytes", str(2 << 20), "--metrics-url", server.url + "/metrics",
                      "--metrics-url", server.url + "/real/metrics", "--metrics-interval", "1")
    out, _ = proc.communicate(timeout=120)
    assert "Traceback" not in out, out[-3000:]
    assert len(_rows(tmp_path)) > 10
    assert "larger than the limit of 2097152" in " ".join(_summary(tmp_path)["warnings"])
    with (tmp_path / "run_server_metrics.csv").open(newline="") as f:
        urls = {r["url"] for r in csv.DictReader(f)}
    assert urls == {server.url + "/real/metrics"}


def test_a_password_with_a_slash_stops_the_run_with_one_line_without_it(hostile, tmp_path):
    server = hostile(LOAD)
    bad = server.url.replace("http://", "http://scraper:Sl4sh/Secret#9@") + "/metrics"
    result = subprocess.run(runs.locust_cmd(tmp_path, server.url, "--headless", "-u", "1", "-t", "2s",
                                            "--metrics-url", bad),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in out and "Sl4sh" not in out and "Secret" not in out
    line = next(line for line in out.splitlines() if "--metrics-url" in line)
    assert "--metrics-url #1 of 1: the address has an invalid port" in line and "%2F %3F %23 %40" in line
    assert server.requests_to("/v1/chat/completions") == []
