"""Distributed runs: workers ship request rows, histogram deltas and their client summary to the master.

Protocol (Locust custom messages on the runners' ZeroMQ channel, msgpack-encoded):

- worker -> master `locust_spec_batch`:
  `{"v": 1, "rows": [[cell, ...], ...], "hist": {"metric|class|level": "<HdrHistogram base64>"},
    "client": {...} | None, "dropped": n, "final": bool}`
  `rows` are RequestRow values in COLUMNS order, at most MAX_ROWS per message; `hist` holds what the worker
  recorded since its previous batch (then it starts afresh); `client` is the worker's `client_summary()`
  (request counts, event-loop lag), the latest one replaces the previous; `dropped` counts rows a failed
  send lost; `final` marks the last batch of a test.
- master -> worker `locust_spec_finish` (no data): stop your users now and send your final batch.

Why custom messages rather than `report_to_master`/`worker_report`: a report leaves every
WORKER_REPORT_INTERVAL (3 s) only, so a worker would hold whatever arrives in between; a message can leave
as soon as MAX_ROWS rows are waiting, which bounds the worker's memory at any request rate, and the final
batch leaves from the worker's own `test_stop`, ordered on the same socket before Locust's last report.

Why `locust_spec_finish`: on `quit` (headless run time, SIGTERM) Locust's master fires `test_stop` while its
workers still run, then gives them 0.5 s to report after telling them to quit. The master instead asks its
workers to stop at `test_stopping` and waits (at most the stop timeout + FINISH_GRACE_S) for every final
batch, so the files, the scraper's last scrape and the summary all come after the last request.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass

import gevent
from gevent.lock import Semaphore
from locust.runners import STATE_INIT, STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, STATE_STOPPED

from locust_spec.client.timing import RequestTiming
from locust_spec.core.runfiles import BATCH_VERSION, COLUMNS, RequestRow, row_values
from locust_spec.recording.histograms import LatencyHistograms
from locust_spec.recording.processor import E2E, INTERRUPTED
from locust_spec.recording.records import FileSink, record_histograms

log = logging.getLogger(__name__)

BATCH = "locust_spec_batch"
FINISH = "locust_spec_finish"
VERSION = BATCH_VERSION
MAX_ROWS = 500
FINISH_GRACE_S = 10.0


def encode_rows(rows: list[RequestRow]) -> list[list]:
    return [list(row_values(r)) for r in rows]


def decode_rows(cells: list[list]) -> list[RequestRow]:
    """Rows as a worker sent them; a row of another width means another version of the plugin."""
    rows = []
    for values in cells:
        if len(values) != len(COLUMNS):
            raise ValueError(f"a request row with {len(values)} cells, expected {len(COLUMNS)}")
        rows.append(RequestRow(*values))
    return rows


class WorkerSink:
    """A worker's RecordSink: rows and histogram deltas go to the master in batches of at most MAX_ROWS.

    Holds at most MAX_ROWS rows and one set of histograms (classes x levels), whatever the run's length; the
    histograms are emptied in place as each batch takes their values.
    """

    # Batches are cheap to send and the master's live view (web UI) is only as fresh as the last one.
    flush_interval_s = 2.0

    def __init__(self, send: Callable[[dict], None], client_summary: Callable[[], dict],
                 max_rows: int = MAX_ROWS) -> None:
        self._send = send
        self._client_summary = client_summary
        self._max_rows = max_rows
        self._rows: list[RequestRow] = []
        self.histograms = LatencyHistograms()
        self._lock = Semaphore()
        self.dropped = 0
        self.sent_final = False

    def add(self, row: RequestRow, timing: RequestTiming | None) -> None:
        self._rows.append(row)
        record_histograms(self.histograms, row, timing)
        self.sent_final = False
        if len(self._rows) >= self._max_rows:
            rows, self._rows = self._rows, []
            self._ship(rows, {}, None, final=False)

    def flush(self, final: bool = False) -> None:
        """Send what is waiting, with the histograms recorded since the last flush and the client summary."""
        with self._lock:
            rows, self._rows = self._rows, []
            encoded = {}
            for key, blob in self.histograms.drain_items():
                encoded[key] = blob
                gevent.sleep(0)  # encoding takes ~0.4 ms a histogram: let readers timestamp in between
            if rows or encoded or final:
                self._ship(rows, encoded, self._client_summary(), final)
            self.sent_final = self.sent_final or final

    def close(self) -> None:
        self.flush()

    def _ship(self, rows: list[RequestRow], hist: dict[str, str], client: dict | None, final: bool) -> None:
        batch = {"v": VERSION, "rows": encode_rows(rows), "hist": hist, "client": client,
                 "dropped": self.dropped, "final": final}
        try:
            self._send(batch)
        except Exception as e:  # noqa: BLE001  (an RPC failure must not stop the load; the loss is counted)
            self.dropped += len(rows)
            log.warning("locust-spec: could not send %d request rows to the master (%s); they are lost",
                        len(rows), e)


class Collector:
    """The master's end: feeds batches into its FileSink and keeps each worker's latest client summary."""

    def __init__(self) -> None:
        self.clients: dict[str, dict] = {}
        self.dropped: dict[str, int] = {}
        self.finished: set[str] = set()
        self.rows_received = 0
        self.rows_by_worker: dict[str, int] = defaultdict(int)  # this test's
        self.rejected = 0
        self.row_listeners: list[Callable[[RequestRow], None]] = []  # e.g. the live page's timeline

    def start_test(self) -> None:
        self.finished.clear()
        self.rows_by_worker.clear()

    def receive(self, worker: str, data: dict, sink: FileSink | None) -> None:
        """One batch; a batch from an incompatible worker is refused with one log line, never a traceback."""
        try:
            if data.get("v") != VERSION:
                raise ValueError(f"batch version {data.get('v')!r}, expected {VERSION}")
            rows = decode_rows(data["rows"])
            if sink is not None:
                sink.add_rows(rows, data["hist"])
        except (KeyError, TypeError, ValueError) as e:
            self.rejected += 1
            log.error("locust-spec: refused a batch from worker %s: %s (same locust-spec version on all?)",
                      worker, e)
            return
        self.rows_received += len(rows)
        self.rows_by_worker[worker] += len(rows)
        for listener in self.row_listeners:
            for row in rows:
                listener(row)
        if data.get("client") is not None:
            self.clients[worker] = data["client"]
        self.dropped[worker] = int(data.get("dropped") or 0)
        if data.get("final"):
            self.finished.add(worker)

    def warnings(self) -> list[str]:
        """For the run summary, after the test: rows lost on the way (workers lost mid-run: WorkerWatch)."""
        lines = [f"worker {w}: {n} request rows could not be sent to the master and are missing"
                 for w, n in sorted(self.dropped.items()) if n]
        if self.rejected:
            lines.append(f"{self.rejected} batch(es) from workers were refused (plugin version mismatch?)")
        return lines


def on_finish(runner, sink: WorkerSink) -> None:
    """A worker asked to finish: stop its users (their test_stop sends the final batch), or, already
    stopped, send a final batch now (the master is waiting for one)."""
    if runner.state in (STATE_INIT, STATE_STOPPED):
        sink.flush(final=True)
    else:
        runner.stop()


def on_worker_quitting(runner, sink: WorkerSink) -> None:
    """A worker quits: stop its users, and send the final batch unless it has left already."""
    if runner.state not in (STATE_INIT, STATE_STOPPED):
        runner.stop()
    if not sink.sent_final:
        sink.flush(final=True)


def wait_for_final_batches(environment, collector: Collector, watch: WorkerWatch | None = None) -> None:
    """Master: ask the workers to stop and wait for their final batches (see the module docstring); a
    worker that sends none is lost (`watch`)."""
    runner = environment.runner

    def pending() -> list[str]:
        return [c.id for c in runner.clients.all
                if c.state != STATE_MISSING and c.id not in collector.finished]

    for worker in pending():
        runner.send_message(FINISH, None, client_id=worker)
    deadline = time.monotonic() + (environment.stop_timeout or 0.0) + FINISH_GRACE_S
    while pending() and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for worker in pending():
        log.warning("locust-spec: worker %s sent no final batch within %.0f s; its last requests may be lost",
                    worker, (environment.stop_timeout or 0.0) + FINISH_GRACE_S)
    if watch is not None:
        watch.test_stopped(environment, collector)


# -- Lost workers -----------------------------------------------------------------------------------------
# A worker killed (SIGKILL, the OOM killer, a lost node) takes the rows it had not shipped and its users: the
# level it ran goes on with fewer users than its label says, until Locust hands out users again (the next
# level, or never with a fixed -u). The master hears each worker's heartbeat every second and Locust marks
# one missing after three silent ones; a worker that is missing, or gone, without its final batch is lost.

LOST_EXIT_CODE = 3
"""The exit code of a run that lost a worker (unless a harder failure set one): rows are missing."""


@dataclass(frozen=True)
class LostWorker:
    """A worker gone mid-run: last heard at `last_seen_unix_s` (the level then, its users then), found
    lost at `detected_unix_s`; its rows that arrived and the requests Locust counted from it."""

    worker: str
    last_seen_unix_s: float
    detected_unix_s: float
    level_users: int
    users: int
    rows_received: int = 0
    requests_reported: int = 0

    @property
    def rows_lost(self) -> int:
        """Requests Locust counted from the worker whose rows never arrived (those in flight come on top)."""
        return max(0, self.requests_reported - self.rows_received)

    def to_dict(self) -> dict:
        return {**asdict(self), "rows_lost": self.rows_lost}

    def warning(self) -> str:
        when = time.strftime("%H:%M:%S", time.gmtime(self.last_seen_unix_s))
        return (f"worker {self.worker} lost mid-run (last heard {when} UTC, at {self.level_users} users, "
                f"running {self.users}): {self.rows_lost} requests Locust counted from it have no row and up "
                f"to {self.users} in flight were cut off; the level ran short of users from then on, so "
                "spec-verdict leaves its rows from then out (summary lost_workers)")


class WorkerWatch:
    """The master's view of its workers during a test: when each was last heard and at which level, its
    users, the requests Locust counted from its reports; which were lost. Bounded by the workers."""

    def __init__(self, level: Callable[[], int]) -> None:
        self._level = level
        self.heard: dict[str, tuple[float, int]] = {}
        self.users: dict[str, int] = {}
        self.reported: dict[str, int] = defaultdict(int)
        self.lost: dict[str, LostWorker] = {}
        self.testing = False

    def start_test(self) -> None:
        self.heard.clear()
        self.users.clear()
        self.reported.clear()
        self.lost.clear()
        self.testing = True

    def heard_from(self, worker: str) -> None:
        if self.testing:
            self.heard[worker] = (time.time(), self._level())

    def report(self, worker: str, data: dict) -> None:
        """A worker's Locust stats report: count its requests (each is one E2E or Interrupted entry)."""
        if not self.testing:
            return
        self.heard_from(worker)
        self.reported[worker] += sum(int(entry.get("num_requests") or 0) for entry in data.get("stats") or ()
                                     if entry.get("method") in (E2E, INTERRUPTED))

    def check(self, environment, collector: Collector) -> None:
        """While the test runs: note each worker's users; a worker missing or gone without its final
        batch is lost."""
        present = {c.id: c for c in environment.runner.clients.all}
        for worker, client in present.items():
            if client.state != STATE_MISSING and client.user_count:
                self.users[worker] = client.user_count
        for worker in list(self.heard):
            client = present.get(worker)
            if (client is None or client.state == STATE_MISSING) and worker not in collector.finished:
                self._lose(environment, worker)

    def test_stopped(self, environment, collector: Collector) -> None:
        """After the wait for final batches: every worker heard during the test without one is lost."""
        for worker in list(self.heard):
            if worker not in collector.finished:
                self._lose(environment, worker)
        self.testing = False

    def _lose(self, environment, worker: str) -> None:
        if worker in self.lost:
            return
        seen, level = self.heard[worker]
        self.lost[worker] = LostWorker(worker, seen, time.time(), level, self.users.get(worker, 0))
        log.error("locust-spec: worker %s was lost mid-run (not heard for %.1f s); its last rows are missing "
                  "and the level ran short of users (the summary says which)", worker, time.time() - seen)
        if not environment.process_exit_code:
            environment.process_exit_code = LOST_EXIT_CODE

    def found(self, collector: Collector) -> list[LostWorker]:
        """The lost workers with their rows and Locust's counts as they stand now."""
        return [LostWorker(lw.worker, lw.last_seen_unix_s, lw.detected_unix_s, lw.level_users, lw.users,
                           collector.rows_by_worker.get(lw.worker, 0), self.reported.get(lw.worker, 0))
                for lw in self.lost.values()]


def watch_workers(environment, collector: Collector, watch: WorkerWatch) -> None:
    """Master: check the workers every heartbeat interval while a test runs (a greenlet for the process)."""
    while True:
        gevent.sleep(1.0)
        if watch.testing and environment.runner.state in (STATE_SPAWNING, STATE_RUNNING):
            watch.check(environment, collector)
