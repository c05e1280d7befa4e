"""Shared fixtures: real servers on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import CHROMIUM, Server, start_spec_sim

BROWSER_SKIP = f"browser tier skipped: {CHROMIUM} is missing (Debian/Ubuntu: apt-get install -y chromium)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    browser = [item for item in items if item.get_closest_marker("browser")]
    for item in browser:
        item.add_marker(pytest.mark.skip(reason=BROWSER_SKIP))
    config.stash[_browser_skipped] = len(browser)


_browser_skipped = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    skipped = config.stash.get(_browser_skipped, 0)
    if skipped:
        terminalreporter.write_line(f"locust-spec: {BROWSER_SKIP} ({skipped} tests)", yellow=True)


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
