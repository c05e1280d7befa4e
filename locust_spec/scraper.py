"""Scrapes the server's /metrics during each test (master or local runner): CSV rows and counter windows."""

from __future__ import annotations

import base64
import csv
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from locust_spec.counters import Snapshot, SpecWindow, WindowAccumulator, parse_exposition_checked
from locust_spec.exposition import CSV_COLUMNS, rows_from_snapshot
from locust_spec.runfiles import RunFiles

log = logging.getLogger(__name__)

TOKEN_ENV = "LOCUST_SPEC_METRICS_TOKEN"
MAX_BODY_BYTES = 32 * 1024 * 1024
# Short enough that a dead server costs little, long enough for a busy one's /metrics (seen >1 s under load).
SCRAPE_TIMEOUT_S = 3.0
# Short enough to sample the running/waiting gauges (the batch the server ran) several times per level.
DEFAULT_INTERVAL_S = 1.0

Fetch = Callable[[str], str]


def display_url(url: str) -> str:
    """The URL as it may be logged or written: no user:password, no query (either can hold a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def basic_auth(url: str) -> tuple[str, str | None]:
    """`http://user:pass@host/metrics` -> (the URL without them, a Basic Authorization value)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    netloc = parts.netloc.rsplit("@", 1)[1]
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return (urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)),
            "Basic " + base64.b64encode(credentials).decode())


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


def http_fetcher(token: str | None, timeout_s: float) -> Fetch:
    """GET the exposition text; raises OSError/ValueError with a short message on any failure."""
    headers = {"Accept": "text/plain;version=0.0.4"}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    def fetch(url: str) -> str:
        url, basic = basic_auth(url)
        req = urllib.request.Request(url, headers=headers if basic is None or token else
                                     {**headers, "Authorization": basic})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                body = resp.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as e:
            locked = e.code in (401, 403)
            hint = f" (is a token needed? locust --metrics-token, or ${TOKEN_ENV})" if locked else ""
            raise ValueError(f"HTTP {e.code}{hint}") from None
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"response larger than {MAX_BODY_BYTES} bytes")
        return body.decode("utf-8", errors="replace")

    return fetch


