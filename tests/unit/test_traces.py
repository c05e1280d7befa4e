"""Public serving traces read as they are (core/traces.py): each format detected from the file, times in
seconds from the first row, a window and a speedup, and one line naming the line for a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from locust_spec.core import traces
from locust_spec.core.traces import (
    AZURE,
    BURSTGPT,
    MOONCAKE,
    TraceError,
    Window,
    parse_speedup,
    parse_window,
    read_trace,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def offsets(trace) -> list[float]:
    return [round(r.offset_s, 6) for r in trace.rows]


def test_mooncake_integer_timestamps_are_milliseconds_and_hash_ids_are_kept():
    trace = read_trace(DATA / "mooncake.jsonl")
    assert trace.format == MOONCAKE
    assert offsets(trace) == [0.0, 0.25, 1.0, 3.0]
    assert [(r.input_tokens, r.output_tokens) for r in trace.rows] == [(1500, 20), (1100, 35), (600, 12),
                                                                       (2048, 64)]
    assert trace.rows[3].hash_ids == (0, 1, 2, 6)
    assert [r.index for r in trace.rows] == [0, 1, 2, 3]


def test_bailian_decimal_timestamps_are_seconds_from_the_first_row():
    trace = read_trace(DATA / "bailian.jsonl")
    assert trace.format == MOONCAKE
    assert offsets(trace) == [0.0, 0.5, 2.75]
    assert trace.rows[1].hash_ids == (10, 11)


def test_azure_csv_datetimes_become_seconds():
    trace = read_trace(DATA / "azure.csv")
    assert trace.format == AZURE
    assert offsets(trace) == [0.0, 4.314579, 4.31941, 20.0]
    assert [(r.input_tokens, r.output_tokens) for r in trace.rows][:2] == [(374, 44), (396, 109)]
    assert all(r.hash_ids == () for r in trace.rows)


def test_burstgpt_skips_rows_without_a_response_and_keeps_the_file_row_index():
    trace = read_trace(DATA / "burstgpt.csv")
    assert trace.format == BURSTGPT
    assert trace.skipped == 1
    assert [r.index for r in trace.rows] == [0, 2, 3]
    assert offsets(trace) == [0.0, 113.0, 113.0]
    assert trace.rows[1].input_tokens == 417 and trace.rows[1].output_tokens == 276


def test_speedup_divides_the_offsets_and_the_window_crops_the_trace_seconds():
    assert offsets(read_trace(DATA / "mooncake.jsonl", speedup=2)) == [0.0, 0.125, 0.5, 1.5]
    cropped = read_trace(DATA / "mooncake.jsonl", window=parse_window("0.2:1.5"), speedup=2)
    assert [r.index for r in cropped.rows] == [1, 2]
    assert offsets(cropped) == [0.025, 0.4]  # from the window's start, then twice as fast
    assert offsets(read_trace(DATA / "mooncake.jsonl", window=parse_window("1:"))) == [0.0, 2.0]


def test_format_can_be_forced_and_a_forced_format_must_fit():
    assert read_trace(DATA / "bailian.jsonl", fmt=MOONCAKE).format == MOONCAKE
    with pytest.raises(TraceError, match=r"line 1: the azure header lacks TIMESTAMP"):
        read_trace(DATA / "burstgpt.csv", fmt=AZURE)


@pytest.mark.parametrize("text, message", [
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\nnot json\n', r"line 2: not a JSON object"),
    ('{"timestamp": 0, "input_length": -5, "output_length": 2}\n', r"line 1: input_length must be a whole"),
    ('{"timestamp": 0, "input_length": true, "output_length": 2}\n', r"line 1: input_length is not a finite"),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 2}\n', r"line 1: timestamp is not a finite"),
    ('{"timestamp": 0, "input_length": 5}\n', r"line 1: no output_length"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": "ab"}\n', r"line 1: hash_ids"),
    ('{"timestamp": 9, "input_length": 5, "output_length": 2}\n'
     '{"timestamp": 3, "input_length": 5, "output_length": 2}\n', r"line 2: its time 3 is before"),
    ('[1, 2]\n', r"line 1: not a trace this reads"),
    ('time,tokens\n1,2\n', r"line 1: not a trace this reads"),
    ('TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,5\n', r"line 2: TIMESTAMP is not a date"),
    ('Timestamp,Request tokens,Response tokens\n1,2\n', r"line 2: 2 columns, the header has 3"),
    ('Timestamp,Request tokens,Response tokens\n1,2,1e12\n', r"line 2: Response tokens must be a whole"),
    ('\n\n', r"empty trace"),
])
def test_a_bad_trace_is_one_line_naming_its_line(tmp_path, text, message):
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=message) as raised:
        read_trace(path)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


def test_a_huge_line_or_too_many_rows_is_refused_without_reading_on(tmp_path, monkeypatch):
    path = tmp_path / "huge.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2, "pad": "'
                    + "x" * traces.MAX_LINE_CHARS + '"}\n')
    with pytest.raises(TraceError, match=r"line 1: longer than"):
        read_trace(path)
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"timestamp": i, "input_length": 5, "output_length": i % 2}) + "\n"
                            for i in range(5)))  # rows without output, skipped, count as read
    with pytest.raises(TraceError, match=r"more than 3 rows"):
        read_trace(many, max_rows=3)
    with pytest.raises(TraceError, match=r"no row to replay in the window"):
        read_trace(many, window=Window(10.0))
    assert read_trace(many, max_rows=5).skipped == 3


@pytest.mark.parametrize("text", ["", "5", "3:1", "-1:4", "a:b", "1:1"])
def test_a_window_is_start_before_end_in_seconds(text):
    with pytest.raises(ValueError, match="trace window"):
        parse_window(text)


@pytest.mark.parametrize("text", ["0", "-2", "inf", "fast"])
def test_a_speedup_is_a_positive_number(text):
    with pytest.raises(ValueError, match="speedup"):
        parse_speedup(text)
