"""The hostile tier's fixture: hostile servers on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.hostile.server import HostileServer, Mode


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    """Factory: `hostile({"/metrics": slow()})` starts a server answering each path in its mode."""
    started: list[HostileServer] = []

    def start(routes: dict[str, Mode], idle_timeout: float | None = None) -> HostileServer:
        server = HostileServer(routes, idle_timeout)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
