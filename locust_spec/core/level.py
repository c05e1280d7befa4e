"""The concurrency level a request starts under, known on every runner (local, master, workers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MESSAGE = "locust_spec_level"


@dataclass(frozen=True)
class Level:
    """The ladder level: `users` running in the whole test, and until when its warm-up lasts."""

    users: int
    warmup_until_unix_s: float = 0.0

    def in_warmup(self, now_unix_s: float) -> bool:
        return now_unix_s < self.warmup_until_unix_s

    def to_message(self) -> dict:
        return {"users": self.users, "warmup_until_unix_s": self.warmup_until_unix_s}

    @classmethod
    def from_message(cls, data: dict) -> Level:
        return cls(int(data["users"]), float(data["warmup_until_unix_s"]))


class LevelBoard:
    """One run's current level: set by the ladder (or the master), else the runner's target user count.

    A worker does not know the total user count, so it relies on what the master publishes; a master
    passes what it publishes on to its workers through `send`.
    """

    def __init__(self, runner_users: Callable[[], int], send: Callable[[dict], None] | None = None) -> None:
        self._runner_users = runner_users
        self._send = send
        self._current: Level | None = None

    def current(self) -> Level:
        if self._current is not None:
            return self._current
        return Level(int(self._runner_users() or 0))

    def publish(self, level: Level) -> None:
        """Make `level` current here and, on a master, on every worker."""
        self._current = level
        if self._send is not None:
            self._send(level.to_message())

    def received(self, data: dict) -> None:
        """A worker: the master published a level."""
        self._current = Level.from_message(data)

    def spawned(self, user_count: int) -> None:
        """Locust tells every runner, workers included, the total once spawning completes."""
        if self._current is None or self._current.users != user_count:
            self._current = Level(int(user_count))


def runner_users(environment) -> Callable[[], int]:
    """The runner's target user count, read when asked (the runner changes it as users spawn)."""

    def users() -> int:
        runner = getattr(environment, "runner", None)
        return getattr(runner, "target_user_count", None) or getattr(runner, "user_count", 0) or 0

    return users
