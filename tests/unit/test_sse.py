"""SSE framing and chunk parsing, checked against real vLLM 0.32 captures."""

from __future__ import annotations

import json
from array import array

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from locust_spec.client.sse import (
    DONE,
    MAX_TOKEN_COUNT,
    Chunk,
    EventSplitter,
    Malformed,
    completed,
    parse_lines,
    parse_object,
    parse_payload,
    plain_events,
    timed_event_slices,
)
from tests.replay import CAPTURES, load_capture


def events_of(name: str) -> list:
    splitter = EventSplitter()
    return [parse_payload(p) for p in splitter.feed((CAPTURES / f"{name}.sse").read_bytes())]


def test_role_chunk_carries_no_token_and_usage_is_cumulative():
    events = events_of("stream_spec_off")
    first = events[0]
    assert isinstance(first, Chunk)
    assert first.completion_tokens == 0 and first.text_chars == 0 and first.prompt_tokens is not None
    counts = [e.completion_tokens for e in events if isinstance(e, Chunk)]
    assert counts == sorted(counts)
    assert events[-1] is DONE


def test_final_usage_chunk_has_no_choices_and_finish_reason_comes_before_it():
    events = [e for e in events_of("stream_ngram") if isinstance(e, Chunk)]
    assert events[-1].has_choices is False and events[-1].completion_tokens == 200
    assert events[-2].finish_reason == "length"


def test_per_request_spec_decode_metrics_are_read_from_the_final_chunk():
    events = [e for e in events_of("stream_ngram_per_request_metrics") if isinstance(e, Chunk)]
    assert (events[-1].spec_accepted_tokens, events[-1].spec_draft_tokens) == (22, 28)
    assert all(e.completion_tokens is None for e in events[:-1])


@given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=60))
def test_splitting_bytes_anywhere_gives_the_same_events(cuts):
    data = (CAPTURES / "stream_ngram.sse").read_bytes()
    whole = EventSplitter().feed(data)
    splitter, out, pos = EventSplitter(), [], 0
    for cut in cuts:
        out += splitter.feed(data[pos : pos + cut])
        pos += cut
    out += splitter.feed(data[pos:])
    assert out == whole


def test_multi_line_data_is_joined_and_comments_and_crlf_are_ignored():
    splitter = EventSplitter()
    got = splitter.feed(b': keep-alive\r\n\r\nevent: x\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
                        b"data: [DONE]\r\n\r\n")
    assert got == [b'{"a":\n1}', b"[DONE]"]


def test_unterminated_last_event_is_returned_as_pending():
    splitter = EventSplitter()
    assert splitter.feed(b"data: [DONE]") == []
    assert splitter.pending() == b"[DONE]"


def test_malformed_payloads_become_typed_errors_not_exceptions():
    assert isinstance(parse_payload(b"{not json"), Malformed)
    assert isinstance(parse_payload(b"[1, 2]"), Malformed)
    assert isinstance(parse_payload(b'{"object": "chat.completion.chunk"}'), Malformed)
    assert "not JSON" in parse_payload(b"\xff\xfe").reason


def test_server_error_object_is_a_chunk_with_error():
    event = parse_payload(orjson.dumps({"error": {"message": "out of memory", "code": 500}}))
    assert isinstance(event, Chunk) and event.error == "out of memory" and not event.has_choices


def test_reasoning_text_counts_as_text():
    event = parse_payload(b'{"choices":[{"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}')
    assert event.text_chars == 3 and event.completion_tokens is None


def test_each_event_is_stamped_with_its_data_line_arrival():
    lines = [(1.0, b"data: [DONE]\n"), (2.0, b"\n")]
    assert parse_lines(lines) == [(1.0, DONE)]


def test_capture_reads_cover_the_bytes():
    capture = load_capture("stream_ngram")
    assert capture.data == (CAPTURES / "stream_ngram.sse").read_bytes()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
FIELDS = ("choices", "delta", "content", "reasoning_content", "reasoning", "tool_calls", "function", "name",
          "arguments", "finish_reason", "usage", "completion_tokens", "prompt_tokens", "metrics",
          "speculative_decoding", "num_accepted_draft_tokens", "num_draft_tokens", "error", "message")


@given(st.recursive(json_values, lambda inner: st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)
                    | st.lists(inner, max_size=3), max_leaves=12))
