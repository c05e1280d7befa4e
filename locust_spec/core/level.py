"""The level a request starts under, known on every runner (local, master, workers): a number of users
(the concurrency ladder) or a rate of arrivals (open loop, with the plan every process draws them from)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from locust_spec.core.arrivals import ArrivalPlan

MESSAGE = "locust_spec_level"
RATE_SUFFIX = "/s"

V = TypeVar("V")
LevelKey = int | str
"""How a level is named in every per-level table and file: its users (an int, "16" in JSON), or its rate
with the unit ("4/s"), so that a rate level can never be taken for a users level."""


def rate_key(rate: float) -> str:
    """A rate level's key: `4/s`, `0.5/s`."""
    return f"{rate:g}{RATE_SUFFIX}"


def key_of(users: int | None, rate: float | None) -> LevelKey:
    """The key of a level of `users`, or, when it has one, of `rate` arrivals per second."""
    return rate_key(rate) if rate is not None else int(users or 0)


def parse_key(text: str) -> LevelKey:
    """A level key as files write it (`16`, `4/s`) back; ValueError for anything else."""
    text = str(text)
    if text.endswith(RATE_SUFFIX):
        return rate_key(float(text[: -len(RATE_SUFFIX)]))
    return int(text)


def describe(key: LevelKey) -> str:
    """A level key in words: `16 users`, `4 req/s`."""
    if isinstance(key, str) and key.endswith(RATE_SUFFIX):
        return f"{key[: -len(RATE_SUFFIX)]} req/s"
    return f"{key} user" + ("" if str(key) == "1" else "s")


def key_order(key: LevelKey) -> tuple[int, float]:
    """Sort keys: users levels by users, then rate levels by rate."""
    if isinstance(key, str) and key.endswith(RATE_SUFFIX):
        return (1, float(key[: -len(RATE_SUFFIX)]))
    return (0, float(key))


def in_level_order(table: Mapping[LevelKey, V] | Mapping[str, V]) -> list[tuple[LevelKey | str, V]]:
    """A per-level table's items in level order (`key_order`)."""
    return sorted(table.items(), key=lambda kv: key_order(kv[0]))


@dataclass(frozen=True)
class Level:
    """The ladder level: `users` running in the whole test, and until when its warm-up lasts; on a rate level
    (open loop) also the arrival plan, whose users are the slots that can be in flight at once."""

    users: int
    warmup_until_unix_s: float = 0.0
    plan: ArrivalPlan | None = None

    @property
    def rate(self) -> float | None:
        return self.plan.rate if self.plan is not None else None

    @property
    def key(self) -> LevelKey:
        return key_of(self.users, self.rate)

    def in_warmup(self, now_unix_s: float) -> bool:
        return now_unix_s < self.warmup_until_unix_s

    def to_message(self) -> dict:
        data = {"users": self.users, "warmup_until_unix_s": self.warmup_until_unix_s}
        if self.plan is not None:
            data["plan"] = self.plan.to_message()
        return data

    @classmethod
    def from_message(cls, data: dict) -> Level:
        plan = data.get("plan")
        return cls(int(data["users"]), float(data["warmup_until_unix_s"]),
                   ArrivalPlan.from_message(plan) if plan is not None else None)


@dataclass(frozen=True)
class Arrival:
    """One arrival of a rate level's schedule, taken by a user: the next request it sends starts for it."""

    level: Level
    index: int
    intended_unix_s: float


class LevelBoard:
    """One run's current level: set by the ladder (or the master), else the runner's target user count.

    A worker does not know the total user count, so it relies on what the master publishes; a master
    passes what it publishes on to its workers through `send`.
    """

    def __init__(self, runner_users: Callable[[], int], send: Callable[[dict], None] | None = None) -> None:
        self._runner_users = runner_users
        self._send = send
        self._current: Level | None = None
        self.listeners: list[Callable[[Level], None]] = []
        """Told of every level published or received (the open-loop arrivals follow the plans)."""

    def current(self) -> Level:
        if self._current is not None:
            return self._current
        return Level(int(self._runner_users() or 0))

    def publish(self, level: Level) -> None:
        """Make `level` current here and, on a master, on every worker."""
        self._set(level)
        if self._send is not None:
            self._send(level.to_message())

    def received(self, data: dict) -> None:
        """A worker: the master published a level."""
        self._set(Level.from_message(data))

    def spawned(self, user_count: int) -> None:
        """Locust tells every runner, workers included, the total once spawning completes (a rate level
        stays: its users are slots, not the load)."""
        current = self._current
        if current is None or (current.plan is None and current.users != user_count):
            self._current = Level(int(user_count))

    def clear(self) -> None:
        """Forget the published level (a test stopped); the runner's user count stands in again."""
        self._current = None

    def _set(self, level: Level) -> None:
        self._current = level
        for listener in self.listeners:
            listener(level)


def runner_users(environment) -> Callable[[], int]:
    """The runner's target user count, read when asked (the runner changes it as users spawn)."""

    def users() -> int:
        runner = getattr(environment, "runner", None)
        return getattr(runner, "target_user_count", None) or getattr(runner, "user_count", 0) or 0

    return users
