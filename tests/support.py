"""Test support: start real processes on loopback (spec-sim, locust) and wait for them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "tests" / "data" / "captures"
PY = sys.executable
BIN = Path(PY).parent

# The browser tier drives Debian's Chromium (apt-get install chromium); tests/conftest.py skips the tier,
# with one line saying so, where it is missing.
CHROMIUM = Path("/usr/bin/chromium")

SERVER_CPU = "0"
CLIENT_CPU = "1"
# What the tests' spec-sims accept on POST /admin/restart (SPEC_SIM_ADMIN_TOKEN in their environment).
ADMIN_TOKEN = "test-admin-token"
SIM_ENV = {**os.environ, "SPEC_SIM_ADMIN_TOKEN": ADMIN_TOKEN}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_master_port() -> list[str]:
    """Locust options for a `--processes` run to keep its master and workers on a free port of their own:
    on Locust's default 5557, two runs on the machine at once (another developer's tests) exchanged
    workers."""
    port = str(free_port())
    return ["--master-bind-port", port, "--master-host", "127.0.0.1", "--master-port", port]


def pinned(cmd: list[str], cpu: str) -> list[str]:
    """Pin a command to one core so server and load generator do not contend (2-core machines)."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", cpu, *cmd]
    return cmd


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


@dataclass
class Server:
    """A server process on loopback; `url` is its base URL."""

    proc: subprocess.Popen
    url: str
    port: int
    log: Path
    args: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_spec_sim(tmp: Path, *args: str, port: int | None = None, cpu: str = SERVER_CPU) -> Server:
    port = port or free_port()
    log = tmp / f"spec-sim-{port}.log"
    cmd = pinned([PY, "-m", "locust_spec.sim", "--host", "127.0.0.1", "--port", str(port), *args], cpu)
    fh = log.open("w")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=SIM_ENV)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc=proc)
    except Exception:
        proc.kill()
        raise RuntimeError(f"spec-sim did not start: {log.read_text(errors='replace')[-2000:]}") from None
    return Server(proc, url, port, log, list(args))


def restart_sim(url: str) -> None:
    """POST /admin/restart with the tests' admin token."""
    request = urllib.request.Request(url + "/admin/restart", b"", method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    urllib.request.urlopen(request, timeout=10).read()


def run_locust(args: list[str], cwd: Path, timeout: float = 120, cpu: str = CLIENT_CPU,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `locust` to completion (headless), pinned to the client core; returns the finished process."""
    cmd = pinned([str(BIN / "locust"), *args], cpu)
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def ngram_capture_window():
    """The real vLLM n-gram capture's load as one counter window: 24 requests finished by length, 4608
    generation tokens, acceptance 2619/4128, server mean TPOT 0.998 ms."""
    from locust_spec.metrics.counters import Snapshot, parse_exposition, spec_window

    capture = REFERENCE / "vllm-0.32-cpu"
    snaps = [Snapshot(t, "u", tuple(parse_exposition((capture / f"metrics_ngram_{n}.txt").read_text())))
             for t, n in ((1, "before"), (2, "after"))]
    return spec_window(snaps, 0, 10)


ARTIFACTS = REPO / "test-artifacts"  # screenshots the browser tests keep (gitignored)


def chromium(playwright):
    """Headless Chromium as the browser tests drive it (the browser tier is skipped in conftest where it is
    not installed); the artifacts folder exists afterwards."""
    ARTIFACTS.mkdir(exist_ok=True)
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=[
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