def test_any_json_value_in_any_field_is_an_event_never_an_exception(obj):
    for event in (parse_payload(json.dumps(obj).encode()), parse_object(obj)):
        assert isinstance(event, (Chunk, Malformed)) or event is DONE
        if isinstance(event, Chunk):
            assert all(v is None or 0 <= v <= MAX_TOKEN_COUNT for v in
                       (event.completion_tokens, event.prompt_tokens, event.spec_draft_tokens))
            assert all(v is None or v.isprintable() for v in (event.finish_reason, event.error))


@given(st.binary(max_size=300))
def test_any_bytes_are_an_event_never_an_exception(data):
    event = parse_payload(data)
    assert isinstance(event, (Chunk, Malformed)) or event is DONE


def test_wrong_types_where_values_are_read_are_malformed_with_the_path():
    for payload, where in ((b'{"choices":[{"delta":"x"}]}', "$.choices[0].delta"),
                           (b'{"choices":[{"delta":{"content":5}}]}', "$.choices[0].delta.content"),
                           (b'{"choices":[],"usage":{"completion_tokens":99999999999999999999999}}',
                            "$.usage.completion_tokens"),
                           (b'{"choices":[{"finish_reason":["stop"]}]}', "$.choices[0].finish_reason")):
        event = parse_payload(payload)
        assert isinstance(event, Malformed) and where in event.reason, (payload, event)


def test_a_finish_reason_or_error_with_control_characters_becomes_one_printable_line():
    event = parse_payload(b'{"choices":[{"finish_reason":"stop\\n\\u0000=1"}]}')
    assert event.finish_reason == "stop  =1"
    assert isinstance(parse_payload(b'{"choices":[{"finish_reason":"\\ud800"}]}'), Malformed)
    assert parse_payload(b'{"error":{"message":"a\\r\\nb"}}').error == "a  b"


def test_splitting_a_body_without_newlines_stays_one_partial_line():
    splitter = EventSplitter()
    for _ in range(1000):
        assert splitter.feed(b"x" * 100) == []
    assert splitter.pending() is None  # a line that is not `data:` carries nothing


def _general(body: bytes, times: list[float], ends: list[int]) -> list:
    return completed(timed_event_slices(body, times, ends, 1))  # a slice per read: never the plain path


@pytest.mark.parametrize("name", ["stream_spec_off", "stream_ngram", "stream_ngram_per_request_metrics"])
def test_a_real_stream_reads_the_same_on_the_plain_path_as_on_the_general_one(name):
    data = (CAPTURES / f"{name}.sse").read_bytes()
    timing = CAPTURES / f"{name}.sse.timing.json"
    reads = json.loads(timing.read_text())["reads"] if timing.exists() else [[0.5, len(data)]]
    times, ends, end = [], [], 0
    for t, size in reads:
        end += size
        times.append(float(t))
        ends.append(end)
    plain = plain_events(data, times, ends)
    assert plain is not None and plain == _general(data, times, ends)


_TOKEN = b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}'


@given(st.lists(st.sampled_from([_TOKEN, _TOKEN, b"data: [DONE]", b"data: {}", b"data: 7", b"data:",
                                 b"data: ", b": keep", b'data:{"choices":[]}', b"event: x", b"data: [1,2]",
                                 b"data:  {}", b'data: {"choices":[{}]}\r', b'data: {"choices":[{}',
                                 b"data: ]}", b"data: a\ndata: b"]), max_size=12),
       st.lists(st.integers(min_value=1, max_value=90), min_size=1, max_size=6), st.booleans())
def test_any_body_reads_the_same_on_the_plain_path_or_is_left_to_the_general_one(events, sizes, per_event):
    body = b"".join(event + b"\n\n" for event in events)
    if per_event:  # one read per event (what a server's steps give): the plain path's shortcut
        sizes = [len(event) + 2 for event in events] or [1]
    times, ends, end = [], array("q"), 0  # the reader's own array type, as Arrivals keeps them
    for i, size in enumerate(sizes * (len(body) // sum(sizes) + 1)):
        if end >= len(body):
            break
        end = min(end + size, len(body))
        times.append(float(i))
        ends.append(end)
    plain = plain_events(body, times, ends)
    assert plain is None or plain == _general(body, times, list(ends))
