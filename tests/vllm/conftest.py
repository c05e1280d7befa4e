"""Fixtures for the real-vLLM tier: provisioning, models, and at most one `vllm serve` at a time.

The tier fails loudly when vLLM cannot be installed; `LOCUST_SPEC_SKIP_VLLM=1` deselects it on purpose.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm.arms import ArmRun, run_arm
from tests.vllm.models import ModelSet, ensure_models
from tests.vllm.server import VllmServer, start_vllm
from tests.vllm.vllm_env import ProvisionError, VllmEnv, ensure

SKIP_ENV = "LOCUST_SPEC_SKIP_VLLM"
TIMINGS: dict[str, float] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SKIP_ENV) != "1":
        return
    chosen = [item for item in items if item.get_closest_marker("vllm")]
    if not chosen:
        return
    items[:] = [item for item in items if not item.get_closest_marker("vllm")]
    config.hook.pytest_deselected(items=chosen)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"{SKIP_ENV}=1: deselected {len(chosen)} real-vLLM tests", yellow=True)


def pytest_terminal_summary(terminalreporter) -> None:
    if TIMINGS:
        terminalreporter.write_sep("-", "real vLLM timings")
        for name, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f} s")


class VllmPool:
    """Hands out a running server per variant, keeping at most one alive (each needs ~3.5 GB and a core)."""

    def __init__(self, env: VllmEnv, models: ModelSet, logdir: Path) -> None:
        self.env, self.models, self.logdir = env, models, logdir
        self.current: VllmServer | None = None

    def server(self, variant: str) -> VllmServer:
        if self.current is not None and self.current.variant == variant and self.current.alive():
            return self.current
        self.close()
        self.current = start_vllm(self.env, self.models, variant, self.logdir)
        TIMINGS[f"vllm serve {variant}: start to /health"] = self.current.start_s
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="session")
def vllm_env() -> VllmEnv:
    started = time.monotonic()
    try:
        env = ensure()
    except ProvisionError as exc:
        pytest.fail(f"real-vLLM tier: cannot provision vLLM ({exc}); set {SKIP_ENV}=1 to skip it on purpose",
                    pytrace=False)
    TIMINGS["provision vLLM (install or health check)"] = time.monotonic() - started
    return env


@pytest.fixture(scope="session")
def vllm_models(vllm_env: VllmEnv) -> ModelSet:
    started = time.monotonic()
    models = ensure_models(vllm_env.root, vllm_env.python)
    TIMINGS["models (build or reuse)"] = time.monotonic() - started
    return models


@pytest.fixture(scope="session")
def vllm_pool(vllm_env: VllmEnv, vllm_models: ModelSet, tmp_path_factory) -> Iterator[VllmPool]:
    pool = VllmPool(vllm_env, vllm_models, tmp_path_factory.mktemp("vllm-logs"))
    yield pool
    pool.close()


class ArmRuns:
    """One Locust run per variant for the whole session, made while that variant's server is up."""

    def __init__(self, pool: VllmPool, folder: Path) -> None:
        self.pool, self.folder = pool, folder
        self.done: dict[str, ArmRun] = {}

    def get(self, variant: str) -> ArmRun:
        if variant not in self.done:
            started = time.monotonic()
            self.done[variant] = run_arm(self.pool.server(variant), self.folder / variant)
            TIMINGS[f"locust run at 1 user against {variant}"] = time.monotonic() - started
        return self.done[variant]


@pytest.fixture(scope="session")
def arm_runs(vllm_pool: VllmPool, tmp_path_factory) -> ArmRuns:
    return ArmRuns(vllm_pool, tmp_path_factory.mktemp("vllm-runs"))
