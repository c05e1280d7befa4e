"""RequestTiming from real vLLM 0.32 captures replayed with their real read times."""

from __future__ import annotations

import orjson
import pytest

from locust_spec.client.sse import DONE, Chunk, EventSplitter, parse_payload
from locust_spec.client.timing import percentile, request_timing
from tests.replay import CAPTURES, load_capture


def timed_events(name: str) -> list:
    """Each event stamped with the time of the socket read that completed it (start = 0)."""
    splitter, events = EventSplitter(), []
    for t, data in load_capture(name).reads:
        events += [(t, parse_payload(p)) for p in splitter.feed(data)]
    return events


def first_token_read_time(name: str) -> float:
    """Independent of the parser: the first read holding a chunk whose usage shows a completion token."""
    for t, data in load_capture(name).reads:
        for line in data.split(b"\n"):
            if line.startswith(b"data: {") and b'"completion_tokens":1' in line:
                return t
    raise AssertionError("no token in capture")


@pytest.mark.parametrize("name", ["stream_spec_off", "stream_ngram"])
def test_ttft_is_the_first_token_chunk_not_the_role_chunk(name):
    events = timed_events(name)
    timing = request_timing(0.0, events, events[-1][0])
    assert timing.ttft_ms == pytest.approx(first_token_read_time(name) * 1000)
    assert timing.ttft_ms > events[0][0] * 1000


def test_spec_off_has_one_token_per_chunk():
    events = timed_events("stream_spec_off")
    timing = request_timing(0.0, events, events[-1][0])
    assert (timing.output_tokens, timing.chunks, timing.max_tokens_per_chunk) == (200, 200, 1)
    assert timing.itl_ms == timing.chunk_gaps_ms
    assert timing.done and timing.error is None and timing.finish_reason == "length"
    assert not timing.tokens_estimated and timing.prompt_tokens is not None


def test_ngram_chunks_carry_several_tokens_counted_from_usage():
    events = timed_events("stream_ngram")
    timing = request_timing(0.0, events, events[-1][0])
    assert timing.output_tokens == 200
    assert timing.chunks < 200
    assert 1 < timing.max_tokens_per_chunk <= 5
    assert not timing.tokens_estimated


def test_itl_is_token_weighted_and_sums_to_the_decode_time():
    events = timed_events("stream_ngram")
    timing = request_timing(0.0, events, events[-1][0])
    cums = [e.completion_tokens for _, e in events if isinstance(e, Chunk) and e.has_choices]
    first_chunk_tokens = next(c for c in cums if c > 0)
    assert len(timing.itl_ms) == timing.output_tokens - first_chunk_tokens
    decode_ms = sum(timing.chunk_gaps_ms)
    assert sum(timing.itl_ms) == pytest.approx(decode_ms)
    assert timing.tpot_ms == pytest.approx(decode_ms / (timing.output_tokens - 1))
    assert timing.itl_p50_ms < timing.chunk_gap_p50_ms


def test_without_continuous_usage_tokens_are_estimated_but_total_is_exact():
    splitter = EventSplitter()
    payloads = splitter.feed((CAPTURES / "stream_ngram_per_request_metrics.sse").read_bytes())
    events = [(i * 0.01, parse_payload(p)) for i, p in enumerate(payloads)]
    timing = request_timing(0.0, events, 1.0)
    assert timing.tokens_estimated
    assert timing.output_tokens == 40 and timing.prompt_tokens == 32
    assert timing.chunks < 40
    assert (timing.spec_accepted_tokens, timing.spec_draft_tokens) == (22, 28)
    assert timing.e2e_ms == pytest.approx(1000.0)


def test_a_token_held_back_mid_utf8_still_counts():
    role = Chunk(completion_tokens=0, text_chars=0)
    held = Chunk(completion_tokens=1, text_chars=0)
    text = Chunk(completion_tokens=3, text_chars=2)
    timing = request_timing(0.0, [(0.1, role), (0.2, held), (0.4, text), (0.5, DONE)], 0.5)
    assert timing.ttft_ms == pytest.approx(200)
    assert timing.itl_ms == pytest.approx((100, 100))


def test_stream_without_done_is_an_error_and_malformed_is_named():
    ok = Chunk(completion_tokens=1, text_chars=1)
    assert request_timing(0, [(0.1, ok)], 0.2).error.startswith("no_done")
    bad = parse_payload(b"{oops")
    assert request_timing(0, [(0.1, ok), (0.2, bad), (0.3, DONE)], 0.3).error.startswith("malformed_sse")
    err = parse_payload(orjson.dumps({"error": {"message": "x"}}))
    assert request_timing(0, [(0.1, err)], 0.2).error == "server_error: x"


def test_token_chunks_read_together_are_counted_as_merged():
    # three token chunks, the last two in one read (one stamp): a late reader, or a buffering proxy
    chunks = [Chunk(completion_tokens=n, text_chars=1) for n in (1, 2, 3)]
    timing = request_timing(0.0, [(0.1, chunks[0]), (0.3, chunks[1]), (0.3, chunks[2]), (0.3, DONE)], 0.3)
    assert timing.merged_chunks == 1 and timing.itl_ms == pytest.approx((200, 0))
    spread = request_timing(0.0, [(0.1, chunks[0]), (0.2, chunks[1]), (0.3, chunks[2]), (0.3, DONE)], 0.3)
    assert spread.merged_chunks == 0


def test_real_streams_read_on_time_have_no_merged_chunks():
    for name in ("stream_spec_off", "stream_ngram"):
        assert request_timing(0.0, timed_events(name), 10.0).merged_chunks == 0


def test_no_token_means_no_ttft_and_no_tpot():
    timing = request_timing(0.0, [(0.1, Chunk(completion_tokens=0)), (0.2, DONE)], 0.2)
    assert timing.ttft_ms is None and timing.tpot_ms is None and timing.output_tokens == 0


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None


def test_a_long_sample_has_the_same_percentiles_as_its_sorted_copy():
    values = [((i * 7919) % 10007) / 7.0 for i in range(20_000)]  # past SORT_MAX, in no order
    ordered = sorted(values)
    for pct in (0, 1, 50, 99, 99.9, 100):
        rank = (len(values) - 1) * pct / 100.0
        lo = int(rank)
        expected = ordered[lo] + (ordered[min(lo + 1, len(values) - 1)] - ordered[lo]) * (rank - lo)
        assert percentile(values, pct) == expected
