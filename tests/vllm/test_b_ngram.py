"""Real vLLM with n-gram speculation (k=4 at batch 1, none from batch 2: a per-batch-size schedule) and
per-request speculation stats."""

import csv
import logging
import threading

import pytest

from locust_spec.metrics.counters import snapshots_from_rows, spec_window
from tests.vllm.arms import ARM_MAX_TOKENS
from tests.vllm.client import complete, final_usage, spec_counters, spec_stats, stream_chat, token_increments
from tests.vllm.prompts import PROMPTS

# The first test of a module also waits for a server start (and, on a fresh machine, the install).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
log = logging.getLogger(__name__)

NUMBERS_SCHEMA = {"type": "object", "properties": {"values": {"type": "array", "items": {"type": "integer"},
                                                              "minItems": 40}},
                  "required": ["values"], "additionalProperties": False}
SCHEDULE_TOKENS = 120


@pytest.fixture(scope="module")
def server(vllm_pool):
    return vllm_pool.server("ngram")


def test_ngram_streams_chunks_carrying_several_tokens_counted_from_cumulative_usage(server):
    events = stream_chat(server.url, PROMPTS[0], max_tokens=200)
    steps = token_increments(events)
    assert max(steps) > 1, f"no multi-token chunk in {steps}"
    assert sum(steps) == final_usage(events)["completion_tokens"]
    assert len(steps) - 1 < sum(steps), "fewer content chunks than tokens"


def test_ngram_counters_move_and_positions_sum_to_the_accepted_total(server):
    before = spec_counters(server.url)
    stream_chat(server.url, PROMPTS[1], max_tokens=200)
    delta = spec_counters(server.url) - before
    log.info("n-gram delta: drafts %s draft tokens %s accepted %s per position %s", delta.drafts,
             delta.draft_tokens, delta.accepted, delta.per_position)
    assert delta.drafts > 0 and delta.draft_tokens >= delta.drafts
    assert 0 < delta.accepted <= delta.draft_tokens
    assert len(delta.per_position) == 4
    assert sum(delta.per_position) == delta.accepted
    assert list(delta.per_position) == sorted(delta.per_position, reverse=True)


def test_per_request_spec_stats_summed_over_requests_equal_the_counter_delta(server):
    before = spec_counters(server.url)
    stats = [spec_stats(stream_chat(server.url, prompt, max_tokens=120)) for prompt in PROMPTS]
    stats.append(complete(server.url, PROMPTS[2], max_tokens=120)["metrics"]["speculative_decoding"])
    delta = spec_counters(server.url) - before
    assert sum(s["num_spec_steps"] for s in stats) == delta.drafts
    assert sum(s["num_draft_tokens"] for s in stats) == delta.draft_tokens
    assert sum(s["num_accepted_draft_tokens"] for s in stats) == delta.accepted
    for s in stats[:-1]:
        assert sum(s["per_step_accepted"]) == s["num_accepted_draft_tokens"]
        assert sum(s["per_step_drafted"]) == s["num_draft_tokens"]


def test_grammar_constrained_output_keeps_speculating_under_ngram(server):
    """vLLM 0.32 keeps proposing and verifying n-gram drafts when `response_format` constrains output."""
    before = spec_counters(server.url)
    schema = {"type": "json_schema", "json_schema": {"name": "numbers", "schema": NUMBERS_SCHEMA}}
    events = stream_chat(server.url, PROMPTS[3], max_tokens=150, response_format=schema)
    delta = spec_counters(server.url) - before
    stats = spec_stats(events)
    log.info("json_schema under n-gram: %s", stats)
    assert delta.drafts > 0 and delta.accepted > 0
    assert stats["num_spec_steps"] == delta.drafts
    assert max(token_increments(events)) > 1


def test_json_object_mode_keeps_speculating_under_ngram(server):
    before = spec_counters(server.url)
    events = stream_chat(server.url, PROMPTS[0], max_tokens=150, response_format={"type": "json_object"})
    delta = spec_counters(server.url) - before
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if isinstance(e, dict) and e.get("choices"))
    log.info("json_object under n-gram: %s; text starts %r", spec_stats(events), text[:60])
    assert text.lstrip().startswith("{")
    assert delta.drafts > 0 and delta.accepted > 0


