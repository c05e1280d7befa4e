"""spec-ab/spec-tune --processes auto on a machine whose cost per chunk is not known: a calibration run (the
pacer and one Locust process of the plugin) measures it, the plan says the figures, and the next plan in the
same folder reuses what was measured."""

from __future__ import annotations

import os

import pytest

from locust_spec.ab import capacity
from locust_spec.ab.cli import auto_processes
from locust_spec.recording.budget import Cost, processes_for

pytestmark = pytest.mark.skipif(len(capacity.cores()) < 2, reason="one core: nothing to choose")


def test_processes_auto_measures_this_machine_then_plans_from_what_it_measured(tmp_path):
    said: list[str] = []
    cores = len(capacity.cores())
    count, reason = auto_processes("16,2048", False, tmp_path, said.append)
    assert said and "measuring this machine's client cost per chunk" in said[0]
    assert "calibrated: " in reason and " streams x 10 ms steps" in reason and "204,800 chunks/s" in reason
    assert 1 <= count <= cores
    # The plan follows from the cost it names, at the streams it was measured at.
    us = float(reason.split("a process costs ")[1].split(" us")[0])
    streams = int(reason.split(" us of CPU per chunk here at ")[1].split(" streams")[0])
    assert us > 0 and count == processes_for(2048, cores, [Cost(us, "", streams)])[0]
    summary = tmp_path / capacity.CALIBRATION_DIR / f"{capacity.PREFIX}_summary.json"
    assert summary.exists()
    said.clear()
    again, why = auto_processes("16,2048", False, tmp_path, said.append)
    assert not said and again == count
    assert f"measured by the previous run, {os.path.join(capacity.CALIBRATION_DIR, capacity.PREFIX)}" in why \
        or f"{os.path.join(capacity.CALIBRATION_DIR, capacity.SECOND_PREFIX)}_summary.json" in why
