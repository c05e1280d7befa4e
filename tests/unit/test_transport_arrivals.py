"""A stream's reads become events stamped with the read that completed them (split after the end)."""

from __future__ import annotations

from locust_spec.client.sse import DONE, Chunk, timed_events

A = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
B = b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'


def test_each_event_takes_the_time_of_the_read_that_completed_its_data_line():
    body = A + B + b"data: [DONE]\n\n"
    ends = [4, len(A) + 3, len(A) + len(B), len(body)]
    events = timed_events(body, [1.0, 2.0, 3.0, 4.0], ends)
    assert [t for t, _ in events] == [2.0, 3.0, 4.0]
    assert events[0][1] == Chunk(text_chars=1, text="a") and events[-1][1] is DONE


def test_an_unterminated_tail_keeps_the_last_read_time():
    events = timed_events(bytearray(A + b"data: [DONE]"), [1.0, 2.0], [len(A), len(A) + 12])
    assert events == [(1.0, Chunk(text_chars=1, text="a")), (2.0, DONE)]


def test_nothing_read_gives_no_events():
    assert timed_events(b"", [], []) == []
