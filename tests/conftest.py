"""Shared fixtures: real servers on loopback, stopped after each test (or each module, where shared)."""

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


@pytest.fixture(scope="module")
def shared_sim(tmp_path_factory) -> Iterator[Callable[..., Server]]:
    """Factory like `spec_sim`, but one server per set of options for the whole module (each start costs
    1-2 s of a loaded core): for tests that read what a server answers and which counters it has, not their
    values from zero, and that neither restart, stop nor load it in a way another test would see."""
    tmp = tmp_path_factory.mktemp("shared-sims")
    started: dict[tuple[str, ...], Server] = {}

    def start(*args: str) -> Server:
        if args not in started or started[args].proc.poll() is not None:
            started[args] = start_spec_sim(tmp, *args)
        return started[args]

    yield start
    for server in started.values():
        server.stop()
