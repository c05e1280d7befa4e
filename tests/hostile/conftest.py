"""The hostile tier's fixture: hostile servers on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.hostile.server import HostileServer, Mode


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    """Factory: `hostile({"/metrics": slow()})` starts a server answering each path in its mode (on a free
    port, or on `port=`)."""
    started: list[HostileServer] = []

    def start(routes: dict[str, Mode], port: int = 0, idle_timeout: float | None = None) -> HostileServer:
        server = HostileServer(routes, port, idle_timeout)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
