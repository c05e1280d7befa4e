"""The processor: finished requests (Captures) in, off the readers' hot path; out go Locust request events,
one row each and histograms (through the run's sink), and the debug trace.

A greenlet takes the queue while readers are idle; at stop the rest is drained in one go. Nothing else in
the plugin parses a stream or reports a request.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import gevent
import gevent.event

from locust_spec.client.client import Capture
from locust_spec.client.timing import RequestTiming
from locust_spec.core.runfiles import ErrorKind, error_kind
from locust_spec.recording.budget import ClientBudget
from locust_spec.recording.records import RecordSink, RequestRow, make_row
from locust_spec.recording.trace import ChunkTrace

log = logging.getLogger(__name__)

BACKLOG_BYTES = 32 * 2**20
"""Finished streams waiting for the processor hold at most this much (bodies and per-read marks): past it,
a stream is processed as it ends, in its reader's greenlet, so an overloaded load generator measures less
well (its readers wait) instead of growing (a warning says so)."""
MARK_BYTES = 16  # a read's time and body length, in Arrivals' two flat arrays
SLICE_BYTES = 64 << 10
SLICE_EVENTS = 2048
"""How much of one stream is handled between two pauses: body bytes parsed (~150 vLLM chunks, at most
~1,400 of the smallest), then events timed; a whole stream for all but long ones. A stream of a million
chunks (a 48 MB answer is within the limits) would otherwise hold the event loop for seconds, every reader's
stamps waiting behind it."""

TTFT, TPOT, E2E = "TTFT", "TPOT", "E2E"
"""The Locust request types each request is reported under."""
INTERRUPTED = "Interrupted"
"""A request cut off by the end of the run: counted apart, neither a latency nor a failure (the server may
well have finished it), so a clean run exits 0. Its row says `interrupted`."""


class StreamError(Exception):
    """What Locust shows for a failed request: the row's short error text."""


