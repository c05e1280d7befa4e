"""spec-ab's child processes: spawned in their own session and pinned to a core, stopped in order, the
two spec-sim servers of a demo, and the line of a child's log that says why it stopped."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ARMS = ("baseline", "candidate")
SERVER_CPU = "0"
CLIENT_CPU = "1"


class ChildError(Exception):
    """A child that did not start or ended badly, said in one line."""


def pinned(cmd: list[str], cpu: str) -> list[str]:
    """Pin to one core so simulators and load generator do not contend on small machines."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", cpu, *cmd]
    return cmd


def _die_with_parent() -> None:
    """In the child: get SIGTERM if spec-ab dies, so no simulator or Locust outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


LOAD_NICE = -10
"""Load generators run ahead of other work on the machine (a neighbour's job, a CI runner's other steps, two
CPU hogs): a Locust process waiting for its core stamps the chunks that arrived meanwhile late, and the
verdict then refuses the level. The servers under test keep their priority. (os.nice: relative to
spec-ab's own.)"""


def can_run_ahead() -> bool:
    """Whether this user may lower a child's nice value to LOAD_NICE (root, or RLIMIT_NICE allows it)."""
    if os.geteuid() == 0:
        return True
    soft, _hard = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= LOAD_NICE


def priority_note() -> str:
    """One line on the load generators' priority, for the start of spec-ab and spec-tune."""
    if can_run_ahead():
        return f"load generators at nice {LOAD_NICE}, ahead of other work on this machine"
    return (f"load generators at normal priority (nice {LOAD_NICE} needs root or CAP_SYS_NICE): other work "
            "on this machine may make them lag")


def _run_ahead() -> None:
    _die_with_parent()
    with contextlib.suppress(OSError):  # not permitted: priority_note said so
        os.nice(LOAD_NICE)


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None,
          append: bool = False, ahead: bool = False) -> subprocess.Popen:
    """`append`: after what the log holds (spec-ab --resume keeps the earlier servers' logs); `ahead`: a
    load generator (LOAD_NICE)."""
    # Own process group: a terminal's Ctrl-C reaches spec-ab alone, which then stops children in order.
    with log.open("a" if append else "w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_run_ahead if ahead else _die_with_parent,
                                env=env)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15.0,
         group: bool = False) -> None:
    """Signal the pid we started and wait; kill it when it lingers. `group`: afterwards also kill what is
    left of its process group (a server's own workers, e.g. vLLM's engine core), since spawn gave the
    child a session of its own."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def log_reason(text: str) -> str:
    """The line of a Locust or spec-sim log that says why it stopped: its first error, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "/ERROR/" in line or "/CRITICAL/" in line or line.startswith(("Error", "spec-sim:")):
            return line.split(": ", 1)[1] if "/ERROR/" in line or "/CRITICAL/" in line else line
    return lines[-1] if lines else "no output"


def signal_name(number: int) -> str:
    """'SIGKILL' for 9; 'signal 64' for one without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def reason(log: Path) -> str:
    return log_reason(log.read_text(errors="replace")) if log.exists() else "no log"


_GIVEN: deque[int] = deque(maxlen=64)
"""Ports handed out lately: a port is free once its socket closes, so the next call could get it again
before the first taker has bound it (the arms of a session are spawned one after the other)."""


def free_port() -> int:
    """A loopback port nothing listens on, none of the last few handed out."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            break
    _GIVEN.append(port)
    return port


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0,
               name: str = "spec-sim") -> None:
    """Poll URL/health until it answers 200; ChildError (with the log's reason) if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ChildError(f"{name} exited with {proc.returncode} at start: {reason(log)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise ChildError(f"{name} at {url} not ready after {timeout:g}s; see {log}")


def start_sim(log: Path, time_scale: float, gpu: str, speculative_config: dict | None,
              extra: tuple[str, ...] = (), append: bool = False) -> tuple[subprocess.Popen, str]:
    """One spec-sim on a free loopback port, pinned to the server core and ready: (process, url)."""
    port = free_port()
    cmd = [sys.executable, "-m", "locust_spec.sim", "--host", "127.0.0.1", "--port", str(port),
           "--time-scale", f"{time_scale:g}", "--gpu", gpu, *extra]
    if speculative_config is not None:
        cmd += ["--speculative-config", json.dumps(speculative_config)]
    proc = spawn(pinned(cmd, SERVER_CPU), log, append=append)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log)
    except BaseException:
        stop(proc)
        raise
    return proc, url


@contextmanager
def simulators(out: Path, time_scale: float, gpu: str, speculative_config: dict,
               self_test: bool = False, append: bool = False) -> Iterator[dict[str, str]]:
    """Two spec-sim servers on free loopback ports, speculation off and on: {arm: url}; stopped on exit.
    `self_test` (an A/A): only the baseline's, for both arms. They log into `out`, after what its logs
    hold when `append`."""
    procs: list[subprocess.Popen] = []
    try:
        urls = {}
        for arm in ARMS[:1] if self_test else ARMS:
            # Per-request acceptance (as vLLM's option of that name) gives the verdict its per-class
            # diagnosis: which prompts the speculation pays on.
            config, extra = ((speculative_config, ("--per-request-spec-decode-metrics", "detailed"))
                             if arm == "candidate" else (None, ()))
            proc, urls[arm] = start_sim(out / f"sim-{arm}.log", time_scale, gpu, config, extra, append)
            procs.append(proc)
        if self_test:
            urls["candidate"] = urls["baseline"]
        yield urls
    finally:
        for proc in procs:
            stop(proc)


