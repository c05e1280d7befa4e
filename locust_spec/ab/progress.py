"""spec-ab's live progress: where the A/B is, and what the running arm delivers right now.

What a sweep delivers is read from the files its Locust child writes anyway, so nothing extra talks to
the server: requests, failures and output tokens from Locust's `PREFIX_stats.csv` (rewritten every
second, flushed every few), acceptance from the last two scrapes in `PREFIX_server_metrics.csv` (flushed
after every scrape). Both readers keep constant state, whatever the run's length.

On a terminal a tqdm bar over the sweep's time carries the line; elsewhere (logs, CI) a plain line is
printed every `PLAIN_INTERVAL_S`.
"""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from locust_spec.core.design import INTERLEAVED
from locust_spec.core.ladder import Stage, stage_at
from locust_spec.core.runfiles import SERVER_METRICS_COLUMNS
from locust_spec.metrics import counters
from locust_spec.metrics.exposition import snapshots_from_rows
from locust_spec.wiring.shape import LadderSettings

PLAIN_INTERVAL_S = 4.0
"""Below 5 s, so a line comes at least every 5 s even when a poll runs late on a busy machine."""
RATE_WINDOW_S = 10.0
"""tok/s over the last this-many seconds: long enough to span several finished requests at one user."""
MAX_READ_BYTES = 8 * 1024 * 1024
"""Per poll of the server-metrics CSV; a backlog beyond it is skipped (progress only needs the latest)."""


@dataclass(frozen=True)
class Live:
    """What the running sweep delivered so far (requests, failures) and right now (tok/s, acceptance)."""

    requests: int = 0
    failures: int = 0
    tok_s: float | None = None
    acceptance: float | None = None


@dataclass(frozen=True)
class Sweep:
    """One sweep as the progress line names it: one arm climbing the ladder alone (sequential), or every
    arm of a session on one shared clock (`ladder.design`, interleaved or simultaneous)."""

    position: int
    runs: int
    arms: tuple[str, ...]
    repeat: int
    ladder: LadderSettings

    @property
    def seconds(self) -> float:
        return len(self.ladder.steps) * self.ladder.stage_s


def _block_text(sweep: Sweep, elapsed_s: float) -> str:
    """', block 3/12 candidate' under an interleaved design (', block 3/12' when simultaneous)."""
    design = sweep.ladder.design
    if design is None or not design.blocked or design.clock_unix_s is None:
        return ""
    block = design.block_at(design.clock_unix_s + elapsed_s)
    if block is None:
        return ""
    whose = f" {sweep.arms[block.slot]}" if design.kind == INTERLEAVED and len(sweep.arms) > 1 else ""
    return f", block {block.index + 1}/{design.n_blocks}{whose}"


def _in_warmup(sweep: Sweep, elapsed_s: float, stage: Stage) -> bool:
    """In the warm-up of the arm sending now (under a design each arm warms up in its first block)."""
    design = sweep.ladder.design
    if design is None or design.clock_unix_s is None:
        return elapsed_s < stage.warmup_end_s
    now = design.clock_unix_s + elapsed_s
    block = design.block_at(now)
    slot = block.slot if block is not None else design.slot
    return now < replace(design, slot=slot).warmup_until(stage.index)


def stage_text(sweep: Sweep, elapsed_s: float) -> str:
    """Arms, repeat, level, block and phase, time into the level and into the sweep."""
    head = f"[{sweep.position + 1}/{sweep.runs}] {'+'.join(sweep.arms)} r{sweep.repeat}"
    ladder = sweep.ladder
    if elapsed_s < 0:
        return f"{head} starting in {-elapsed_s:.0f}s (every arm on one clock)"
    stage = stage_at(elapsed_s, ladder.steps, ladder.stage_s, ladder.warmup_s)
    if stage is None:
        return f"{head} ladder done after {sweep.seconds:g}s, Locust writing its files"
    warm = _in_warmup(sweep, elapsed_s, stage)
    phase = "warm-up" if warm else "measuring"
    users = (f"{stage.users:g} req/s" if ladder.rates else
             f"{stage.users} user{'s' if stage.users > 1 else ''}")
    return (f"{head} {users} (level {stage.index + 1}/{len(ladder.steps)}{_block_text(sweep, elapsed_s)}, "
            f"{phase}) {elapsed_s - stage.start_s:3.0f}s/{ladder.stage_s:g}s  "
            f"total {elapsed_s:3.0f}s/{sweep.seconds:g}s")


