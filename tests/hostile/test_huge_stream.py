"""A huge answer within the limits (50,000 tiny chunks here; a million, 48 MB, in the field) is processed
in slices: the event loop keeps turning while it is parsed and timed, and when the backlog is full the
warning says what is really queued. The fast client reads it from loopback; the run's processor takes it.

Before: the processor parsed and timed a stream in one go (a million chunks held the loop for 7.5 s; the
readers' stamps waited), and a stream over the backlog on its own was reported as "0 finished streams
(0 MiB) wait"."""

from __future__ import annotations

import logging

import gevent
import pytest
from locust.event import Events

from locust_spec.recording.processor import Processor
from tests.hostile.clients import MESSAGES, client
from tests.hostile.server import chunked_head, write_chunk

CHAT = "/v1/chat/completions"
CHUNKS = 50_000


def tiny_chunks(handler) -> None:
    chunked_head(handler)
    event = b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":%d}}\n\n'
    for first in range(1, CHUNKS + 1, 5000):
        write_chunk(handler, b"".join(event % i for i in range(first, min(first + 5000, CHUNKS + 1))))
    write_chunk(handler, b"data: [DONE]\n\n")
    write_chunk(handler, b"")


@pytest.mark.parametrize("backlog", ["queued", "over the backlog"])
def test_a_huge_stream_is_processed_while_the_loop_keeps_turning(hostile, monkeypatch, caplog, backlog):
    if backlog != "queued":
        monkeypatch.setattr("locust_spec.recording.processor.BACKLOG_BYTES", 1 << 20)
    processor = Processor(Events().request.fire, lambda: None)
    processor.start()
    server = hostile({CHAT: tiny_chunks})
    user, kept = client(server.url, submit=processor.submit)
    turns = [0]

    def other_greenlet() -> None:  # a reader waiting for its next chunk, say
        while processor.requests == 0:
            gevent.sleep(0.001)
            turns[0] += kept.captures != []  # counted once the stream is in the processor's hands

    watcher = gevent.spawn(other_greenlet)
    with caplog.at_level(logging.WARNING):
        user.stream(MESSAGES)
        watcher.join(timeout=120)
    processor.stop()
    timing = kept.captures[0].timing()
    assert kept.error() == "" and timing.output_tokens == CHUNKS and processor.requests == 1
    assert turns[0] >= 10  # one slice at a time, the others running in between (before: none)
    warned = [r.getMessage() for r in caplog.records if "overloaded" in r.getMessage()]
    if backlog == "queued":
        assert warned == []
    else:
        assert len(warned) == 1 and "a finished stream of 3.9 MiB would take the streams waiting to be " \
                                   "processed (0, 0.0 MiB) past 1 MiB" in warned[0]
