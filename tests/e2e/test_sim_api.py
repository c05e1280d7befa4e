"""spec-sim over real HTTP: vLLM 0.32's shapes, the openai SDK, greedy identity, metrics and acceptance.
A test that reads a counter's value from zero starts its own server; the others share one per option set
(a request's answer depends on the request alone, never on what the server answered before)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai

from tests.support import REFERENCE

CAPTURES = REFERENCE / "vllm-0.32-cpu"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
FAST = ("--time-scale", "0.02")
DETAILED = (*FAST, "--speculative-config", NGRAM, "--per-request-spec-decode-metrics", "detailed")
TEXT = ("Redistribution and use in source and binary forms, with or without modification, are permitted "
        "provided that the following conditions are met: redistributions of source code must retain the "
        "above copyright notice, this list of conditions and the following disclaimer. ") * 2
QUOTE = [{"role": "user", "content": f"Quote verbatim the text below.\n{TEXT}"}]
STORY = [{"role": "user", "content": "Write a story about a lighthouse keeper and a cat."}]


def post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def events(raw: bytes) -> list:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            out.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return out


def stream(url: str, messages: list, **extra) -> list:
    status, raw = post(url, {"model": "sim-8b", "messages": messages, "stream": True, "max_tokens": 60,
                             "temperature": 0, "stream_options": {"include_usage": True,
                                                                  "continuous_usage_stats": True}, **extra})
    assert status == 200
    return events(raw)


def shape(obj):
    """Nested key structure of a JSON value (lists by their first element)."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(obj[0])] if obj else []
    return None


def metrics(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_streamed_chunks_have_the_key_structure_of_real_vllm_chunks(shared_sim):
    sim = shared_sim(*FAST)
    ours = stream(sim.url, QUOTE)
    real = events((CAPTURES / "stream_spec_off.sse").read_bytes())
    assert ours[-1] == real[-1] == "[DONE]"
    for i in (0, 1, -3, -2):
        assert shape(ours[i]) == shape(real[i]), i
    assert ours[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert ours[0]["usage"]["completion_tokens"] == 0
    assert ours[-3]["choices"][0]["finish_reason"] == "length"
    assert ours[-2]["usage"]["completion_tokens"] == 60


def test_per_request_spec_metrics_match_vllm_shape_and_add_up(shared_sim):
    sim = shared_sim(*DETAILED)
    ours = stream(sim.url, QUOTE, stream_options={"include_usage": True})
    real = events((CAPTURES / "stream_ngram_per_request_metrics.sse").read_bytes())
    assert shape(ours[-2]) == shape(real[-2])
    spec = ours[-2]["metrics"]["speculative_decoding"]
    assert sum(spec["per_step_accepted"]) == spec["num_accepted_draft_tokens"]
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]
    status, raw = post(sim.url, {"model": "sim-8b", "messages": QUOTE, "max_tokens": 30})
    real_ns = json.loads((CAPTURES / "nonstream_ngram_per_request_metrics.json").read_text())
    assert status == 200 and shape(json.loads(raw)) == shape(real_ns)


def test_per_request_spec_metrics_without_speculation_omit_or_null_per_step_lists_as_vllm(shared_sim):
    sim = shared_sim(*DETAILED)
    # One token comes from the prefill step alone: no speculation step.
    streamed = stream(sim.url, QUOTE, max_tokens=1, stream_options={"include_usage": True})
    spec = streamed[-2]["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == 0 and "per_step_accepted" not in spec and "per_step_drafted" not in spec
    assert spec["mean_acceptance_length"] == 1.0 and spec["draft_acceptance_rate"] == 0.0
    status, raw = post(sim.url, {"model": "sim-8b", "messages": QUOTE, "max_tokens": 1})
    full = json.loads(raw)["metrics"]["speculative_decoding"]
    assert status == 200 and full["per_step_accepted"] is None and full["per_step_drafted"] is None
    assert full["mean_acceptance_length"] == 1.0 and full["draft_acceptance_rate"] == 0.0


def test_openai_sdk_streams_and_completes(shared_sim):
    sim = shared_sim(*FAST, "--speculative-config", NGRAM)
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x")
    full = client.chat.completions.create(model="sim-8b", messages=QUOTE, max_tokens=40, temperature=0)
    assert full.usage.completion_tokens == 40 and full.choices[0].message.content
    chunks = list(client.chat.completions.create(
        model="sim-8b", messages=QUOTE, max_tokens=40, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 40
    assert [m.id for m in client.models.list()] == ["sim-8b"]


def test_greedy_output_is_identical_with_speculation_on_and_off(shared_sim):
    off, on = shared_sim(*FAST), shared_sim(*FAST, "--speculative-config", NGRAM)
    for messages in (QUOTE, STORY):
        a, b = stream(off.url, messages), stream(on.url, messages)
        text = ["".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-2]) for ev in (a, b)]
        assert text[0] == text[1]
        assert len(b) < len(a) if messages is QUOTE else len(b) <= len(a)


def test_speculation_counters_add_up_and_copying_is_accepted_more_than_stories(spec_sim):
    sim = spec_sim(*FAST, "--speculative-config", NGRAM)
    labels = '{engine="0",model_name="sim-8b"}'
    rates = []
    for messages in (QUOTE, STORY):
        before = metrics(sim.url)
        stream(sim.url, messages, max_tokens=120, ignore_eos=True)
        after = metrics(sim.url)
        delta = {k: after[k] - before.get(k, 0.0) for k in after}
        drafted = delta[f"vllm:spec_decode_num_draft_tokens_total{labels}"]
        accepted = delta[f"vllm:spec_decode_num_accepted_tokens_total{labels}"]
        pos = ('vllm:spec_decode_num_accepted_tokens_per_pos_total'
               '{engine="0",model_name="sim-8b",position="%d"}')
        per_pos = [delta[pos % i] for i in range(4)]
        assert sum(per_pos) == accepted
        assert per_pos == sorted(per_pos, reverse=True)
        rates.append(accepted / drafted if drafted else 0.0)
    assert rates[0] > 0.5 > rates[1]
    m = metrics(sim.url)
    assert m[f"vllm:generation_tokens_total{labels}"] == 240
    assert m['vllm:request_success_total{engine="0",finished_reason="length",model_name="sim-8b"}'] == 2
    assert m[f"vllm:time_to_first_token_seconds_count{labels}"] == 2
    assert f"vllm:kv_cache_usage_perc{labels}" in m and f"vllm:num_requests_waiting{labels}" in m


def test_spec_families_are_absent_without_speculation(shared_sim):
    m = metrics(shared_sim(*FAST).url)
    assert not any(k.startswith("vllm:spec_decode") for k in m)
    assert any(k.startswith("vllm:inter_token_latency_seconds_bucket") for k in m)


def test_bad_requests_get_vllm_error_bodies(shared_sim):
    sim = shared_sim(*FAST)
    status, raw = post(sim.url, {"model": "nope", "messages": QUOTE})
    assert status == 404 and json.loads(raw)["error"]["code"] == 404
    status, raw = post(sim.url, {"model": "sim-8b", "messages": QUOTE, "max_tokens": -1})
    assert status == 400 and json.loads(raw)["error"]["type"] == "BadRequestError"


def test_stop_strings_and_eos_end_generation_with_finish_reason_stop(shared_sim):
    sim = shared_sim(*FAST)
    ev = stream(sim.url, QUOTE, stop=["copyright"], max_tokens=200)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-2])
    assert "copyright" not in text and ev[-3]["choices"][0]["finish_reason"] == "stop"
    assert ev[-3]["choices"][0]["stop_reason"] == "copyright"


