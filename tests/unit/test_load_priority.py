"""spec-ab's and spec-tune's load generators run ahead of other work on the machine where the user may
raise their priority (a Locust process waiting for its core stamps chunks late); servers keep theirs."""

from __future__ import annotations

import os
import sys

from locust_spec.ab import children


def nice_of_child(tmp_path, ahead: bool) -> int:
    log = tmp_path / f"nice-{ahead}.log"
    proc = children.spawn([sys.executable, "-c", "import os; print(os.nice(0))"], log, ahead=ahead)
    assert proc.wait(30) == 0
    return int(log.read_text().strip())


def test_a_load_generator_runs_at_load_nice_where_permitted_and_a_server_as_its_parent(tmp_path):
    parent = os.nice(0)
    assert nice_of_child(tmp_path, ahead=False) == parent
    expected = max(parent + children.LOAD_NICE, -20) if children.can_run_ahead() else parent
    assert nice_of_child(tmp_path, ahead=True) == expected


def test_the_start_line_says_which_priority_the_load_generators_got():
    note = children.priority_note()
    assert (f"nice {children.LOAD_NICE}, ahead of other work" in note) == children.can_run_ahead()
    assert "needs root or CAP_SYS_NICE" in note or children.can_run_ahead()
