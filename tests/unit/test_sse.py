"""SSE framing and chunk parsing, checked against real vLLM 0.32 captures."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from locust_spec.sse import DONE, Chunk, EventSplitter, Malformed, parse_lines, parse_payload
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
