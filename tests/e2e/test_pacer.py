"""locust_spec/sim/pacer.py, the fidelity benchmark's judge and the capacity calibration's server: vLLM's
chunk bytes on a fixed step grid, every send logged, and the concurrency it holds on /metrics."""

from __future__ import annotations

import csv
import subprocess
import threading
import urllib.request

from locust_spec.client.sse import Chunk, parse_lines
from locust_spec.metrics.counters import parse_exposition
from tests.e2e.test_sim_api import post
from tests.support import PY, SERVER_CPU, free_port, pinned, wait_http

STEP_MS = 20.0


def _gauge(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(s.value for s in parse_exposition(text) if s.metric == name)


def test_pacer_sends_one_usage_counted_token_per_step_to_each_stream_and_logs_each_send(tmp_path):
    port, log = free_port(), tmp_path / "send.csv"
    pacer = subprocess.Popen(pinned([PY, "-m", "locust_spec.sim.pacer", "--port", str(port),
                                     "--step-ms", f"{STEP_MS:g}", "--send-log", str(log)], SERVER_CPU))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc=pacer)
        body = {"model": "sim-8b", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_tokens": 12, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        answers: list[tuple[int, bytes]] = []
        streams = [threading.Thread(target=lambda: answers.append(post(url, body))) for _ in range(3)]
        for t in streams:
            t.start()
        for t in streams:
            t.join(30)
        assert post(url, {**body, "stream": False})[0] == 400
        assert _gauge(url, "vllm:num_requests_running") == 0
        assert _gauge(url, "vllm:time_to_first_token_seconds_count") == 3
    finally:
        pacer.terminate()
        pacer.wait(10)
    assert pacer.returncode == 0

    for status, raw in answers:
        assert status == 200
        events = [e for _, e in parse_lines([(0.0, line + b"\n") for line in raw.split(b"\n")])]
        chunks = [e for e in events if isinstance(e, Chunk) and e.has_choices]
        assert [c.completion_tokens for c in chunks] == list(range(13))  # role chunk, then one token each
        assert chunks[-1].finish_reason == "length"
    rows = list(csv.DictReader(log.open()))
    by_id: dict[str, list[int]] = {}
    for row in rows:
        if int(row["tokens"]) > 0:
            by_id.setdefault(row["request_id"], []).append(int(row["time_ns"]))
    assert sorted(len(times) for times in by_id.values()) == [12, 12, 12]
    for times in by_id.values():
        gaps_ms = [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
        # steps are on a fixed grid: a late step shortens the next gap, never shifts the grid
        assert abs(sum(gaps_ms) / len(gaps_ms) - STEP_MS) < STEP_MS * 0.1, gaps_ms
