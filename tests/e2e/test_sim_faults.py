"""spec-sim's faults as a plain HTTP client sees them, plus restart, grammar fallback and the send log."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

from tests.e2e.test_sim_api import FAST, NGRAM, QUOTE, metrics, post
from tests.support import restart_sim

BODY = {"model": "sim-8b", "messages": QUOTE, "stream": True, "max_tokens": 40,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def raw_stream(url: str, body: dict = BODY, timeout: float = 30) -> tuple[int, dict, list[bytes]]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    resp = conn.getresponse()
    lines = [line.rstrip(b"\n") for line in resp if line.strip()]
    conn.close()
    return resp.status, dict(resp.getheaders()), lines


def test_fault_500_answers_an_internal_error(spec_sim):
    status, raw = post(spec_sim(*FAST, "--fault-500", "1").url, BODY)
    assert status == 500 and json.loads(raw)["error"]["code"] == 500


def test_fault_429_answers_too_many_requests_with_retry_after(spec_sim):
    status, headers, _ = raw_stream(spec_sim(*FAST, "--fault-429", "1").url)
    assert status == 429 and headers["retry-after"] == "1"


def test_fault_reset_drops_the_connection_mid_stream(spec_sim):
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead, http.client.HTTPException)):
        raw_stream(spec_sim(*FAST, "--fault-reset", "1").url)


def test_fault_malformed_sends_a_line_that_is_not_json(spec_sim):
    _, _, lines = raw_stream(spec_sim(*FAST, "--fault-malformed", "1").url)
    bad = []
    for line in lines:
        if line.startswith(b"data: {"):
            try:
                json.loads(line[6:])
            except ValueError:
                bad.append(line)
    assert len(bad) == 1 and lines[-1] == b"data: [DONE]"


def test_fault_stall_outlasts_a_client_idle_timeout_after_the_first_token(spec_sim):
    sim = spec_sim(*FAST, "--fault-stall", "1", "--stall-seconds", "5")
    with pytest.raises((TimeoutError, socket.timeout)):
        raw_stream(sim.url, timeout=1.5)


def test_a_stall_at_token_zero_comes_before_any_token_so_a_client_waits_for_its_first(spec_sim):
    # vLLM sends the role chunk with the first token's step, so during this stall nothing at all arrives.
    sim = spec_sim(*FAST, "--fault-stall", "1", "--stall-at-token", "0", "--stall-seconds", "3")
    host, port = sim.url.removeprefix("http://").split(":")
    body = json.dumps(BODY).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        sock.settimeout(1.0)
        during = b""
        with pytest.raises((TimeoutError, socket.timeout)):
            while chunk := sock.recv(65536):
                during += chunk
        sock.settimeout(30)
        after = b""
        while not after.endswith(b"0\r\n\r\n") and (chunk := sock.recv(65536)):
            after += chunk
    assert during == b""
    assert b'"delta":{"content":' in after and b"data: [DONE]" in after


def test_fault_no_done_ends_the_stream_without_done(spec_sim):
    _, _, lines = raw_stream(spec_sim(*FAST, "--fault-no-done", "1").url)
    assert b"data: [DONE]" not in lines and json.loads(lines[-1][6:])["choices"] == []


def test_restart_resets_every_counter_with_a_new_created(spec_sim):
    sim = spec_sim(*FAST, "--speculative-config", NGRAM)
    raw_stream(sim.url)
    before = metrics(sim.url)
    restart_sim(sim.url)
    after = metrics(sim.url)
    gen = 'vllm:generation_tokens_total{engine="0",model_name="sim-8b"}'
    created = 'vllm:generation_tokens_created{engine="0",model_name="sim-8b"}'
    assert before[gen] == 40 and after[gen] == 0
    assert after[created] > before[created]


def test_restart_every_few_seconds_drops_streams_in_flight(spec_sim):
    sim = spec_sim("--time-scale", "1", "--restart-after", "2")
    body = {**BODY, "max_tokens": 4000, "ignore_eos": True}
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead, http.client.HTTPException)):
        raw_stream(sim.url, body)


def test_grammar_disables_spec_leaves_spec_counters_still(spec_sim):
    sim = spec_sim(*FAST, "--speculative-config", NGRAM, "--grammar-disables-spec")
    status, _, _ = raw_stream(sim.url, {**BODY, "response_format": {"type": "json_object"}})
    m = metrics(sim.url)
    assert status == 200
    assert m['vllm:spec_decode_num_drafts_total{engine="0",model_name="sim-8b"}'] == 0
    assert m['vllm:generation_tokens_total{engine="0",model_name="sim-8b"}'] == 40


def test_send_log_records_each_arrival_then_every_chunk_with_its_tokens(spec_sim, tmp_path):
    log = tmp_path / "send.csv"
    sim = spec_sim(*FAST, "--speculative-config", NGRAM, "--send-log", str(log))
    _, _, lines = raw_stream(sim.url)
    status, _ = post(sim.url, {**BODY, "stream": False})
    sim.stop()
    header, *rows = [r.split(",") for r in log.read_text().splitlines()]
    assert header == ["request_id", "time_ns", "tokens"] and status == 200
    streamed, full = (rows[0][0], rows[-1][0])
    first = [r for r in rows if r[0] == streamed]
    assert first[0][2] == "-1" and all(int(r[2]) >= 0 for r in first[1:])
    token_chunks = [line for line in lines if line.startswith(b"data: {") and b'"choices":[{' in line]
    assert len(first) - 1 == len(token_chunks)
    assert sum(int(r[2]) for r in first[1:]) == 40
    assert [r[2] for r in rows if r[0] == full] == ["-1", "40"]
    times = [int(r[1]) for r in rows]
    assert times == sorted(times)