def test_locust_user_on_real_ngram_streams_counts_multi_token_chunks_from_usage(arm_runs):
    run = arm_runs.get("ngram")
    rows = run.rows()
    assert len(rows) >= 5
    for row in rows:
        assert row["error"] == "" and row["tokens_estimated"] == "0"
        assert int(row["output_tokens"]) == ARM_MAX_TOKENS
        assert 0 < float(row["ttft_ms"]) < float(row["e2e_ms"])
        assert int(row["chunks"]) <= ARM_MAX_TOKENS
        assert 1 <= int(row["max_tokens_per_chunk"]) <= 5
    assert max(int(r["max_tokens_per_chunk"]) for r in rows) > 1
    assert sum(int(r["chunks"]) for r in rows) < sum(int(r["output_tokens"]) for r in rows)
    assert sum(int(r["output_tokens"]) for r in rows) == run.delta.generation_tokens


def test_scraper_acceptance_equals_the_server_counter_delta_and_the_per_request_stats_summed(arm_runs):
    run = arm_runs.get("ngram")
    with open(f"{run.prefix}_server_metrics.csv", newline="") as fh:
        snapshots = snapshots_from_rows(list(csv.DictReader(fh)))
    window = spec_window(snapshots, snapshots[0].timestamp_unix_s, snapshots[-1].timestamp_unix_s)
    own, rows = run.delta, run.rows()
    log.info("n-gram run: scraper acceptance %.3f (%s of %s), per position %s; server delta %s of %s",
             window.acceptance_rate, window.accepted, window.draft_tokens, window.per_position,
             own.accepted, own.draft_tokens)
    assert window.server_kind == "vllm-v1" and window.resets == 0
    assert window.drafts == own.drafts
    assert (window.draft_tokens, window.accepted) == (own.draft_tokens, own.accepted)
    assert window.per_position == pytest.approx([p / own.drafts for p in own.per_position])
    assert sum(own.per_position) == own.accepted
    assert sum(int(r["spec_accepted_tokens"]) for r in rows) == own.accepted
    assert sum(int(r["spec_draft_tokens"]) for r in rows) == own.draft_tokens


def stream_together(url: str, n: int) -> list[dict]:
    """n streams started at once (a barrier), the same length each: their steps share one batch."""
    barrier = threading.Barrier(n)
    stats: list[dict] = [{}] * n

    def one(i: int) -> None:
        barrier.wait()
        events = stream_chat(url, PROMPTS[i % len(PROMPTS)], max_tokens=SCHEDULE_TOKENS, ignore_eos=True)
        stats[i] = spec_stats(events)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return stats


def test_the_schedule_drafts_at_one_user_and_not_at_four(server):
    before = spec_counters(server.url)
    alone = spec_stats(stream_chat(server.url, PROMPTS[0], max_tokens=SCHEDULE_TOKENS, ignore_eos=True))
    alone_delta = spec_counters(server.url) - before
    log.info("schedule [[1,1,4],[2,256,0]] at 1 user: %s", alone)
    assert alone["num_spec_steps"] > 0 and alone_delta.drafts > 0
    assert 0 < max(alone["per_step_drafted"]) <= 4

    before = spec_counters(server.url)
    crowd = stream_together(server.url, 4)
    crowd_delta = spec_counters(server.url) - before
    log.info("at 4 users: spec steps %s, counter drafts %s", [s["num_spec_steps"] for s in crowd],
             crowd_delta.drafts)
    # Steps of batch 1 can only happen at the edges (one request admitted or left alone): a handful.
    steps_per_token_alone = alone["num_spec_steps"] / SCHEDULE_TOKENS
    steps_per_token_crowd = sum(s["num_spec_steps"] for s in crowd) / (4 * SCHEDULE_TOKENS)
    assert steps_per_token_crowd < 0.25 * steps_per_token_alone
    assert crowd_delta.drafts == sum(s["num_spec_steps"] for s in crowd)
