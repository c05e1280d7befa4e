"""Shared fixtures: real servers on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import Server, start_spec_sim


@pytest.fixture
def spec_sim(tmp_path) -> Iterator[Callable[..., Server]]:
    """Factory: `spec_sim("--speculative-config", "...")` starts a spec-sim process and returns it."""
    started: list[Server] = []

    def start(*args: str, **kw) -> Server:
        server = start_spec_sim(tmp_path, *args, **kw)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
