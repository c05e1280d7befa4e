"""The processor without a Locust process: real captured vLLM streams in, Locust request events (a real
EventHook), request rows and histograms (a real FileSink) out."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from locust.event import Events

from locust_spec.client.client import Capture
from locust_spec.client.transport import Arrivals
from locust_spec.recording.budget import ClientBudget
from locust_spec.recording.processor import E2E, INTERRUPTED, TPOT, TTFT, Processor, StreamError, held_bytes
from locust_spec.recording.records import FileSink
from tests.replay import load_capture

START = 100.0


def wire(name: str = "stream_ngram", drop_done: bool = False) -> tuple[Arrivals, float]:
    """A captured stream as the fast reader leaves it: the body and a mark per read; and its last read."""
    arrivals = Arrivals()
    t = START
    for offset, data in load_capture(name).reads:
        if drop_done and b"[DONE]" in data:
            continue
        t = START + offset
        arrivals.body += data
        arrivals.mark(t)
    return arrivals, t


def capture(prompt_id: str, **kw) -> Capture:
    return Capture("code", prompt_id, 4, False, start_unix=1_700_000_000.0, **kw)


@pytest.fixture
def pipeline(tmp_path):
    events = Events()
    fired: list[dict] = []
    events.request.add_listener(lambda **kw: fired.append(kw))
    sink = FileSink(str(tmp_path / "run"))
    processor = Processor(events.request.fire, lambda: sink)
    yield processor, sink, fired, tmp_path / "run"
    sink.close()


def rows(prefix) -> list[dict]:
    with open(f"{prefix}_requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_finished_stream_is_one_row_and_three_locust_events(pipeline):
    processor, sink, fired, prefix = pipeline
    arrivals, last = wire()
    processor.process(capture("a", start=START, end=last + 0.001, wire=arrivals))
    sink.flush()
    [row] = rows(prefix)
    assert (row["prompt_class"], row["prompt_id"], row["level_users"], row["error"]) == ("code", "a", "4", "")
    assert row["output_tokens"] == "200" and row["finish_reason"]
    assert [e["request_type"] for e in fired] == [TTFT, TPOT, E2E]
    assert all(e["exception"] is None and e["name"] == "code" for e in fired)
    assert fired[0]["response_time"] == pytest.approx(float(row["ttft_ms"]), abs=0.001)
    assert fired[2]["response_length"] == 200
    assert (processor.requests, processor.failures) == (1, 0)
    latency = json.loads(Path(f"{prefix}_latency.json").read_text())
    assert latency["metrics"]["ttft"]["code"]["count"] == 1


def test_a_request_that_never_went_out_is_a_row_and_a_failure(pipeline):
    processor, sink, fired, prefix = pipeline
    processor.process(capture("b", error="connect: Connection refused"))
    sink.flush()
    [row] = rows(prefix)
    assert row["error"] == "connect: Connection refused" and row["ttft_ms"] == "" and row["e2e_ms"] == ""
    [event] = fired
    assert event["request_type"] == E2E and event["response_time"] == 0.0
    assert isinstance(event["exception"], StreamError) and str(event["exception"]) == row["error"]
    assert (processor.requests, processor.failures) == (1, 1)


def test_a_stream_cut_before_done_keeps_what_it_measured_and_says_why(pipeline):
    processor, sink, fired, prefix = pipeline
    arrivals, last = wire(drop_done=True)
    processor.process(capture("c", start=START, end=last, wire=arrivals))
    sink.flush()
    [row] = rows(prefix)
    assert row["error"].startswith("no_done:") and row["output_tokens"] == "200" and row["ttft_ms"]
    assert [e["request_type"] for e in fired] == [E2E] and fired[0]["exception"] is not None


def test_queued_streams_are_all_reported_in_order_at_stop(pipeline):
    processor, sink, fired, prefix = pipeline
    processor.start()
    for i in range(5):
        arrivals, last = wire()
        processor.submit(capture(str(i), start=START, end=last, wire=arrivals))
    processor.stop()
    sink.flush()
    assert [r["prompt_id"] for r in rows(prefix)] == ["0", "1", "2", "3", "4"]
    assert processor.backlog == 0 and processor.requests == 5
    assert sum(e["request_type"] == E2E for e in fired) == 5


def test_without_a_sink_requests_are_still_reported_to_locust():
    events, fired = Events(), []
    events.request.add_listener(lambda **kw: fired.append(kw))
    processor = Processor(events.request.fire, lambda: None)
    arrivals, last = wire()
    processor.process(capture("d", start=START, end=last, wire=arrivals))
    assert [e["request_type"] for e in fired] == [TTFT, TPOT, E2E]


def test_the_reply_is_the_streamed_text():
    arrivals, last = wire()
    text = capture("e", start=START, end=last, wire=arrivals).reply()
    assert len(text) > 100 and "data:" not in text


def test_a_request_cut_off_by_the_end_of_the_run_is_a_row_counted_apart_not_a_failure(pipeline):
    processor, sink, fired, prefix = pipeline
    arrivals, last = wire(drop_done=True)
    processor.process(capture("f", start=START, end=last, wire=arrivals, error="interrupted: test stopped"))
    sink.flush()
    [row] = rows(prefix)
    assert row["error"] == "interrupted: test stopped" and row["output_tokens"] == "200"
    [event] = fired
    assert (event["request_type"], event["exception"]) == (INTERRUPTED, None)
    assert event["response_time"] == pytest.approx((last - START) * 1000.0)


def test_the_backlog_is_bounded_in_bytes_and_says_so_when_full(pipeline, monkeypatch, caplog):
    processor, sink, fired, prefix = pipeline
    arrivals, last = wire()
    one = held_bytes(capture("x", start=START, end=last, wire=arrivals))
    monkeypatch.setattr("locust_spec.recording.processor.BACKLOG_BYTES", 2 * one)
    for i in range(4):
        arrivals, last = wire()
        processor.submit(capture(str(i), start=START, end=last, wire=arrivals))
    # the first two wait for the processor; the others, past the bound, were processed as they ended
    assert processor.backlog == 2 and processor.backlog_full == 2
    assert [e["request_type"] for e in fired].count(E2E) == 2
    assert sum("overloaded" in r.message for r in caplog.records) == 1
    processor.stop()
    sink.flush()
    assert sorted(r["prompt_id"] for r in rows(prefix)) == ["0", "1", "2", "3"]
    assert processor.backlog == 0


class FullDiskSink:
    """A sink whose every write fails as a full disk does (a FileSink says so itself and stops the run)."""

    flush_interval_s = 1.0

    def add(self, row, timing) -> None:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_sink_that_raises_stops_neither_the_processor_nor_locusts_count(caplog):
    events, fired = Events(), []
    events.request.add_listener(lambda **kw: fired.append(kw))
    processor = Processor(events.request.fire, FullDiskSink)
    processor.start()
    for i in range(3):
        arrivals, last = wire()
        processor.submit(capture(str(i), start=START, end=last, wire=arrivals))
    processor.stop()
    # before: the processor greenlet died at the first error; nothing after it reached Locust
    assert [e["request_type"] for e in fired].count(E2E) == 3
    assert (processor.requests, processor.unrecorded) == (3, 3)
    assert sum("could not be recorded" in r.message for r in caplog.records) == 1


def test_the_time_a_request_was_held_back_goes_to_its_levels_budget(tmp_path):
    budget = ClientBudget()
    processor = Processor(Events().request.fire, lambda: None, budget=budget)
    arrivals, last = wire()
    processor.process(capture("a", start=START, end=last, wire=arrivals, held_s=1.5))
    processor.process(capture("b", start=START, end=last, wire=wire()[0]))
    assert budget.summary()["4"]["holds"] == 1 and budget.summary()["4"]["held_s"] == 1.5
