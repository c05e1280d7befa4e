"""CI's time guard (.ci/budget.py): each tier's measured seconds against the budget stated there; a run more
than 10% over a tier's budget, or a tier timed without one, fails naming the tier."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.support import REPO

SCRIPT = REPO / ".ci" / "budget.py"
_spec = importlib.util.spec_from_file_location("ci_budget", SCRIPT)
budget = importlib.util.module_from_spec(_spec)
sys.modules["ci_budget"] = budget  # dataclasses look their module up there
_spec.loader.exec_module(budget)

BUDGETS = {"end-to-end": 400.0, "make test": 900.0}


def failures(times: dict[str, float]) -> list[str]:
    return [line for line in budget.report(budget.judge(times, BUDGETS)) if line.startswith("budget: ")]


def test_a_tier_within_ten_percent_of_its_budget_passes_and_one_beyond_fails_by_name():
    assert failures({"end-to-end": 440.0, "make test": 850.0}) == []
    assert failures({"end-to-end": 441.0, "make test": 850.0}) == [
        "budget: the tier 'end-to-end' took 441 s, over its 400 s by more than 10%"]
    assert len(failures({"end-to-end": 500.0, "make test": 1000.0})) == 2


def test_a_tier_timed_without_a_budget_fails_until_one_is_stated():
    assert failures({"spec-docs": 1.0}) == [
        "budget: the tier 'spec-docs' has no budget: state one in .ci/budget.py"]


def test_the_times_file_is_tab_separated_lines_and_a_bad_line_is_named():
    assert budget.parse_times("make test\t812\n\nunit, hostile and files\t300.5\nmake test\t820\n") == {
        "make test": 820.0, "unit, hostile and files": 300.5}
    with pytest.raises(ValueError, match="line 2 is not 'tier<TAB>seconds': 'make test 812'"):
        budget.parse_times("ci\t1100\nmake test 812\n")
    with pytest.raises(ValueError, match="line 1"):
        budget.parse_times("ci\tlong\n")


def test_the_stated_budgets_fit_in_the_whole_runs():
    # make test runs the vLLM tier beside the unit, hostile and files tier, then the end-to-end tier alone
    b = budget.BUDGETS_S
    assert max(b["unit, hostile and files"], b["real vLLM"]) + b["end-to-end"] <= b["make test"]
    assert b["make test"] + b["make ab and make lint"] <= b["ci"]
    assert b["ci"] * (1 + budget.TOLERANCE) < 1800, "CI's own limit is 30 minutes"


def test_the_command_prints_every_tier_and_exits_1_naming_the_tier_over_budget(tmp_path):
    times = tmp_path / "times.tsv"
    times.write_text("make test\t700\nend-to-end\t1000\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(times)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["make", "test", "700", "s", "budget", "1250", "s", "(56%)"]
    assert lines[-1].startswith("budget: the tier 'end-to-end' took 1000 s")
    times.write_text("make test\t700\n")
    assert subprocess.run([sys.executable, str(SCRIPT), str(times)], capture_output=True,
                          timeout=30).returncode == 0
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none")], capture_output=True,
                             text=True, timeout=30)
    assert missing.returncode == 2 and missing.stderr.startswith("budget: ")
