"""The ladder: one Locust run that steps through levels, each with a warm-up: user counts (a concurrency
ladder, closed loop), or arrival rates (`--rates`, open loop: wiring/openloop.py)."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from locust import LoadTestShape, events

from locust_spec.core.arrivals import check_level_arrivals
from locust_spec.core.design import Design, parse_blocks
from locust_spec.core.level import Level
from locust_spec.wiring.openloop import LEAD_S, OpenLoopSettings, designed_rate_level, parse_rate, rate_level
from locust_spec.wiring.options import positive_int, validated
from locust_spec.wiring.run import run_of

logger = logging.getLogger(__name__)

DEFAULT_LEVELS = "1,4,16,64"
DEFAULT_MAX_CONCURRENCY = 256
"""Open loop: the users (requests in flight at once, over every process) a rate ladder starts. Past it an
arrival waits for a user and is sent late; enough for 40 req/s of 6 s requests."""
DEFAULT_STAGE_TIME = "60s"
DEFAULT_WARMUP = "5s"
RAMP_S = 1.0
"""Each level's users are started (or stopped) within this many seconds: the warm-up should cover it."""
PLAN_AHEAD_S = 1.5
"""A rate level on spec-ab's shared clock is planned this long before it starts (ticks are ~1 s apart)."""

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in a Locust-style duration: `90`, `2.5`, `30s`, `2m`, `1h30m`, `1m30s`, `500ms`."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = list(_DURATION_PART.finditer(text))
        if not parts or "".join(p.group(0) for p in parts) != text:
            raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 2m, 1m30s, 500ms)") from None
        unit_s = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        seconds = sum(float(p.group(1)) * unit_s[p.group(2)] for p in parts)
    if seconds < 0:
        raise ValueError(f"duration must not be negative: {text!r}")
    return seconds


def parse_stage_time(text: str) -> float:
    """A level's duration: a `parse_duration` that must be above zero."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"stage time must be above zero: {text!r}")
    return seconds


def parse_levels(text: str) -> tuple[int, ...]:
    """User counts from a comma-separated list such as `1,4,16,64`; each a positive integer."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"levels must be comma-separated user counts, e.g. 1,4,16,64: {text!r}") from None
    if any(users < 1 for users in levels):
        raise ValueError(f"every level needs at least one user: {text!r}")
    return levels


