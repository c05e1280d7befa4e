"""The concurrency ladder: one Locust run that steps through user levels, each with a warm-up."""

from __future__ import annotations

import argparse
import logging
import re
import time
from dataclasses import dataclass

from locust import LoadTestShape, events

from locust_spec.core.design import Design, parse_blocks
from locust_spec.core.level import Level
from locust_spec.wiring.run import run_of

logger = logging.getLogger(__name__)

DEFAULT_LEVELS = "1,4,16,64"
DEFAULT_STAGE_TIME = "60s"
DEFAULT_WARMUP = "5s"
RAMP_S = 1.0
"""Each level's users are started (or stopped) within this many seconds: the warm-up should cover it."""

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


@dataclass(frozen=True)
class Stage:
    """One rung of the ladder, in seconds since the test started."""

    index: int
    users: int
    start_s: float
    warmup_end_s: float
    end_s: float


def stage_at(elapsed_s: float, levels: tuple[int, ...], stage_s: float, warmup_s: float) -> Stage | None:
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
    design: Design | None = None

    @classmethod
    def from_options(cls, options) -> LadderSettings:
        return cls(parse_levels(options.levels), parse_stage_time(options.stage_time),
                   parse_duration(options.warmup), parse_blocks(getattr(options, "blocks", "") or ""))

    def elapsed(self, run_time_s: float) -> float:
        """Seconds into the ladder: on the design's shared clock (0 until its zero), else the run's own."""
        if self.design is None or self.design.clock_unix_s is None:
            return run_time_s
        return max(0.0, time.time() - self.design.clock_unix_s)

    def warmup_until(self, stage: Stage) -> float:
        if self.design is not None and self.design.clock_unix_s is not None:
            return self.design.warmup_until(stage.index)
        return time.time() + (stage.warmup_end_s - stage.start_s)


class ConcurrencyLadder(LoadTestShape):
    """Run `--levels` users in turn, each for `--stage-time`; the first `--warmup` of each level is warm-up.

    On every level change the ladder publishes the new `locust_spec.core.level.Level` (its user count and
    the unix time its warm-up ends), so each request row records the level it started under and
    analysis can leave warm-up requests out. The test stops after the last level.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reset_time()

    def reset_time(self) -> None:
        """Start the ladder over (Locust calls this when a test starts); options are read again."""
        super().reset_time()
        self._settings: LadderSettings | None = None
        self._stage: Stage | None = None
        self._rate = 1.0

    def tick(self) -> tuple[int, float] | None:
        settings = self._load_settings()
        if settings is None:
            return None
        stage = stage_at(settings.elapsed(self.get_run_time()), settings.levels, settings.stage_s,
                         settings.warmup_s)
        if stage is None:
            return None
        if self._stage is None or stage.index != self._stage.index:
            previous_users = self._stage.users if self._stage else 0
            # The level starts when the ladder asks for it, not at the nominal boundary: ticks are ~1 s apart.
            run_of(self.runner.environment).levels.publish(Level(stage.users, settings.warmup_until(stage)))
            logger.info("Ladder level %d/%d: %d users for %gs (warm-up %gs)", stage.index + 1,
                        len(settings.levels), stage.users, settings.stage_s, settings.warmup_s)
            self._rate = spawn_rate(previous_users, stage.users)
            self._stage = stage
        return stage.users, self._rate

    def _load_settings(self) -> LadderSettings | None:
        if self._settings is None:
            try:
                self._settings = LadderSettings.from_options(self.runner.environment.parsed_options)
            except ValueError as exc:
                logger.error("Ladder not started: %s", exc)
                return None
        return self._settings


def _validated(parse):
    """An argparse type that rejects bad input with argparse's one line but keeps the text for the web UI."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    check.__name__ = parse.__name__
    return check


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    parser.add_argument("--levels", type=_validated(parse_levels), default=DEFAULT_LEVELS,
                        help=f"Comma-separated user counts, one ladder level each (default {DEFAULT_LEVELS})")
    parser.add_argument("--stage-time", type=_validated(parse_stage_time), default=DEFAULT_STAGE_TIME,
                        help=f"How long each level runs, e.g. 30s, 2m (default {DEFAULT_STAGE_TIME})")
    parser.add_argument("--warmup", type=_validated(parse_duration), default=DEFAULT_WARMUP,
                        help="Start of each level left out of its statistics, e.g. 5s; should cover the "
                             f"{RAMP_S:g}s ramp (default {DEFAULT_WARMUP})")
    parser.add_argument("--blocks", type=_validated(parse_blocks), default="", include_in_web_ui=False,
                        help="Set by spec-ab: the arms' shared clock and blocks, as JSON "
                             "(docs/verdict-method.md)")
