"""Request rows: contract column order, one row per request, buffered writes, histograms only for ok."""

from __future__ import annotations

import csv
import json
from dataclasses import astuple

from locust_spec.client.sse import EventSplitter, parse_payload
from locust_spec.client.timing import request_timing
from locust_spec.core.runfiles import ADDED_COLUMNS, row_values
from locust_spec.recording.records import COLUMNS, FileSink, RowWriter, make_row
from tests.replay import load_capture

CONTRACT = ("start_unix_s, level_users, prompt_class, prompt_id, prompt_tokens, output_tokens, "
            "tokens_estimated, chunks, max_tokens_per_chunk, ttft_ms, tpot_ms, e2e_ms, itl_p50_ms, "
            "itl_p99_ms, chunk_gap_p50_ms, finish_reason, spec_accepted_tokens, spec_draft_tokens, error")


def capture_timing():
    splitter, events = EventSplitter(), []
    for t, data in load_capture("stream_ngram").reads:
        events += [(t, parse_payload(p)) for p in splitter.feed(data)]
    return request_timing(0.0, events, events[-1][0])


def test_columns_are_the_contract_in_order_plus_the_added_ones():
    assert (*CONTRACT.split(", "), *ADDED_COLUMNS) == COLUMNS


def test_a_rows_values_are_its_fields_in_column_order():
    row = make_row(1.5, 16, "code", "p7", True, capture_timing(), None, level_rate=2.0, arrival=3,
                   intended_unix_s=1.25, lateness_ms=250.0)
    assert row_values(row) == astuple(row)
    assert dict(zip(COLUMNS, row_values(row), strict=True))["lateness_ms"] == 250.0


def test_rows_are_buffered_then_flushed(tmp_path):
    writer = RowWriter(tmp_path / "r.csv", buffer_rows=3)
    for i in range(2):
        writer.add(make_row(1.0 + i, 4, "code", f"p{i}", False, None, "reset: x"))
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 1
    writer.add(make_row(3.0, 4, "code", "p2", False, None, None))
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 4
    writer.close()


def test_file_sink_writes_one_row_per_request_and_histograms_only_for_ok(tmp_path):
    sink = FileSink(str(tmp_path / "out" / "run"))
    timing = capture_timing()
    sink.add(make_row(1.5, 8, "code", "a", False, timing, None), timing)
    sink.add(make_row(2.5, 8, "code", "b", True, timing, None), timing)
    sink.add(make_row(3.5, 8, "chat", "c", False, timing, "reset: connection reset"), timing)
    sink.close()
    rows = list(csv.DictReader((tmp_path / "out" / "run_requests.csv").open()))
    assert [r["prompt_id"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["output_tokens"] == "200" and rows[0]["spec_draft_tokens"] == ""
    assert rows[1]["warmup"] == "1"
    assert rows[2]["error"] == "reset: connection reset"
    assert float(rows[0]["ttft_ms"]) == round(timing.ttft_ms, 3)
    latency = json.loads((tmp_path / "out" / "run_latency.json").read_text())
    assert latency["metrics"]["ttft"]["all"]["count"] == 2
    assert latency["levels"]["8"]["ttft"]["all"]["count"] == 1


def test_text_a_spreadsheet_would_run_as_a_formula_is_written_as_text(tmp_path):
    writer = RowWriter(tmp_path / "r.csv")
    hostile = ("=HYPERLINK(\"http://x\",\"y\")", "+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx")
    for text in hostile:
        writer.add(make_row(1.5, 4, text, text, False, None, text))
    writer.add(make_row(-1.5, 4, "code", "p-1", False, None, "http_500: =not at the start"))
    writer.close()
    with (tmp_path / "r.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row, text in zip(rows, hostile, strict=False):
        assert row["prompt_class"] == row["prompt_id"] == row["error"] == "'" + text
    last = rows[-1]
    assert (last["start_unix_s"], last["prompt_id"], last["error"]) == ("-1.500", "p-1",
                                                                      "http_500: =not at the start")
