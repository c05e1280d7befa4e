"""The hostile tier's fixture: hostile servers on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.hostile.server import HostileServer, Mode


@pytest.fixture
def hostile() -> Iterator[Callable[[dict[str, Mode]], HostileServer]]:
    """Factory: `hostile({"/metrics": slow()})` starts a server answering each path in its mode (on a free
    port, or on `port=`)."""
    started: list[HostileServer] = []

    def start(routes: dict[str, Mode], port: int = 0) -> HostileServer:
        server = HostileServer(routes, port)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
