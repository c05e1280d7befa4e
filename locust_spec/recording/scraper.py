"""Scrapes the server's /metrics during each test (master or local runner): CSV rows and counter windows."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from locust_spec.client import http_fetch
from locust_spec.client.headers import credential
from locust_spec.client.http_fetch import METRICS_URLS_ENV as URLS_ENV
from locust_spec.client.http_fetch import FetchError, UrlError, check_urls, display_url
from locust_spec.core.level import LevelKey
from locust_spec.core.runfiles import SERVER_METRICS_COLUMNS, RunFiles
from locust_spec.metrics.counters import Snapshot, SpecWindow, WindowAccumulator, parse_exposition_checked
from locust_spec.metrics.exposition import rows_from_snapshot
from locust_spec.metrics.level_window import LevelWindow
from locust_spec.recording.writes import RecordFile, WriteFailed, csv_bytes

log = logging.getLogger(__name__)

TOKEN_ENV = "LOCUST_SPEC_METRICS_TOKEN"
# vLLM's /metrics measured 50-56 kB here (tests/data/captures); many models, LoRA adapters or engines
# stay well under 1 MB. 4 MB leaves room for that and bounds a hostile answer's parse (about 0.2 s of CPU
# per MB, off the event loop) to under a second per scrape.
MAX_BODY_BYTES = 4 * 1024 * 1024
# One deadline over the whole scrape (connect to last byte): long enough for a busy server's /metrics
# (seen >1 s under load), short enough that a stalled one costs a gap, never the run.
SCRAPE_TIMEOUT_S = 5.0
# Short enough to sample the running/waiting gauges (the batch the server ran) several times per level.
DEFAULT_INTERVAL_S = 1.0

Fetch = Callable[[str], str]


class StatusError(FetchError):
    """/metrics answered, with another status than 200."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def refuses(status: int) -> bool:
    """An answer that will not change by scraping again (404: not a /metrics URL, 401/403: locked), unlike
    a server that is busy (408, 429) or failing (5xx) for now."""
    return 400 <= status < 500 and status not in (408, 429)


def default_metrics_url(host: str) -> str:
    """HOST/metrics; an OpenAI-style base URL ending in /v1 still means the server's root."""
    base = host.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/metrics"


def metrics_urls(option: list[str] | None, host: str | None) -> list[str]:
    """The URLs to scrape from `--metrics-url` (repeatable, `off` disables) and the Locust host."""
    if option and any(u.strip().lower() == "off" for u in option):
        return []
    if option:
        return list(dict.fromkeys(u.strip() for u in option if u.strip()))
    return [default_metrics_url(host)] if host else []


def http_fetcher(token: str | None, timeout_s: float, max_bytes: int = MAX_BODY_BYTES) -> Fetch:
    """GET the exposition text within one deadline and a byte cap; raises FetchError (an OSError) or
    UrlError (a ValueError) with a short message."""
    headers = {"Accept": "text/plain;version=0.0.4"}
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"  # a bad one: http_fetch's one-line error

    def fetch(url: str) -> str:
        resp = http_fetch.request(url, deadline_s=timeout_s, max_bytes=max_bytes, headers=headers)
        if resp.status != 200:
            locked = resp.status in (401, 403)
            hint = f" (is a token needed? locust --metrics-token, or ${TOKEN_ENV})" if locked else ""
            raise StatusError(f"HTTP {resp.status}{hint}", resp.status)
        return resp.body.decode("utf-8", errors="replace")

    return fetch


