"""The private parts of our dependencies that the product relies on, checked directly: when an upgrade moves
one, this fails here with its name, instead of as wrong numbers somewhere else. pyproject.toml bounds these
dependencies below their next major version; raise a bound only after this file passes on the new version."""

from __future__ import annotations

import socket

import numpy as np
import orjson
from geventhttpclient.response import HTTPSocketResponse
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from locust_spec.recording.histograms import new_histogram
from locust_spec.sim.metrics import _observe_many

CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"7\r\ndata: a")


def test_geventhttpclient_dechunks_fed_bytes_into_the_response_body_buffer():
    # transport.Connection.stream reads the body from `_body_buffer` as `feed` fills it, one read at a time
    a, b = socket.socketpair()
    try:
        response = HTTPSocketResponse(a, block_size=65536, method="POST", pre_buffered=CHUNKED)
        assert response.status_code == 200
        assert bytes(response._body_buffer) == b"data: a"
        response.feed(b"\r\n9\r\ndata: bc\n\r\n0\r\n\r\n")
        assert bytes(response._body_buffer) == b"data: adata: bc\n"
        assert response.message_complete
    finally:
        a.close()
        b.close()


def test_prometheus_histogram_children_keep_bucket_counters_bounds_and_sum():
    # spec-sim observes one value n times in one call through the child's bucket list
    by_loop, at_once = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("gap_seconds", "", ["engine"], buckets=(0.01, 0.1, 1.0), registry=by_loop)
    h2 = Histogram("gap_seconds", "", ["engine"], buckets=(0.01, 0.1, 1.0), registry=at_once)
    for _ in range(7):
        h1.labels("0").observe(0.0625)
    _observe_many(h2.labels("0"), 0.0625, 7)
    def values(registry: CollectorRegistry) -> list[bytes]:
        return [line for line in generate_latest(registry).splitlines() if b"_created" not in line]

    assert values(by_loop) == values(at_once)


def test_locust_web_ui_renders_extended_tabs_from_template_args(monkeypatch):
    # webui.install adds the Speculation tabs through WebUI.template_args, read by Locust's index page
    from locust import User, constant, task
    from locust.argument_parser import parse_options
    from locust.env import Environment

    class Idle(User):
        wait_time = constant(1)

        @task
        def idle(self) -> None:
            pass

    monkeypatch.setattr("sys.argv", ["locust"])  # the web UI parses the command line for its form
    env = Environment(user_classes=[Idle], parsed_options=parse_options(args=[]))
    env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0)
    try:
        web_ui.template_args.update({"extended_tabs": [{"title": "Speculation", "key": "spec"}]})
        page = web_ui.app.test_client().get("/").get_data(as_text=True)
        args = orjson.loads(page.split("window.templateArgs = ", 1)[1].split("</script>", 1)[0])
        assert args["extended_tabs"] == [{"title": "Speculation", "key": "spec"}]
    finally:
        env.runner.quit()


def test_hdrhistogram_counts_are_a_flat_uint64_buffer_indexed_by_its_sub_bucket_fields():
    # histograms.record_many computes the counts index itself and adds into the counts buffer in place
    hist = new_histogram()
    counts = np.frombuffer(hist.counts, dtype=np.uint64)
    assert counts.size == hist.counts_len
    hist.record_value(12_345)
    index = hist._counts_index_for(12_345)
    v, mask, half_mag = 12_345, hist.sub_bucket_mask, hist.sub_bucket_half_count_magnitude
    bucket = (v | mask).bit_length() - half_mag - 1
    assert index == ((bucket + 1) << half_mag) + (v >> bucket) - hist.sub_bucket_half_count
    assert counts[index] == 1  # the view sees the library's own write
    counts[index] += 1
    assert hist.get_count_at_index(index) == 2 and hist.min_value == hist.max_value == 12_345


def test_locust_request_stats_log_into_the_total_and_the_entry_of_name_and_method():
    # plugin.count_each_request_once logs a timing into `entries[(name, method)]` alone, leaving `total`
    from locust.stats import RequestStats

    stats = RequestStats()
    stats.log_request("E2E", "chat", 120, 32)
    assert stats.total.num_requests == 1 and stats.entries[("chat", "E2E")].num_requests == 1
    assert stats.entries[("chat", "E2E")].total_content_length == 32


def test_the_timings_keep_their_rows_but_the_aggregated_row_counts_each_request_once():
    from locust.stats import RequestStats

    from locust_spec.plugin import count_each_request_once

    stats = RequestStats()
    count_each_request_once(stats)
    for _ in range(3):
        for kind, ms in (("TTFT", 20), ("TPOT", 3), ("E2E", 120)):
            stats.log_request(kind, "chat", ms, 32 if kind == "E2E" else 0)
    stats.log_request("Interrupted", "chat", 50, 0)
    assert {method: e.num_requests for (_, method), e in stats.entries.items()} == \
        {"TTFT": 3, "TPOT": 3, "E2E": 3, "Interrupted": 1}
    assert stats.total.num_requests == 4 and stats.total.max_response_time == 120