def parse_rates(text: str) -> tuple[float, ...]:
    """Arrival rates from a comma-separated list such as `1,4,16`: requests per second, each above zero.
    Empty: none, the users ladder (a config file can leave it blank)."""
    if not text.strip():
        return ()
    try:
        return tuple(parse_rate(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"rates must be comma-separated requests per second above zero, e.g. 1,4,16: "
                         f"{text!r}") from None


@dataclass(frozen=True)
class Stage:
    """One rung of the ladder, in seconds since the test started."""

    index: int
    users: int | float
    """The level: its users, or on a rate ladder its requests per second."""
    start_s: float
    warmup_end_s: float
    end_s: float


def stage_at(elapsed_s: float, levels: tuple[int | float, ...], stage_s: float,
             warmup_s: float) -> Stage | None:
    """The ladder stage running `elapsed_s` into the test; None once the last stage has ended."""
    if stage_s <= 0 or elapsed_s < 0:
        raise ValueError("stage time must be positive and elapsed time not negative")
    index = int(elapsed_s // stage_s)
    if index >= len(levels):
        return None
    start_s = index * stage_s
    return Stage(index, levels[index], start_s, start_s + min(warmup_s, stage_s), start_s + stage_s)


def spawn_rate(previous_users: int, users: int) -> float:
    """Users per second that move from one level to the next within `RAMP_S`."""
    return max(abs(users - previous_users), 1) / RAMP_S


@dataclass(frozen=True)
class LadderSettings:
    """The ladder's options, parsed; `design`: the arms' shared clock and blocks (spec-ab), if any."""

    levels: tuple[int, ...]
    stage_s: float
    warmup_s: float
    rates: tuple[float, ...] = ()
    """Open loop: requests per second, one level each, instead of `levels` (`--rates`, or one `--rate`)."""
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    arrivals: OpenLoopSettings = OpenLoopSettings()
    design: Design | None = None

    def __post_init__(self) -> None:
        if self.rates:
            check_level_arrivals(max(self.rates), self.stage_s)

    @property
    def steps(self) -> tuple[int | float, ...]:
        """What the ladder climbs: its rates on a rate ladder, else its user counts."""
        return self.rates or self.levels

    @classmethod
    def from_options(cls, options) -> LadderSettings:
        rates = getattr(options, "rates", None) or getattr(options, "rate", None)
        return cls(parse_levels(options.levels), parse_stage_time(options.stage_time),
                   parse_duration(options.warmup), parse_rates(str(rates)) if rates else (),
                   positive_int(getattr(options, "max_concurrency", None) or DEFAULT_MAX_CONCURRENCY),
                   OpenLoopSettings.from_options(options), parse_blocks(getattr(options, "blocks", "") or ""))

    @property
    def clocked(self) -> bool:
        """On a design's shared clock (spec-ab's interleaved and simultaneous arms)."""
        return self.design is not None and self.design.clock_unix_s is not None

    def elapsed(self, run_time_s: float) -> float:
        """Seconds into the ladder: on the design's shared clock (0 until its zero), else the run's own."""
        if not self.clocked:
            return run_time_s
        return max(0.0, time.time() - self.design.clock_unix_s)

    def warmup_until(self, stage: Stage) -> float:
        if self.clocked:
            return self.design.warmup_until(stage.index)
        return time.time() + (stage.warmup_end_s - stage.start_s)


class ConcurrencyLadder(LoadTestShape):
    """Run `--levels` users in turn, each for `--stage-time`; the first `--warmup` of each level is warm-up.
    With `--rates`, run those arrival rates in turn instead (open loop), with `--max-concurrency` users.

    On every level change the ladder publishes the new `locust_spec.core.level.Level` (its user count and
    the unix time its warm-up ends; on a rate ladder the arrival plan, which ends at the stage's end), so
    each request row records the level it started under and analysis can leave warm-up requests out. The
    test stops after the last level.
    """

    def __init__(self) -> None:
        super().__init__()
        self._stage: Stage | None = None
        self._users = 0
        self._rate = 1.0
        self._listening = False
        self.reset_time()

    @staticmethod
    def check_options(options) -> None:
        """Raise ValueError, one line, when the ladder's options cannot run together (a rate ladder's level
        scheduling too many arrivals): the plugin asks at start, before any level."""
        LadderSettings.from_options(options)

    def reset_time(self) -> None:
        """Restart the ladder's clock (Locust calls this as a test starts, once before the first tick and
        once just after it); options are read again. The stage already published stays: it is forgotten when
        the test stops, so the first level is published (and, on a rate ladder, planned) once per test."""
        super().reset_time()
        self._settings: LadderSettings | None = None

    def _test_stopped(self, **_kw) -> None:
        self._stage = None
        self._users = 0
        self._rate = 1.0

    def tick(self) -> tuple[int, float] | None:
        settings = self._load_settings()
        if settings is None:
            return None
        elapsed = settings.elapsed(self.get_run_time())
        stage = stage_at(elapsed, settings.steps, settings.stage_s, settings.warmup_s)
        if stage is None:
            return None
        if settings.rates and settings.clocked:
            # A level on the shared clock starts at its nominal time, which a tick (about a second apart)
            # reaches late: its plan goes out a little ahead, so its first arrivals are not sent late (the
            # queue keeps to the current plan until the next one starts).
            ahead = stage_at(elapsed + PLAN_AHEAD_S, settings.steps, settings.stage_s, settings.warmup_s)
            stage = ahead or stage
        if self._stage is None or stage.index != self._stage.index:
            if not self._listening:
                self.runner.environment.events.test_stop.add_listener(self._test_stopped)
                self._listening = True
            # The level starts when the ladder asks for it, not at the nominal boundary: ticks are ~1 s apart.
            warmup_s = stage.warmup_end_s - stage.start_s
            run = run_of(self.runner.environment)
            if settings.rates:
                users = settings.max_concurrency
                if self._stage is None and not run.readiness.ready(self.runner):
                    # The first level's users are being spawned and prepared: its arrivals start (and its
                    # warm-up counts) once every process is ready for them, a tick or more later.
                    self._rate, self._users = spawn_rate(self._users, users), users
                    return self._users, self._rate
                if settings.clocked:  # every arm plans the level alike from the shared clock
                    level = designed_rate_level(self.runner, settings.arrivals, settings.design, stage.index,
                                                users)
                else:
                    lead_s = LEAD_S if self._stage is None else 0.0
                    # its arrivals stop at the stage's end, where the next level starts
                    level = rate_level(self.runner, settings.arrivals, stage.users, stage.index, users,
                                       warmup_s, stage.end_s - elapsed - lead_s, lead_s)
                what = f"{stage.users:g} requests/s ({settings.arrivals.arrival}, at most {users} in flight)"
            else:
                users = int(stage.users)
                level = Level(users, settings.warmup_until(stage))
                what = f"{users} users"
            run.levels.publish(level)
            logger.info("Ladder level %d/%d: %s for %gs (warm-up %gs)", stage.index + 1, len(settings.steps),
                        what, settings.stage_s, settings.warmup_s)
            if users != self._users:
                self._rate = spawn_rate(self._users, users)
            self._stage, self._users = stage, users
        return self._users, self._rate

    def _load_settings(self) -> LadderSettings | None:
        if self._settings is None:
            try:
                self._settings = LadderSettings.from_options(self.runner.environment.parsed_options)
            except ValueError as exc:
                logger.error("Ladder not started: %s", exc)
                return None
        return self._settings


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    parser.add_argument("--levels", type=validated(parse_levels), default=DEFAULT_LEVELS,
                        help=f"Comma-separated user counts, one ladder level each (default {DEFAULT_LEVELS})")
    parser.add_argument("--stage-time", type=validated(parse_stage_time), default=DEFAULT_STAGE_TIME,
                        help=f"How long each level runs, e.g. 30s, 2m (default {DEFAULT_STAGE_TIME})")
    parser.add_argument("--warmup", type=validated(parse_duration), default=DEFAULT_WARMUP,
                        help="Start of each level left out of its statistics, e.g. 5s; should cover the "
                             f"{RAMP_S:g}s ramp (default {DEFAULT_WARMUP})")
    parser.add_argument("--rates", type=validated(parse_rates), default=None,
                        help="Open loop: comma-separated requests per second (whole test), one ladder level "
                             "each, instead of --levels (--arrival, --burstiness, --seed shape the arrivals)")
    parser.add_argument("--max-concurrency", type=validated(positive_int), default=None,
                        help="Open loop: users the rate ladder starts, the requests that can be in flight at "
                             "once; an arrival beyond it waits and is sent late, never dropped (default "
                             f"{DEFAULT_MAX_CONCURRENCY})")
    parser.add_argument("--blocks", type=validated(parse_blocks), default="", include_in_web_ui=False,
                        help="Set by spec-ab: the arms' shared clock and blocks, as JSON "
                             "(docs/verdict-method.md)")
