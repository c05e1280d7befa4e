"""A disk that fills up mid-run (a small tmpfs in a private mount namespace): one clear line, the run stops
with a non-zero exit code, and what was written stays whole. Before: the processor greenlet died at the
first ENOSPC, after which not even Locust's stats counted; four tracebacks, `.tmp` files left, and the
requests CSV cut mid-row.

The run stops rather than counting on in memory: the rows are the measurement, and holding them until the
disk frees would grow with the run (or drop them anyway); a run whose files end where its load went on
would disagree with Locust's own counts."""

from __future__ import annotations

import csv
import shlex
import subprocess

import pytest

from locust_spec.core.runfiles import COLUMNS
from tests.hostile import runs
from tests.hostile.server import chat_stream, models, scripted_metrics

SMALL_METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
LOAD = {"/v1/models": models(), "/v1/chat/completions": chat_stream(tokens=2),
        "/metrics": scripted_metrics(lambda _: SMALL_METRICS)}
DISK_KB = 96  # the header and a few hundred rows, then ENOSPC in the middle of a flush of 256 rows


def _can_mount_tmpfs(tmp_path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs {probe}"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def test_a_full_disk_stops_the_run_with_one_line_and_leaves_whole_files(hostile, tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -Urm)")
    server = hostile(LOAD)
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    cmd = runs.locust_cmd(tmp_path, server.url, "--headless", "-u", "8", "-r", "8", "-t", "60s",
                          "--metrics-interval", "0.5")
    cmd[cmd.index("--csv") + 1] = str(disk / "run")
    script = (f"mount -t tmpfs -o size={DISK_KB}k tmpfs {disk} && cd {tmp_path} && {shlex.join(cmd)}; "
              f"rc=$?; cp -a {disk}/. {kept}/; exit $rc")
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True,
                          timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    # one error line when it happens (the summary repeats it among its warnings at the end)
    ours = [line for line in out.splitlines() if "ERROR" in line and "locust-spec: cannot write" in line]
    assert len(ours) == 1, out[-3000:]
    assert "run_requests.csv: No space left on device; run_requests.csv keeps its first" in ours[0]
    assert ours[0].endswith("rows, whole; the run stops")
    assert not list(kept.glob("*.tmp"))
    text = (kept / "run_requests.csv").read_text()
    rows = list(csv.reader(text.splitlines()))
    assert text.endswith("\n") and rows[0] == list(COLUMNS) and len(rows) > 1
    assert all(len(r) == len(COLUMNS) for r in rows)  # before: cut mid-row
    kept_rows = int(ours[0].split("keeps its first ")[1].split(" rows")[0])
    assert len(rows) - 1 == kept_rows