def live_text(live: Live) -> str:
    tok_s = "-" if live.tok_s is None else f"{live.tok_s:.0f}"
    acceptance = "-" if live.acceptance is None else f"{live.acceptance:.2f}"
    return f"{live.requests} req, {live.failures} failed, {tok_s} tok/s, acceptance {acceptance}"


def line(sweep: Sweep, elapsed_s: float, lives: Sequence[Live]) -> str:
    """The stage, then what each arm delivered (named when the sweep runs several)."""
    if len(lives) == 1:
        return f"{stage_text(sweep, elapsed_s)} | {live_text(lives[0])}"
    parts = [f"{arm}: {live_text(live)}" for arm, live in zip(sweep.arms, lives, strict=True)]
    return " | ".join([stage_text(sweep, elapsed_s), *parts])


def e2e_totals(text: str) -> tuple[int, int, float] | None:
    """(requests, failures, output tokens) over the E2E rows of a Locust stats CSV; None when the text is
    not a whole stats table (Locust rewrites the file in place, so a read can catch it half written).

    The plugin reports every request once as E2E, with its output tokens as the content size."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or "Request Count" not in rows[0] or not any(r[1:2] == ["Aggregated"] for r in rows):
        return None
    head = rows[0]
    n, f, size = head.index("Request Count"), head.index("Failure Count"), head.index("Average Content Size")
    requests = failures = 0
    tokens = 0.0
    try:
        for row in rows[1:]:
            if row and row[0] == "E2E":
                requests += int(row[n])
                failures += int(row[f])
                tokens += int(row[n]) * float(row[size])
    except (ValueError, IndexError):
        return None
    return requests, failures, tokens


class TokenRate:
    """Tokens per second over the last `window_s`, from cumulative counts taken at poll times."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, now: float, tokens: float) -> float | None:
        self._samples.append((now, tokens))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        (t0, k0), (t1, k1) = self._samples[0], self._samples[-1]
        return (k1 - k0) / (t1 - t0) if t1 > t0 else None


