"""Real headless Locust against the replay server (real captured vLLM bytes and timings) on loopback."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from locust_spec.client.sse import Chunk, EventSplitter, parse_payload
from tests.replay import load_capture
from tests.support import PY, REPO, SERVER_CPU, free_port, pinned, run_locust, wait_http

SCALE = 0.1
SECRET = "sk-test-never-in-output-7d1f"


@pytest.fixture
def replay(tmp_path):
    procs = []

    def start(*args: str) -> tuple[str, Path]:
        port = free_port()
        log = tmp_path / f"send-{port}.jsonl"
        cmd = pinned([PY, "-m", "tests.replay", "--port", str(port), "--time-scale", str(SCALE),
                      "--send-log", str(log), *args], SERVER_CPU)
        proc = subprocess.Popen(cmd, cwd=REPO)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", proc=proc)
        return url, log

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def locust(tmp_path: Path, url: str, *extra: str, users: int = 4, seconds: int = 4):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "class": "code", "prompt": "x"}\n'
                       '{"id": "b", "class": "chat", "prompt": "y"}\n')
    result = run_locust(["-f", str(REPO / "locustfiles" / "chat.py"), "--headless", "-u", str(users), "-r",
                         str(users), "-t", f"{seconds}s", "--csv", "out/run", "--host", url,
                         "--prompts", str(prompts), "--api-key", SECRET, *extra], cwd=tmp_path)
    rows = list(csv.DictReader((tmp_path / "out" / "run_requests.csv").open()))
    return result, rows


def sent(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def capture_truth(name: str) -> tuple[int, int, float]:
    """(token-carrying chunks, max tokens in a chunk, first-token read time s) read off the capture."""
    splitter, prev, chunks, most, first = EventSplitter(), 0, 0, 0, None
    for t, data in load_capture(name).reads:
        for payload in splitter.feed(data):
            event = parse_payload(payload)
            if isinstance(event, Chunk) and event.has_choices and event.completion_tokens > prev:
                chunks, most = chunks + 1, max(most, event.completion_tokens - prev)
                prev = event.completion_tokens
                first = first if first is not None else t
    return chunks, most, first


def test_every_request_has_one_row_matching_what_the_server_sent(tmp_path, replay):
    url, log = replay("--capture", "stream_ngram")
    result, rows = locust(tmp_path, url)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    ok = [r for r in rows if not r["error"]]
    entries = sent(log)
    complete = [e for e in entries if e["fault"] == "ok"]
    assert len(ok) >= 10
    assert len(ok) <= len(complete) <= len(ok) + 4
    assert all(r["error"].startswith("interrupted") for r in rows if r["error"])
    chunks, most, first_token_s = capture_truth("stream_ngram")
    for row in ok:
        assert int(row["output_tokens"]) == 200 and int(row["prompt_tokens"]) == 172
        assert (int(row["chunks"]), int(row["max_tokens_per_chunk"])) == (chunks, most)
        assert row["tokens_estimated"] == "0" and row["finish_reason"] == "length"
        assert float(row["ttft_ms"]) >= first_token_s * SCALE * 1000 - 1.0
        assert float(row["e2e_ms"]) >= float(row["ttft_ms"])
        assert row["level_users"] == "4" and row["prompt_class"] in ("code", "chat")
    latency = json.loads((tmp_path / "out" / "run_latency.json").read_text())
    assert latency["schema"] == 1 and latency["unit"] == "ms"
    assert latency["metrics"]["ttft"]["all"]["count"] == len(ok)
    assert latency["metrics"]["e2e"]["code"]["count"] + latency["metrics"]["e2e"]["chat"]["count"] == len(ok)
    assert latency["metrics"]["itl"]["all"]["count"] == 199 * len(ok)
    assert latency["levels"]["4"]["ttft"]["all"]["p50"] >= first_token_s * SCALE * 1000 - 1.0
    spent = json.loads((tmp_path / "out" / "run_summary.json").read_text())["client"]["generators"]
    level = spent["budget_by_level"]["4"]
    assert level["chunks"] >= chunks * len(ok) and level["wall_s"] > 0 and 0 <= level["cpu_headroom"] <= 1
    stats = (tmp_path / "out" / "run_stats.csv").read_text()
    assert "TTFT,code" in stats and "TPOT,chat" in stats and "E2E,code" in stats
    assert all(e["authorization"] == f"Bearer {SECRET}" for e in complete)
    for path in (tmp_path / "out").iterdir():
        assert SECRET not in path.read_text(), path
    assert SECRET not in result.stdout + result.stderr


def test_faults_become_named_failures_and_the_run_continues(tmp_path, replay):
    url, log = replay("--capture", "stream_spec_off", "--faults", "ok,500,reset,malformed,stall,nodone")
    # each fault every sixth request: 3 s gave 8-10 of each (6 s before, 17-18)
    result, rows = locust(tmp_path, url, "--idle-timeout", "0.5", users=2, seconds=4)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    kinds = {r["error"].split(":")[0] for r in rows}
    assert {"", "http_500", "reset", "malformed_sse", "timeout_idle", "no_done"} <= kinds
    faults = {e["fault"] for e in sent(log)}
    assert faults >= {"ok", "500", "reset", "malformed", "stall", "nodone"}
    ok_after_faults = [r for r in rows if not r["error"]]
    assert len(ok_after_faults) >= 2
    failures = (tmp_path / "out" / "run_failures.csv").read_text()
    assert "http_500" in failures and "timeout_idle" in failures


def test_server_rejecting_continuous_usage_is_retried_once_without_it(tmp_path, replay):
    url, log = replay("--capture", "stream_spec_off", "--reject-continuous")
    result, rows = locust(tmp_path, url, users=2, seconds=3)
    entries = sent(log)
    rejected = [e for e in entries if e.get("rejected")]
    assert 1 <= len(rejected) <= 2  # one per user racing the first request, then remembered
    served = [e for e in entries if "body" in e]
    assert served and all("continuous_usage_stats" not in e["body"]["stream_options"] for e in served)
    assert sum(1 for r in rows if not r["error"]) >= 2
    assert "continuous_usage_stats" in result.stderr


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_hostile_bodies_get_named_rows_and_good_requests_stay_exact(tmp_path, replay, client):
    url, log = replay("--capture", "stream_spec_off", "--faults", "ok,badtype,bigline,gzip,nodone")
    # every fifth request carries each fault: in 3 s the fast client saw 31-32 of each, the SDK 9 (8 s before)
    result, rows = locust(tmp_path, url, "--client", client, users=2, seconds=4)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    kinds = {r["error"].split(":")[0] for r in rows}
    assert {"", "malformed_sse", "too_large", "no_done", "compressed"} <= kinds <= {
        "", "malformed_sse", "too_large", "no_done", "compressed", "interrupted"}, kinds
    assert any(r["error"].startswith("too_large: a line over") for r in rows)
    assert any(r["error"] == "compressed: content-encoding gzip" for r in rows)
    ok = [r for r in rows if not r["error"]]
    assert ok and all(int(r["output_tokens"]) == 200 and r["finish_reason"] == "length" for r in ok)
    served = {e["fault"] for e in sent(log)}
    assert served >= {"ok", "badtype", "bigline", "gzip", "nodone"}
    encodings = {e.get("accept_encoding") for e in sent(log)}
    assert encodings == {"identity"}, encodings
