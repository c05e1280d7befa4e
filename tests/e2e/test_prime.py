"""Priming: every prompt sent once, so both A/B arms start with equally warm prefix caches."""

from __future__ import annotations

import subprocess
import urllib.request

import orjson
import pytest

from locust_spec.client.server_api import first_model, prime, prime_body
from locust_spec.core.prompts import Prompt, load_prompt_set
from tests.support import BIN, free_port


def _counter(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_prime_request_asks_for_one_token_of_the_prompt_unstreamed():
    prompt = load_prompt_set("chat")[0]
    body = orjson.loads(prime_body(prompt, "m"))
    assert body == {"model": "m", "messages": list(prompt.messages), "max_tokens": 1, "temperature": 0,
                    "stream": False}


def test_priming_fills_the_servers_prefix_cache(spec_sim):
    sim = spec_sim("--time-scale", "0.05")
    prompts = load_prompt_set("quote")[:20]
    model = first_model(sim.url, "", timeout=10)
    first = prime(sim.url, prompts, model)
    assert (first.sent, first.failed) == (20, 0)
    hits_before = _counter(sim.url, "vllm:prefix_cache_hits_total")
    again = prime(sim.url, prompts, model)
    assert again.failed == 0
    assert _counter(sim.url, "vllm:prefix_cache_hits_total") > hits_before


def test_priming_a_dead_server_reports_failures_without_raising(tmp_path):
    result = prime("http://127.0.0.1:9", load_prompt_set("chat")[:3], "m", timeout=2)
    assert (result.sent, result.failed) == (3, 3) and "chat-" in result.first_error


def test_first_model_names_the_url_but_never_the_key():
    with pytest.raises(RuntimeError) as err:
        first_model("http://127.0.0.1:9", "sk-secret", timeout=2)
    assert "127.0.0.1:9/v1/models" in str(err.value) and "sk-secret" not in str(err.value)


def test_spec_prime_waits_for_a_loading_server_then_sends_every_prompt_once(spec_sim):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(BIN / "spec-prime"), "--host", url + "/v1", "--prompts", "code,quote:2",
                             "--wait-s", "120", "--name", "baseline"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        sim = spec_sim("--time-scale", "0.05", port=port)  # starts after spec-prime began waiting
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    sets = len(load_prompt_set("code")) + len(load_prompt_set("quote"))
    assert proc.returncode == 0, out
    assert f"baseline: primed the prefix cache with {sets} prompts" in out and "failed" not in out
    assert _counter(sim.url, "vllm:request_success_total") == sets


def test_spec_prime_gives_up_on_a_server_that_never_answers():
    done = subprocess.run([str(BIN / "spec-prime"), "--host", "http://127.0.0.1:9", "--wait-s", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "127.0.0.1:9/v1/models" in done.stderr


def test_a_refused_prime_carries_the_servers_reason(spec_sim):
    sim = spec_sim("--time-scale", "0.05", "--max-model-len", "64")
    long = Prompt("long-1", "long", ({"role": "user", "content": "copy this " * 100},), None)
    result = prime(sim.url, [long, *load_prompt_set("chat")[:1]], "sim-8b", timeout=10)
    assert result.failed == 1
    assert result.first_error.startswith("long-1: HTTP 400: This model's maximum context length is 64 tokens")
