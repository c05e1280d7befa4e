"""The concurrency level a request starts under, known on every runner (local, master, workers)."""

from __future__ import annotations

from dataclasses import dataclass

from locust import events
from locust.runners import MasterRunner, WorkerRunner

MESSAGE = "locust_spec_level"


@dataclass(frozen=True)
class Level:
    """The ladder level: `users` running in the whole test, and until when its warm-up lasts."""

    users: int
    warmup_until_unix_s: float = 0.0

    def in_warmup(self, now_unix_s: float) -> bool:
        return now_unix_s < self.warmup_until_unix_s


_current: Level | None = None


def current(environment=None) -> Level:
    """The level set by the ladder (or the master); without one, the runner's target user count.

    A worker does not know the total user count, so it relies on what the master publishes.
    """
    if _current is not None:
        return _current
    runner = getattr(environment, "runner", None)
    users = getattr(runner, "target_user_count", None) or getattr(runner, "user_count", 0) or 0
    return Level(int(users))


def publish(level: Level, environment) -> None:
    """Make `level` current here and, on a master, on every worker."""
    global _current
    _current = level
    runner = getattr(environment, "runner", None)
    if isinstance(runner, MasterRunner):
        runner.send_message(MESSAGE, {"users": level.users, "warmup_until_unix_s": level.warmup_until_unix_s})


def reset() -> None:
    global _current
    _current = None


def _on_message(msg, **_kw) -> None:
    global _current
    _current = Level(int(msg.data["users"]), float(msg.data["warmup_until_unix_s"]))


@events.init.add_listener
def _register(environment, **_kw) -> None:
    if isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message(MESSAGE, _on_message)


@events.spawning_complete.add_listener
def _on_spawned(user_count: int, **_kw) -> None:
    """Locust tells every runner, workers included, the total once spawning completes."""
    global _current
    if _current is None or _current.users != user_count:
        _current = Level(int(user_count))