class Scraper:
    """One test's scrapes: writes each to the CSV (when there is one) and folds it into counter windows.

    Memory stays bounded: per-URL first and last snapshots, the snapshots taken at ladder-level changes,
    and one accumulator per level, whose size depends on the series exposed, not on the run's length.
    The load never waits for a scrape: the first runs in the scrape greenlet (not inside test_start), the
    URLs of a round are fetched side by side, each within the fetch's deadline, and the text is parsed
    (and written) in a native thread, so a large answer never holds the event loop. Only the stop, once
    the users are gone, waits for the final scrape: at most two deadlines.
    """

    def __init__(self, urls: list[str], interval_s: float, fetch: Fetch, csv_path: Path | None = None):
        self.urls = urls
        self.interval_s = interval_s
        self._fetch = fetch
        self._csv_path = csv_path
        self._records: RecordFile | None = None
        self.write_failure: str | None = None
        """Why the CSV stopped (a full disk): it keeps the scrapes before, whole; windows go on in memory."""
        self.on_write_failure: Callable[[str], None] | None = None  # told once, on the event loop
        self._told = False
        self._lock = Semaphore()
        self._stopped = Event()
        self._loop: gevent.Greenlet | None = None
        self.listeners: list[Callable[[list[Snapshot]], None]] = []  # told every round (the live page)
        self.on_refused: Callable[[str], None] | None = None
        """Told, in one line, when a URL's first answer says it will never serve counters (`refuses`): the
        run stops then (SpecRun.give_up), instead of a warning every interval and a run without acceptance."""
        self._reset_run()

    def _reset_run(self) -> None:
        self._run = WindowAccumulator()
        self._levels: list[tuple[LevelKey, LevelWindow]] = []
        self.first: dict[str, Snapshot] = {}
        self.last: dict[str, Snapshot] = {}
        self.level_snapshots: list[tuple[LevelKey, tuple[Snapshot, ...]]] = []
        self._failures: dict[str, list] = {}
        self._refused: dict[str, str] = {}
        self._first_round = True

    def start(self) -> None:
        """Scrape at once, then every interval until `stop`; returns without waiting for any scrape."""
        self._reset_run()
        self._stopped.clear()
        if self._csv_path is not None and self._records is None and self.write_failure is None:
            try:
                self._records = RecordFile(self._csv_path)
                self._records.append(csv_bytes([SERVER_METRICS_COLUMNS]))
            except WriteFailed as e:
                self._records, self.write_failure = None, str(e)
            self._tell_write_failure()
        self._loop = gevent.spawn(self._every_interval)

    @property
    def running(self) -> bool:
        return self._loop is not None

    def _every_interval(self) -> None:
        self.scrape()
        if self._refused:
            url, reason = next(iter(self._refused.items()))
            self._stopped.set()  # no scrape at stop either: the one line below, not one per scrape
            # A wrong URL among several stops the run as well: it was meant for a server (often the
            # candidate's) whose counters, acceptance among them, the run would otherwise go without.
            lost = ("no server counters from it" if len(self.urls) > 1
                    else "no server counters, so no acceptance")
            self.on_refused(f"the metrics URL {url} answers {reason}: {lost}; pass --metrics-url with the "
                            "server's /metrics, or --metrics-url off")
            return
        while not self._stopped.wait(self.interval_s):
            self.scrape()

    def level_changed(self, users: LevelKey, warmup_until_unix_s: float = 0.0) -> None:
        """The ladder reached a new level: scrape at once, and again when its warm-up ends, so the level's
        measured counters are bracketed by scrapes at its boundaries."""
        gevent.spawn(self._scrape_unless_stopped, users, warmup_until_unix_s or time.time())
        wait = warmup_until_unix_s - time.time()
        if wait > 0:
            gevent.spawn_later(wait, self._scrape_unless_stopped)

    def _scrape_unless_stopped(self, level_users: LevelKey | None = None,
                               measured_from_unix_s: float = 0.0) -> None:
        if not self._stopped.is_set():
            self.scrape(level_users, measured_from_unix_s)

    def abandon(self) -> None:
        """The run gave up: no more scrapes, none at stop either (their warnings would bury its one line)."""
        self._stopped.set()

    def stop(self) -> None:
        """The final scrape, after the one in flight. The users have stopped by now; what this waits for is
        bounded by the deadline, twice at most (the round in flight, then the final one), so that the
        run's end, its summary and the live page hold the counters at its end, whatever the server's pace."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._loop is not None:
            self._loop.join()
            self._loop = None
        self.scrape()

    def close(self) -> None:
        """At quit (Locust fires `quitting` listeners last-registered first: maybe before the test's stop)."""
        if self.running:
            self.stop()
        with self._lock:
            if self._records is not None:
                self._records.close()
                self._records = None

    def scrape(self, level_users: LevelKey | None = None,
               measured_from_unix_s: float = 0.0) -> list[Snapshot]:
        """One round over every URL; a failed URL leaves a gap and a warning, never an exception. With
        `level_users`, a level starts here, its measured requests from `measured_from_unix_s` (its warm-up
        end): its counter window (metrics/level_window.py) opens at the last scrape by then."""
        with self._lock:
            if self._refused:  # the run stops (on_refused): nothing more to scrape or to warn about
                return []
            fetches = [gevent.spawn(self._fetch_one, url) for url in self.urls]
            gevent.joinall(fetches)
            pool = gevent.get_hub().threadpool
            taken = []
            for url, fetched in zip(self.urls, fetches, strict=True):
                if fetched.value is None:
                    continue
                snap = pool.apply(self._parse, (url, *fetched.value))
                if isinstance(snap, str):
                    self._failed(display_url(url), snap)
                else:
                    taken.append(snap)
            for snap in taken:
                self._run.add(snap)
                if self._levels:
                    self._levels[-1][1].add(snap)
                self.first.setdefault(snap.url, snap)
                self.last[snap.url] = snap
            if level_users is not None and taken:
                level = LevelWindow(measured_from_unix_s)
                for snap in taken:
                    level.add(snap)
                self._levels.append((level_users, level))
                self.level_snapshots.append((level_users, tuple(taken)))
            self._tell_write_failure()
            for listener in self.listeners:
                listener(taken)
            self._first_round = False
            return taken

    def _fetch_one(self, url: str) -> tuple[float, float, str] | None:
        sent = time.time()
        try:
            text = self._fetch(url)
        except (FetchError, UrlError, OSError, ValueError) as e:
            if (self._first_round and self.on_refused is not None and isinstance(e, StatusError)
                    and refuses(e.status)):
                self._refused[display_url(url)] = _reason(e)
            else:
                self._failed(display_url(url), _reason(e))
            return None
        return sent, time.time(), text

    def _parse(self, url: str, sent: float, received: float, text: str) -> Snapshot | str:
        """In a native thread: the snapshot (written to the CSV), or why the answer holds none."""
        parsed = parse_exposition_checked(text)
        if not parsed.samples:
            return f"no Prometheus samples in the answer ({parsed.bad_lines} unreadable lines)"
        # The server read its counters somewhere between our request and its answer.
        snap = Snapshot((sent + received) / 2, display_url(url), tuple(parsed.samples))
        if self._records is not None:
            try:
                self._records.append(csv_bytes(rows_from_snapshot(snap)))
            except WriteFailed as e:  # told on the event loop (scrape), not from this thread
                self._records, self.write_failure = None, str(e)
        return snap

    def _tell_write_failure(self) -> None:
        if self.write_failure is not None and not self._told:
            self._told = True
            if self.on_write_failure is not None:
                self.on_write_failure(self.write_failure)
            else:
                log.error("locust-spec: %s", self.write_failure)

    def _failed(self, url: str, reason: str) -> None:
        log.warning("metrics scrape of %s failed: %s; a gap in the server counters", url, reason)
        entry = self._failures.setdefault(url, [0, reason])
        entry[0] += 1

    def run_window(self, models: Collection[str] | None = None) -> SpecWindow:
        """The server counters of `models` (the model under test; None: not known) over the whole test so
        far."""
        return self._run.window(models)

    def level_windows(self, models: Collection[str] | None = None) -> list[tuple[LevelKey, SpecWindow]]:
        """(users or rate key, counters of `models` over that level's window: level_window.LABEL) for each
        ladder level, in order."""
        return [(users, acc.window(models)) for users, acc in self._levels]

    def current_level_window(self, models: Collection[str] | None = None) -> SpecWindow | None:
        """The counters of `models` over the current level's window so far (None before the first level)."""
        return self._levels[-1][1].window(models) if self._levels else None

    def warnings(self, models: Collection[str] | None = None) -> list[str]:
        """One line per URL that failed to scrape, then the run window's notes (restarts, anomalies, models
        left out, no counters)."""
        lines = [
            f"metrics scrape of {url} failed {n} time(s), first: {reason}"
            for url, (n, reason) in self._failures.items()
        ]
        if self.write_failure is not None:
            lines.append(f"{self.write_failure}: the server metrics CSV holds the scrapes before it, whole")
        return lines + list(self.run_window(models).notes)


def _reason(e: BaseException) -> str:
    text = " ".join((str(e) or type(e).__name__).split())
    return text if len(text) <= 200 else text[:200] + "..."


def add_options(parser) -> None:
    # Locust's own add_argument (not an argument group's) knows include_in_web_ui: keep URLs and the token
    # out of the web UI's form.
    parser.add_argument(
        "--metrics-url", action="append", default=None, include_in_web_ui=False,
        help="The server's Prometheus /metrics URL (repeat for replicas); default HOST/metrics; off: none. "
             f"${URLS_ENV} (URLs separated by spaces) keeps credentials in a URL out of the command line",
    )
    parser.add_argument(
        "--metrics-interval", type=float, default=DEFAULT_INTERVAL_S,
        help="Seconds between /metrics scrapes (also scraped at start, at each ladder level, at its "
             "warm-up end and at stop)",
    )
    parser.add_argument(
        "--metrics-token", default=None, include_in_web_ui=False,
        help=f"Bearer token for a protected /metrics (default: ${TOKEN_ENV}); never logged or written",
    )
    parser.add_argument(
        "--metrics-timeout", type=float, default=SCRAPE_TIMEOUT_S, include_in_web_ui=False,
        help="Seconds for one whole scrape of one URL, first byte to last (past it: a gap and a warning)",
    )
    parser.add_argument(
        "--metrics-max-bytes", type=int, default=MAX_BODY_BYTES, include_in_web_ui=False,
        help="Largest /metrics answer read, in bytes (a larger one: a gap and a warning)",
    )


def url_option(opts, environ: Mapping[str, str]) -> list[str] | None:
    """`--metrics-url`, else the URLs in $LOCUST_SPEC_METRICS_URL (how spec-ab hands them to its child)."""
    return getattr(opts, "metrics_url", None) or environ.get(URLS_ENV, "").split() or None


def check_url_options(opts, environ: Mapping[str, str]) -> None:
    """Raise UrlError or HeaderValueError, whose message holds none of their secrets, for unusable metrics
    URLs or token."""
    check_urls(metrics_urls(url_option(opts, environ), None))
    metrics_token(opts, environ)


def metrics_token(opts, environ: Mapping[str, str]) -> str | None:
    """`--metrics-token`, else $LOCUST_SPEC_METRICS_TOKEN, stripped (headers.credential)."""
    token = getattr(opts, "metrics_token", None) or environ.get(TOKEN_ENV) or ""
    return credential(token, f"--metrics-token (or ${TOKEN_ENV})") or None


def scraper_from_options(opts, host: str | None, files: RunFiles | None,
                         environ: Mapping[str, str]) -> Scraper | None:
    """The scraper the options ask for (None with `--metrics-url off` or no host); its CSV with `--csv`."""
    urls = metrics_urls(url_option(opts, environ), host or getattr(opts, "host", None))
    if not urls:
        return None
    try:
        check_urls(urls)
    except UrlError as e:
        log.error("locust-spec: %s; not scraping", e)
        return None
    interval = max(0.1, float(getattr(opts, "metrics_interval", None) or DEFAULT_INTERVAL_S))
    deadline = max(0.1, float(getattr(opts, "metrics_timeout", SCRAPE_TIMEOUT_S) or SCRAPE_TIMEOUT_S))
    max_bytes = int(getattr(opts, "metrics_max_bytes", MAX_BODY_BYTES) or MAX_BODY_BYTES)
    token = metrics_token(opts, environ)
    csv_path = files.server_metrics if files is not None else None
    return Scraper(urls, interval, http_fetcher(token, deadline, max_bytes), csv_path)
