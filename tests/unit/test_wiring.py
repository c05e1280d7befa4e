"""Whatever module a locustfile imports first, the plugin's listeners are the same (in a child process each:
importing Locust patches the interpreter, and listeners are registered once per process); outside Locust,
the package's own commands import neither Locust nor the plugin unless they use them."""

from __future__ import annotations

import subprocess

import pytest

from tests.support import PY, REPO

LISTENERS = """
import locust  # Locust is imported before it loads a locustfile
import {module}
from locust import events
names = sorted(f"{{hook}}:{{h.__module__}}.{{h.__qualname__}}" for hook in
               ("init", "init_command_line_parser", "test_start", "test_stopping", "test_stop", "quitting")
               for h in getattr(events, hook)._handlers if h.__module__.startswith("locust_spec"))
print("\\n".join(names))
"""


def listeners(module: str) -> list[str]:
    child = subprocess.run([PY, "-c", LISTENERS.format(module=module)], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    return child.stdout.split()


@pytest.fixture(scope="module")
def from_the_package():
    return listeners("locust_spec")


@pytest.mark.parametrize("module", ["locust_spec.wiring.user", "locust_spec.recording.scraper",
                                    "locust_spec.analysis.runs"])
def test_any_import_path_registers_the_same_listeners(from_the_package, module):
    assert listeners(module) == from_the_package


OPTIONS = """
import locust
import {module}
from locust.argument_parser import get_parser
print(" ".join(sorted(o for o in get_parser()._option_string_actions if o in {wanted!r})))
"""
LADDER_OPTIONS = {"--levels", "--stage-time", "--warmup", "--rates", "--max-concurrency", "--blocks"}


def options_of(module: str) -> set[str]:
    child = subprocess.run([PY, "-c", OPTIONS.format(module=module, wanted=LADDER_OPTIONS)],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    return set(child.stdout.split())


def test_the_ladder_registers_no_listener_and_its_options_exist_where_a_locustfile_imports_it(
        from_the_package):
    # --levels, --stage-time, --warmup exist where a locustfile runs the ladder (sweep.py), not in chat.py's;
    # plugin.py adds them, the one module that listens
    assert listeners("locust_spec.wiring.shape") == from_the_package
    assert options_of("locust_spec.wiring.shape") == LADDER_OPTIONS
    assert options_of("locust_spec.wiring.user") == set()


def test_one_init_listener_and_all_of_them_in_the_wiring_module(from_the_package):
    inits = [n for n in from_the_package if n.startswith("init:")]
    assert inits == ["init:locust_spec.plugin._on_init"]
    assert all(".plugin." in n for n in from_the_package)


WITHOUT_LOCUST = """
import sys
import {module}
print("locust" in sys.modules, "locust_spec.plugin" in sys.modules)
"""


@pytest.mark.parametrize("module", ["locust_spec.sim.cli", "locust_spec.analysis.cli"])
def test_spec_sim_and_spec_verdict_start_without_locust(module):
    child = subprocess.run([PY, "-c", WITHOUT_LOCUST.format(module=module)], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["False", "False"]


USERS_FIRST = """
from locust_spec import ChatCompletionUser
from locust import events
print(any(h.__qualname__ == "_on_init" for h in events.init._handlers))
"""


def test_the_users_taken_from_the_package_register_the_plugin():
    child = subprocess.run([PY, "-c", USERS_FIRST], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["True"]
