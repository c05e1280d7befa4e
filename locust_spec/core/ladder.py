"""The ladder's arithmetic (pure): durations and user counts as the options spell them, the stage running at
a moment, and how fast users move between levels. The Locust shape that climbs it is wiring/shape.py;
spec-ab's progress and spec-tune's options read the same rules from here."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
