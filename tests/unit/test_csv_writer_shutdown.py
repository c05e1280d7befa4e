"""Locust's SIGTERM shutdown closes its stats CSV files while the greenlet that rewrites them every second
is still alive: with the plugin loaded, closing the files ends that greenlet first, so it never wakes to
write into a closed file (a traceback in the log of a run that was fine)."""

from __future__ import annotations

import subprocess

from tests.support import PY, REPO

SHUTDOWN = """
import sys
import gevent
{load}
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSVFileWriter

writer = StatsCSVFileWriter(Environment(), PERCENTILES_TO_REPORT, sys.argv[1])
greenlet = gevent.spawn(writer.stats_writer)
gevent.sleep(0.1)      # the writer has written once and sleeps until its next rewrite
writer.close_files()   # what Locust's shutdown does before it exits
gevent.sleep(1.5)      # past the writer's next wake-up
print("died with", type(greenlet.exception).__name__ if greenlet.exception else None)
"""


def shutdown(tmp_path, load: str) -> str:
    child = subprocess.run([PY, "-c", SHUTDOWN.format(load=load), str(tmp_path / "run")], capture_output=True,
                           text=True, timeout=120, cwd=REPO)
    return child.stdout.strip()


def test_without_the_plugin_the_writer_wakes_into_closed_files(tmp_path):
    assert shutdown(tmp_path, "") == "died with ValueError"


def test_with_the_plugin_closing_the_files_ends_the_writer_first(tmp_path):
    assert shutdown(tmp_path, "import locust_spec.plugin") == "died with None"
