"""The debug trace puts each token chunk's arrival on the wall clock, by the server's response id."""

from __future__ import annotations

from locust_spec.client.sse import parse_lines
from locust_spec.client.timing import request_timing
from locust_spec.recording.trace import response_id, trace_rows

ROLE = b'data: {"id":"chatcmpl-7","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n'
TOKEN = b'data: {"id":"chatcmpl-7","choices":[{"index":0,"delta":{"content":"a"}}]}\n'


def test_chunk_times_are_the_arrival_times_moved_onto_the_wall_clock():
    lines = [(10.001, ROLE), (10.001, b"\n"), (10.002, TOKEN), (10.002, b"\n"), (10.0125, TOKEN),
             (10.0125, b"\n"), (10.013, b"data: [DONE]\n")]
    timing = request_timing(10.0, parse_lines(lines), 10.014)
    rows = trace_rows(response_id(b"".join(line for _, line in lines), None), 1_700_000_000.0, 10.0, timing)
    assert rows[0] == "chatcmpl-7,start,1700000000000000000\n"
    times = [int(r.split(",")[2]) for r in rows[1:]]
    assert [r.split(",")[1] for r in rows[1:]] == ["chunk", "chunk"]
    assert abs(times[0] - 1_700_000_000_002_000_000) < 1000
    assert abs(times[1] - 1_700_000_000_012_500_000) < 1000


def test_a_stream_without_a_token_traces_only_its_start():
    lines = [(10.001, ROLE), (10.001, b"\n"), (10.002, b"data: [DONE]\n")]
    timing = request_timing(10.0, parse_lines(lines), 10.003)
    assert trace_rows("x", 5.0, 10.0, timing) == ["x,start,5000000000\n"]


def test_response_id_is_empty_when_no_chunk_carries_one():
    assert response_id(b"data: [DONE]\n", None) == ""
    assert response_id(b"data: {not json\n", None) == ""


def test_an_id_that_is_not_plain_ascii_text_is_left_out():
    assert response_id(b'data: {"id":"chatcmpl-\xc3\xa9"}\n', None) == ""
    assert response_id(b'data: {"id":"a,b"}\n', None) == ""
    assert response_id(b'data: {"id":5}\n', None) == ""