class MetricsTail:
    """Acceptance over the last two complete scrapes of a growing server-metrics CSV.

    Reads only what was appended since the last poll; keeps the speculation rows of the scrape being read
    and the last two complete scrapes per URL. A scrape is complete once a row of the next one is seen.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._last: dict[str, deque[counters.Snapshot]] = {}
        self._restart()

    def _restart(self) -> None:
        """Forget the scrape being read (after a skipped backlog, or a file rewritten from the start)."""
        self._partial = b""
        self._key: tuple[str, str] | None = None
        self._rows: list[dict] = []

    def poll(self) -> float | None:
        try:
            with self.path.open("rb") as fh:
                size = fh.seek(0, io.SEEK_END)
                if size < self._offset:
                    self._offset, self._last = 0, {}
                    self._restart()
                skip = size - self._offset > MAX_READ_BYTES  # only the latest scrapes matter
                if skip:
                    self._offset = size - MAX_READ_BYTES
                    self._restart()
                fh.seek(self._offset)
                data = fh.read(size - self._offset)
        except OSError:
            return self.acceptance()
        self._offset = size
        if skip:  # drop the line the cut fell into
            data = data.split(b"\n", 1)[1] if b"\n" in data else b""
        *lines, self._partial = (self._partial + data).split(b"\n")
        for row in csv.reader(line.decode("utf-8", "replace") for line in lines):
            self._add(row)
        return self.acceptance()

    def _add(self, row: list[str]) -> None:
        if len(row) != len(SERVER_METRICS_COLUMNS) or row[0] == SERVER_METRICS_COLUMNS[0]:
            return
        record = dict(zip(SERVER_METRICS_COLUMNS, row, strict=True))
        key = (record["timestamp_unix_s"], record["url"])
        if key != self._key:
            self._complete()
            self._key = key
        if "spec" in record["metric"]:
            self._rows.append(record)

    def _complete(self) -> None:
        if self._key is None:
            return
        try:
            empty = counters.Snapshot(float(self._key[0]), self._key[1], ())
            snaps = snapshots_from_rows(self._rows) or [empty]
        except ValueError:
            snaps = []
        for snap in snaps:
            self._last.setdefault(snap.url, deque(maxlen=2)).append(snap)
        self._rows = []

    def acceptance(self) -> float | None:
        snaps = [s for kept in self._last.values() for s in kept]
        if len(snaps) < 2:
            return None
        return counters.spec_window(snaps, float("-inf"), float("inf")).acceptance_rate


class Watch:
    """The running sweep's numbers, read from its Locust `--csv` prefix."""

    def __init__(self, prefix: Path) -> None:
        self.stats = Path(f"{prefix}_stats.csv")
        self.metrics = MetricsTail(Path(f"{prefix}_server_metrics.csv"))
        self.rate = TokenRate()
        self._live = Live()

    def poll(self, now: float) -> Live:
        try:
            totals = e2e_totals(self.stats.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            totals = None
        # Between the arm's blocks its server drafts nothing: the last acceptance measured stands.
        acceptance = self.metrics.poll()
        if acceptance is None:
            acceptance = self._live.acceptance
        if totals is not None:
            requests, failures, tokens = totals
            self._live = Live(requests, failures, self.rate.add(now, tokens), acceptance)
        else:
            self._live = Live(self._live.requests, self._live.failures, self._live.tok_s, acceptance)
        return self._live


def is_terminal(stream: TextIO) -> bool:
    """A terminal that reports its width; a pseudo-terminal without one (some CI runners) gets plain lines,
    since a bar cannot be drawn in no columns."""
    if not stream.isatty():
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


class Display:
    """A tqdm bar over each sweep's time on a terminal; a plain line every `interval_s` elsewhere."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = PLAIN_INTERVAL_S, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = is_terminal(stream) if tty is None else tty
        self.clock = clock
        self.interval_s = interval_s
        self._bar: tqdm | None = None
        self._last: float | None = None
        self._lock = threading.Lock()  # a phase's ticker thread says lines too

    def start(self, total_s: float) -> None:
        self.finish()
        self._last = None
        if self.tty:
            self._bar = tqdm(total=total_s, file=self.stream, leave=False, dynamic_ncols=True,
                             bar_format="{desc} |{bar}|", mininterval=0)

    def update(self, elapsed_s: float, text: str) -> None:
        if self._bar is not None:
            self._bar.n = min(elapsed_s, self._bar.total)
            self._bar.set_description_str(text, refresh=False)
            self._bar.refresh()
            return
        now = self.clock()
        if self._last is None or now - self._last >= self.interval_s:
            self._last = now
            self.stream.write(text + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def say(self, text: str) -> None:
        """A line that stays (a result, a warning), above the bar when there is one."""
        with self._lock:
            if self._bar is not None:
                self._bar.write(text, file=self.stream)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()


@contextmanager
def phase(display: Display, status: Callable[[float], str], interval_s: float = PLAIN_INTERVAL_S
          ) -> Iterator[None]:
    """While the body runs (priming, preflight, a server starting, the verdict), a line every
    `interval_s`: `status(seconds so far)`, so no phase is silent for 5 s."""
    stop = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not stop.wait(interval_s):
            display.say(status(time.monotonic() - started))

    thread = threading.Thread(target=tick, name="spec-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
