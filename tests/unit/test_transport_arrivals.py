"""A stream's reads become lines stamped with the read that completed them (split after the end)."""

from __future__ import annotations

from locust_spec.transport import timed_lines


def test_each_line_takes_the_time_of_the_read_that_completed_it():
    body = b"data: a\n\ndata: b\n\ndata: [DONE]\n\n"
    marks = [(1.0, 4), (2.0, 12), (3.0, len(body))]
    assert timed_lines(body, marks) == [
        (2.0, b"data: a\n"), (2.0, b"\n"), (3.0, b"data: b\n"), (3.0, b"\n"), (3.0, b"data: [DONE]\n"),
        (3.0, b"\n"),
    ]


def test_an_unterminated_tail_keeps_the_last_read_time():
    assert timed_lines(bytearray(b"data: a\ndata: b"), [(1.0, 8), (2.0, 15)]) == [
        (1.0, b"data: a\n"), (2.0, b"data: b")]


def test_nothing_read_gives_no_lines():
    assert timed_lines(b"", []) == []
