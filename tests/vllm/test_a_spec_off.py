"""Real vLLM without speculation: every token counted, no speculative-decoding counters.

A chunk usually carries one token here, but not always: vLLM's output collector merges the deltas of
consecutive steps when its API server falls behind (seen on a busy machine: 47 chunks for 48 tokens). The
tests assert what the product controls (the count), not the server's pacing."""

import pytest

from tests.vllm.arms import ARM_MAX_TOKENS
from tests.vllm.client import final_usage, spec_counters, stream_chat, token_increments
from tests.vllm.prompts import PROMPTS

# The first test of a module also waits for a server start (and, on a fresh machine, the install).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def server(vllm_pool):
    return vllm_pool.server("off")


def test_without_speculation_every_chunk_after_the_role_chunk_carries_tokens_that_add_up(server):
    events = stream_chat(server.url, PROMPTS[0], max_tokens=64)
    steps = token_increments(events)
    assert events[-1] == "[DONE]"
    assert steps[0] == 0, "the first chunk only announces the assistant role"
    assert min(steps[1:]) >= 1
    assert sum(steps) == final_usage(events)["completion_tokens"] > 0


def test_without_speculation_the_server_exposes_no_spec_decode_counters(server):
    counters = spec_counters(server.url)
    assert "vllm:generation_tokens" in counters.families
    assert not any(name.startswith("vllm:spec_decode") for name in counters.families)


def test_locust_user_on_real_streams_without_speculation_counts_every_token(arm_runs):
    run = arm_runs.get("off")
    rows = run.rows()
    assert len(rows) >= 5
    for row in rows:
        assert row["error"] == "" and row["finish_reason"] == "length"
        assert int(row["output_tokens"]) == ARM_MAX_TOKENS and row["tokens_estimated"] == "0"
        assert 0 < int(row["chunks"]) <= ARM_MAX_TOKENS
        assert 0 < float(row["ttft_ms"]) < float(row["e2e_ms"])
        assert row["spec_accepted_tokens"] == row["spec_draft_tokens"] == ""
    assert sum(int(r["output_tokens"]) for r in rows) == run.delta.generation_tokens
