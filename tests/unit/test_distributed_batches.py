"""Worker -> master batches: bounded, complete, merged into exactly the histograms one process would have."""

from __future__ import annotations

import csv
import json
import types
from dataclasses import astuple

import msgpack

from locust_spec.client.timing import RequestTiming
from locust_spec.recording.histograms import LatencyHistograms
from locust_spec.recording.records import COLUMNS, FileSink, make_row
from locust_spec.wiring.distributed import LOST_EXIT_CODE, VERSION, Collector, WorkerSink, WorkerWatch


def timing(i: int) -> RequestTiming:
    """A finished stream with distinct values per request (chunk gaps, ITL and TPOT from `i`)."""
    itl = tuple(1.0 + (i * 7 + k) % 13 * 0.37 for k in range(20))
    return RequestTiming(
        ttft_ms=20.0 + i * 1.013, output_tokens=21, prompt_tokens=50, chunks=21, max_tokens_per_chunk=1,
        tokens_estimated=False, itl_ms=itl, chunk_gaps_ms=itl, tpot_ms=sum(itl) / len(itl),
        e2e_ms=20.0 + i * 1.013 + sum(itl), itl_p50_ms=sorted(itl)[10], itl_p99_ms=max(itl),
        chunk_gap_p50_ms=sorted(itl)[10], finish_reason="length", spec_accepted_tokens=None,
        spec_draft_tokens=None, done=True, error=None)


def requests(n: int, offset: int = 0):
    for i in range(offset, offset + n):
        t = timing(i)
        error = "interrupted: test stopped" if i % 17 == 0 else None
        yield make_row(1000.0 + i, 8, "code" if i % 2 else "json", f"p{i}", False, t, error), t


def wire(batch: dict) -> dict:
    """What the master receives: Locust sends custom messages as msgpack."""
    return msgpack.unpackb(msgpack.packb(batch), raw=False)


def test_worker_batches_are_bounded_and_the_master_gets_every_row_and_exact_histograms(tmp_path):
    sent: list[dict] = []
    sinks = [WorkerSink(lambda b: sent.append(wire(b)), dict, max_rows=40) for _ in range(2)]
    single = LatencyHistograms()
    for w, (offset, n) in enumerate(((0, 130), (500, 95))):
        for k, (row, t) in enumerate(requests(n, offset)):
            sinks[w].add(row, t)
            if not row.error:
                single.record_timing(t, row.prompt_class, row.level_users, False)
            if k % 50 == 0:
                sinks[w].flush()
        sinks[w].flush(final=True)
    assert max(len(b["rows"]) for b in sent) <= 40
    assert all(b["v"] == VERSION for b in sent)

    master = FileSink(str(tmp_path / "run"))
    collector = Collector()
    for i, batch in enumerate(sent):
        collector.receive(f"w{i % 2}", batch, master)
    master.close()
    rows = list(csv.DictReader((tmp_path / "run_requests.csv").open()))
    assert len(rows) == 130 + 95 == collector.rows_received
    assert {r["prompt_id"] for r in rows} == {f"p{i}" for i in [*range(130), *range(500, 595)]}
    assert json.loads((tmp_path / "run_latency.json").read_text()) == json.loads(json.dumps(single.to_dict()))


def test_final_batch_is_sent_even_when_empty_and_marks_the_worker_finished(tmp_path):
    sent: list[dict] = []
    sink = WorkerSink(lambda b: sent.append(wire(b)), lambda: {"requests": 7, "max_loop_lag_ms": 1.5})
    sink.flush()
    assert sent == []  # nothing to say
    sink.flush(final=True)
    assert sent[-1]["final"] is True and sent[-1]["rows"] == [] and sent[-1]["client"]["requests"] == 7
    collector = Collector()
    collector.receive("w1", sent[-1], FileSink(str(tmp_path / "run")))
    assert collector.finished == {"w1"}
    assert collector.clients == {"w1": {"requests": 7, "max_loop_lag_ms": 1.5}}
    assert collector.warnings() == []


def test_rows_that_could_not_be_sent_are_counted_and_reported_by_the_master(tmp_path):
    sent: list[dict] = []
    failing = True

    def send(batch: dict) -> None:
        if failing:
            raise ConnectionError("master gone")
        sent.append(wire(batch))

    sink = WorkerSink(send, lambda: {"requests": 3})
    for row, t in requests(3, 1):
        sink.add(row, t)
    sink.flush()
    failing = False
    sink.flush(final=True)
    collector = Collector()
    collector.receive("w1", sent[-1], None)
    assert collector.warnings() == [
        "worker w1: 3 request rows could not be sent to the master and are missing"]


def test_a_batch_from_another_plugin_version_is_refused_with_one_line(tmp_path, caplog):
    collector = Collector()
    sink = FileSink(str(tmp_path / "run"))
    collector.receive("w1", {"v": 99, "rows": [], "hist": {}}, sink)
    collector.receive("w2", {"v": VERSION, "rows": [[1.0, 8]], "hist": {}, "final": True}, sink)
    assert collector.rejected == 2 and collector.rows_received == 0 and collector.finished == set()
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"]
    assert "batch version 99" in caplog.records[0].getMessage()
    assert f"2 cells, expected {len(COLUMNS)}" in caplog.records[1].getMessage()


def test_a_worker_heard_during_the_test_that_never_finished_is_lost_with_the_rows_locust_counted():
    environment = types.SimpleNamespace(process_exit_code=None)  # what the watch sets on Locust's
    collector, watch = Collector(), WorkerWatch(level=lambda: 8)
    collector.start_test()
    watch.start_test()
    watch.heard_from("w1")
    watch.heard_from("w2")
    # Locust's stats reports: each request is one E2E or Interrupted entry (TTFT/TPOT are not requests)
    watch.report("w1", {"stats": [{"method": "E2E", "num_requests": 5}, {"method": "TTFT", "num_requests": 5},
                                  {"method": "Interrupted", "num_requests": 1}]})
    rows = [list(astuple(row)) for row, _ in requests(4, 1)]
    collector.receive("w1", {"v": VERSION, "rows": rows, "hist": {}, "client": {"requests": 4}}, None)
    collector.receive("w2", {"v": VERSION, "rows": [], "hist": {}, "client": {}, "final": True}, None)
    watch.test_stopped(environment, collector)
    [lost] = watch.found(collector)
    assert (lost.worker, lost.level_users, lost.rows_received, lost.requests_reported) == ("w1", 8, 4, 6)
    assert lost.rows_lost == 2 and lost.last_seen_unix_s <= lost.detected_unix_s
    assert environment.process_exit_code == LOST_EXIT_CODE
    assert "worker w1 lost mid-run" in lost.warning() and "2 requests Locust counted" in lost.warning()