def test_a_draft_model_with_another_vocabulary_is_almost_never_accepted(spec_sim):
    labels = '{engine="0",model_name="sim-8b"}'
    rates = []
    for extra in ({"draft_acceptance": 0.8}, {"vocab_mismatch": True}):
        cfg = {"method": "draft_model", "model": "llama-1b", "num_speculative_tokens": 3, **extra}
        sim = spec_sim(*FAST, "--speculative-config", json.dumps(cfg))
        stream(sim.url, STORY, max_tokens=150, ignore_eos=True)
        m = metrics(sim.url)
        rates.append(m[f"vllm:spec_decode_num_accepted_tokens_total{labels}"]
                     / m[f"vllm:spec_decode_num_draft_tokens_total{labels}"])
    assert rates[0] > 0.5 and rates[1] < 0.1


def test_requests_beyond_max_num_seqs_wait_for_a_free_slot(spec_sim):
    sim = spec_sim("--time-scale", "0.2", "--max-num-seqs", "1")
    done: dict[str, float] = {}

    def one(name: str) -> None:
        # long enough that the second request is still queued when polled on a busy machine
        stream(sim.url, STORY, max_tokens=400, ignore_eos=True)
        done[name] = time.perf_counter()

    first = threading.Thread(target=one, args=("first",))
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=one, args=("second",))
    second.start()
    seen_waiting = 0.0
    deadline = time.perf_counter() + 5
    while time.perf_counter() < deadline and not seen_waiting:
        seen_waiting = metrics(sim.url)['vllm:num_requests_waiting{engine="0",model_name="sim-8b"}']
    first.join()
    second.join()
    assert seen_waiting == 1
    assert done["second"] > done["first"]
