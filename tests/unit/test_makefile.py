"""The Makefile's quick start: `make ab` installs the package alone, `make test` adds the test extras, an
install says it is still at work at least every HEARTBEAT_S, and a changed pyproject.toml installs again.
Before: `make ab` installed the test extras too (playwright, the Kubernetes validators, ...), 167 s with 118 s
of silence. Run on a copy of the Makefile whose virtualenv's python is a stand-in that logs what it is asked
and takes its time over an install, so nothing is installed for real."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/../calls"
case "$*" in *"pip install --progress-bar off"*) sleep "${PIP_SECONDS:-0}";; esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("spec-ab", "#!/bin/sh\necho spec-ab \"$@\"\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def make(checkout: Path, target: str, pip_seconds: float = 0) -> tuple[str, list[str]]:
    """`make TARGET` there: its output, and the virtualenv python's calls it made (then forgotten)."""
    out = subprocess.run(["make", "--no-print-directory", target, "HEARTBEAT_S=1"], cwd=checkout,
                         capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PIP_SECONDS": str(pip_seconds)}).stdout
    calls = checkout / ".venv" / "calls"
    made = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return out, made


def installs(calls: list[str]) -> list[str]:
    return [c.removeprefix("-m pip install --progress-bar off ") for c in calls
            if c.startswith("-m pip install --progress-bar off")]


def test_ab_installs_the_package_alone_and_says_so_while_it_works(checkout):
    out, calls = make(checkout, "ab", pip_seconds=2.5)
    assert installs(calls) == ["-e ."]
    assert out.splitlines()[0] == "installing locust-spec into .venv (the first time takes a few minutes)"
    assert "  ... still installing locust-spec (2 s)" in out.splitlines()
    assert out.splitlines()[-1] == "spec-ab --out runs/demo --overwrite"


def test_test_adds_the_extras_once_and_a_changed_pyproject_installs_again(checkout):
    assert installs(make(checkout, "ab")[1]) == ["-e ."]
    assert installs(make(checkout, "test")[1]) == ["-e .[test]"]
    assert installs(make(checkout, "test")[1]) == [] and installs(make(checkout, "ab")[1]) == []
    with (checkout / "pyproject.toml").open("a") as f:
        f.write("version = '2'\n")
    assert installs(make(checkout, "test")[1]) == ["-e .", "-e .[test]"]
    assert len(list((checkout / ".venv").glob(".installed-*"))) == 2, "the old checksum's stamps are gone"


def pytest_runs(calls: list[str]) -> list[str]:
    return [" ".join(a for a in c.split() if not a.startswith("--basetemp")) for c in calls
            if c.startswith("-m pytest")]


def test_the_suite_runs_the_vllm_tier_beside_the_fast_tiers_then_the_end_to_end_tier_alone(checkout):
    out, calls = make(checkout, "test")
    files = "tests/e2e/test_k8s_jobs.py tests/e2e/test_docker_scripts.py tests/e2e/test_live_browser.py"
    beside = f"-m pytest tests/unit tests/hostile {files}"
    assert sorted(pytest_runs(calls)[:2]) == [beside, "-m pytest tests/vllm"]
    ignored = " ".join(f"--ignore={p}" for p in ["tests/unit", "tests/hostile", *files.split(), "tests/vllm"])
    assert pytest_runs(calls)[2:] == [f"-m pytest tests {ignored}"]
    assert "unit, hostile and files exit 0, real vLLM exit 0, end-to-end exit 0" in out


def test_pytest_args_make_one_plain_run(checkout):
    done = subprocess.run(["make", "--no-print-directory", "test", "PYTEST_ARGS=-m vllm"], cwd=checkout,
                          capture_output=True, text=True, timeout=60, check=True)
    assert "real-vLLM tier runs beside" not in done.stdout
    assert pytest_runs((checkout / ".venv" / "calls").read_text().splitlines()) == ["-m pytest -m vllm"]


def test_a_failing_tier_fails_the_suite_after_every_tier_ran(checkout):
    (checkout / ".venv" / "bin" / "python").write_text(
        FAKE_PYTHON + 'case "$*" in *"tests/unit tests/hostile"*) exit 1;; esac\n')
    done = subprocess.run(["make", "--no-print-directory", "test"], cwd=checkout, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "unit, hostile and files exit 1, real vLLM exit 0, end-to-end exit 0" in done.stdout


def test_docs_installs_the_docs_extra_once_and_builds_the_site_strictly(checkout):
    mkdocs = checkout / ".venv" / "bin" / "mkdocs"
    mkdocs.write_text("#!/bin/sh\necho mkdocs \"$@\"\n")
    mkdocs.chmod(0o755)
    out, calls = make(checkout, "docs")
    assert installs(calls) == ["-e .", "-e .[docs]"]
    assert out.splitlines()[-1] == "mkdocs build --strict --site-dir site"
    assert installs(make(checkout, "docs")[1]) == []


def test_the_suite_prints_each_tiers_seconds_and_appends_them_for_the_budget_guard(checkout):
    from tests.unit.test_ci_budget import budget

    times = checkout / "times.tsv"
    times.write_text("wheel check\t60\n")
    done = subprocess.run(["make", "--no-print-directory", "test", f"TIMES={times}"], cwd=checkout,
                          capture_output=True, text=True, timeout=60, check=True)
    measured = budget.parse_times(times.read_text())
    assert list(measured) == ["wheel check", "unit, hostile and files", "real vLLM", "end-to-end",
                              "make test"]
    assert all(seconds >= 0 for seconds in measured.values())
    assert not [t.name for t in budget.judge(measured) if t.budget_s is None], "every tier has a budget"
    assert "make test: seconds per tier (wall):" in done.stdout
    assert f"  make test\t{measured['make test']:.0f}" in done.stdout.splitlines()