class Scraper:
    """One test's scrapes: writes each to the CSV (when there is one) and folds it into counter windows.

    Memory stays bounded: per-URL first and last snapshots, the snapshots taken at ladder-level changes,
    and one accumulator per level, whose size depends on the series exposed, not on the run's length.
    """

    def __init__(self, urls: list[str], interval_s: float, fetch: Fetch, csv_path: Path | None = None):
        self.urls = urls
        self.interval_s = interval_s
        self._fetch = fetch
        self._csv_path = csv_path
        self._file = None
        self._writer = None
        self._lock = Semaphore()
        self._stopped = Event()
        self._loop: gevent.Greenlet | None = None
        self.listeners: list[Callable[[list[Snapshot]], None]] = []  # told every round (the live page)
        self._reset_run()

    def _reset_run(self) -> None:
        self._run = WindowAccumulator()
        self._levels: list[tuple[int, WindowAccumulator]] = []
        self.first: dict[str, Snapshot] = {}
        self.last: dict[str, Snapshot] = {}
        self.level_snapshots: list[tuple[int, tuple[Snapshot, ...]]] = []
        self._failures: dict[str, list] = {}

    def start(self) -> None:
        """Scrape now, then every interval until `stop`."""
        self._reset_run()
        self._stopped.clear()
        if self._csv_path is not None and self._file is None:
            self._file = self._csv_path.open("w", newline="")
            self._writer = csv.writer(self._file)
            self._writer.writerow(CSV_COLUMNS)
            self._file.flush()
        self.scrape()
        self._loop = gevent.spawn(self._every_interval)

    @property
    def running(self) -> bool:
        return self._loop is not None

    def _every_interval(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.scrape()

    def level_changed(self, users: int, warmup_until_unix_s: float = 0.0) -> None:
        """The ladder reached a new level: scrape at once, and again when its warm-up ends, so the level's
        measured counters are bracketed by scrapes at its boundaries."""
        gevent.spawn(self.scrape, users)
        wait = warmup_until_unix_s - time.time()
        if wait > 0:
            gevent.spawn_later(wait, self._scrape_unless_stopped)

    def _scrape_unless_stopped(self) -> None:
        if not self._stopped.is_set():
            self.scrape()

    def stop(self) -> None:
        """The final scrape; the CSV stays open for a later test in the same process."""
        self._stopped.set()
        if self._loop is not None:
            self._loop.join(timeout=self.interval_s + 10)
            self._loop = None
        self.scrape()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def scrape(self, level_users: int | None = None) -> list[Snapshot]:
        """One round over every URL; a failed URL leaves a gap and a warning, never an exception."""
        with self._lock:
            taken = [s for s in (self._scrape_one(url) for url in self.urls) if s is not None]
            for snap in taken:
                self._run.add(snap)
                if self._levels:
                    self._levels[-1][1].add(snap)
                self.first.setdefault(snap.url, snap)
                self.last[snap.url] = snap
            if level_users is not None and taken:
                level = WindowAccumulator()
                for snap in taken:
                    level.add(snap)
                self._levels.append((level_users, level))
                self.level_snapshots.append((level_users, tuple(taken)))
            for listener in self.listeners:
                listener(taken)
            return taken

    def _scrape_one(self, url: str) -> Snapshot | None:
        shown = display_url(url)
        sent = time.time()
        try:
            text = self._fetch(url)
        except (OSError, ValueError) as e:
            self._failed(shown, _reason(e))
            return None
        received = time.time()
        parsed = parse_exposition_checked(text)
        if not parsed.samples:
            self._failed(shown, f"no Prometheus samples in the answer ({parsed.bad_lines} unreadable lines)")
            return None
        # The server read its counters somewhere between our request and its answer.
        snap = Snapshot((sent + received) / 2, shown, tuple(parsed.samples))
        if self._writer is not None and self._file is not None:
            self._writer.writerows(rows_from_snapshot(snap))
            self._file.flush()
        return snap

    def _failed(self, url: str, reason: str) -> None:
        log.warning("metrics scrape of %s failed: %s; a gap in the server counters", url, reason)
        entry = self._failures.setdefault(url, [0, reason])
        entry[0] += 1

    def run_window(self) -> SpecWindow:
        """The server counters over the whole test so far."""
        return self._run.window()

    def level_windows(self) -> list[tuple[int, SpecWindow]]:
        """(users, counters over that level) for each ladder level, in order."""
        return [(users, acc.window()) for users, acc in self._levels]

    def warnings(self) -> list[str]:
        """One line per URL that failed to scrape, then the run window's notes (restarts, no counters)."""
        lines = [
            f"metrics scrape of {url} failed {n} time(s), first: {reason}"
            for url, (n, reason) in self._failures.items()
        ]
        return lines + list(self.run_window().notes)


def _reason(e: BaseException) -> str:
    if isinstance(e, urllib.error.URLError):
        e = e.reason if isinstance(e.reason, BaseException) else e
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def add_options(parser) -> None:
    # Locust's own add_argument (not an argument group's) knows include_in_web_ui: keep URLs and the token
    # out of the web UI's form.
    parser.add_argument(
        "--metrics-url", action="append", default=None, include_in_web_ui=False,
        help="The server's Prometheus /metrics URL (repeat for replicas); default HOST/metrics; off: none",
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


def scraper_from_options(opts, host: str | None, files: RunFiles | None,
                         environ: Mapping[str, str]) -> Scraper | None:
    """The scraper the options ask for (None with `--metrics-url off` or no host); its CSV with `--csv`."""
    urls = metrics_urls(getattr(opts, "metrics_url", None), host or getattr(opts, "host", None))
    if not urls:
        return None
    interval = max(0.1, float(getattr(opts, "metrics_interval", None) or DEFAULT_INTERVAL_S))
    token = getattr(opts, "metrics_token", None) or environ.get(TOKEN_ENV) or None
    csv_path = files.server_metrics if files is not None else None
    return Scraper(urls, interval, http_fetcher(token, timeout_s=SCRAPE_TIMEOUT_S), csv_path)