class Processor:
    """Turns Captures into Locust events (`fire`: an EventHook's fire), rows and histograms (`sink()`:
    the run's current sink, None when rows go nowhere), and trace lines."""

    def __init__(self, fire: Callable[..., None], sink: Callable[[], RecordSink | None],
                 trace: ChunkTrace | None = None, budget: ClientBudget | None = None) -> None:
        self._fire = fire
        self._sink = sink
        self.trace = trace
        self._budget = budget
        self._queue: deque[Capture] = deque()
        self._wake = gevent.event.Event()
        self._worker: gevent.Greenlet | None = None
        self._stopping = False
        self._queued_bytes = 0
        self.backlog_full = 0
        """Streams processed inline because the backlog was full."""
        self.row_listeners: list[Callable[[RequestRow], None]] = []  # e.g. the live page's timeline
        self.requests = 0
        self.failures = 0
        self.unrecorded = 0
        """Rows a sink raised on (none is expected: see `_sink_failed`)."""

    def submit(self, capture: Capture) -> None:
        """Queue a finished request; the processor greenlet handles it when readers are idle."""
        size = held_bytes(capture)
        if self._queued_bytes + size > BACKLOG_BYTES:
            if not self.backlog_full:
                log.warning("locust-spec: a finished stream of %.1f MiB would take the streams waiting to be "
                            "processed (%d, %.1f MiB) past %.0f MiB: this load generator is overloaded; "
                            "such streams are now processed as they end, which delays the readers "
                            "(timestamps late); use more processes or fewer users each",
                            size / 2**20, len(self._queue), self._queued_bytes / 2**20, BACKLOG_BYTES / 2**20)
            self.backlog_full += 1
            self._report(capture, self._timed(capture))
            return
        self._queued_bytes += size
        self._queue.append(capture)
        self._wake.set()

    @property
    def sink(self) -> RecordSink | None:
        """Where rows go now (the run's sink)."""
        return self._sink()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def _next(self) -> Capture:
        capture = self._queue.popleft()
        self._queued_bytes -= held_bytes(capture)
        return capture

    def start(self) -> None:
        if self._worker is None:
            self._stopping = False
            self._worker = gevent.spawn(self._run)

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait()
            self._wake.clear()
            while self._queue and not self._stopping:
                # Slices, each followed by a wait until the event loop is idle: the timing (one slice for
                # all but huge streams), then the report. Readers and senders go first (a reader waits for
                # at most one slice before it stamps its chunk): when all of a server's streams end in one
                # step, their processing waits for the readers instead of making them read two chunks at
                # once (at 256 streams x 10 ms on a CI-class VM, the share of chunks read together with the
                # one before fell from 12-18% to 6%, the ITL p99 from ~30 ms to ~21 against a true ~12).
                # The backlog is bounded (BACKLOG_BYTES): a process never idle processes inline.
                capture = self._next()
                timing = self._timed(capture)
                gevent.idle()
                self._report(capture, timing)
                gevent.idle()

    @staticmethod
    def _timed(capture: Capture) -> RequestTiming | None:
        """The capture's timing, a slice at a time with a pause between slices."""
        steps = capture.timing_slices(SLICE_BYTES, SLICE_EVENTS)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            gevent.idle()

    def stop(self) -> None:
        """Stop the greenlet and drain what waits. This blocks the event loop by design."""
        if self._worker is not None:
            # Never kill the processor mid-request: the one in its hands (between its slices) would be
            # lost. It finishes that one and exits; the drain takes the rest.
            self._stopping = True
            self._wake.set()
            self._worker.join()
            self._worker = None
        while self._queue:
            self.process(self._next())

    def process(self, capture: Capture) -> None:
        """Parse, time, and report one request: Locust events, a row, histograms."""
        self._report(capture, capture.timing())

    def _report(self, capture: Capture, timing: RequestTiming | None) -> None:
        error = capture.error or (timing.error if timing is not None else None)
        row = make_row(capture.start_unix, capture.level_users, capture.name, capture.prompt_id,
                       capture.warmup, timing, error, level_rate=capture.rate, arrival=capture.arrival,
                       intended_unix_s=capture.intended_unix, lateness_ms=capture.lateness_ms)
        sink = self._sink()
        if sink is not None:
            try:
                sink.add(row, timing)
            except Exception:  # noqa: BLE001  (the request still counts in Locust's stats; said once)
                self._sink_failed()
        for listener in self.row_listeners:
            listener(row)
        if self.trace is not None and timing is not None:
            self.trace.write(capture.wire.body if capture.wire is not None else b"", capture.chunks,
                             capture.start_unix, capture.start, timing)
        self.requests += 1
        if self._budget is not None and timing is not None:
            self._budget.add_chunks(capture.level_key, timing.chunks, timing.merged_chunks)
        if self._budget is not None and capture.held_s:
            self._budget.add_held(capture.level_key, capture.held_s)
        fire, name = self._fire, capture.name
        if error is None and timing is not None and timing.ttft_ms is not None:
            fire(request_type=TTFT, name=name, response_time=timing.ttft_ms, response_length=0,
                 exception=None, context={})
            if timing.tpot_ms is not None:
                fire(request_type=TPOT, name=name, response_time=timing.tpot_ms, response_length=0,
                     exception=None, context={})
            fire(request_type=E2E, name=name, response_time=timing.e2e_ms,
                 response_length=timing.output_tokens, exception=None, context={})
        elif error_kind(error) is ErrorKind.INTERRUPTED:
            self.failures += 1
            fire(request_type=INTERRUPTED, name=name, response_time=_elapsed_ms(capture), response_length=0,
                 exception=None, context={})
        else:
            self.failures += 1
            fire(request_type=E2E, name=name, response_time=_elapsed_ms(capture), response_length=0,
                 exception=StreamError(error or ErrorKind.NO_TOKEN.error("stream carried no token")),
                 context={})


    def _sink_failed(self) -> None:
        """A sink that raised (its own errors are its to handle: a FileSink says and stops the run) must
        not end the processor: every request after it would go unreported, even to Locust."""
        self.unrecorded += 1
        if self.unrecorded == 1:
            log.exception("locust-spec: a request row could not be recorded; Locust's stats still count "
                          "each request")


def held_bytes(capture: Capture) -> int:
    """About what a waiting stream holds: its body and marks (fast reader), or its chunk objects (SDK)."""
    if capture.wire is not None:
        return len(capture.wire.body) + MARK_BYTES * len(capture.wire.times)
    return 2048 * len(capture.chunks or ())


def _elapsed_ms(capture: Capture) -> float:
    return (capture.end - capture.start) * 1000.0 if capture.start else 0.0
