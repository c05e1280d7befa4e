"""Helpers for the reliability tests: run headless chat Locust against a server and read what it wrote."""

from __future__ import annotations

import csv
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from locust_spec.recording.histograms import new_histogram, percentiles_us, record_ms
from tests.support import (
    BIN,
    CLIENT_CPU,
    PY,
    REPO,
    SERVER_CPU,
    SIM_ENV,
    Server,
    free_port,
    pinned,
    run_locust,
    wait_http,
)

# The chat user plus the /metrics scraper, as a user's locustfile with both looks.
LOCUSTFILE = str(REPO / "tests" / "e2e" / "scraper_chat_locustfile.py")
PROMPTS = ('{"id": "a", "class": "code", "prompt": "def parse(line):\\n    return line.split(\',\')"}\n'
           '{"id": "b", "class": "chat", "prompt": "Say hello to the team."}\n')
FAULT_NAMES = {"http_500", "http_429", "reset", "malformed_sse", "timeout_idle", "timeout_first_token",
               "timeout_connect", "timeout_request", "connect", "no_done", "interrupted", "server_error",
               "no_token"}


@dataclass
class Run:
    """One finished Locust run: the process, its --csv prefix and what the files say."""

    proc: subprocess.CompletedProcess
    prefix: Path

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def rows(self) -> list[dict]:
        with Path(f"{self.prefix}_requests.csv").open(newline="") as f:
            return list(csv.DictReader(f))

    def locust_counts(self, kind: str) -> tuple[int, int]:
        """(requests, failures) Locust's PREFIX_stats.csv holds for a request type (E2E, TTFT, TPOT; "": its
    Aggregated row)."""
        with Path(f"{self.prefix}_stats.csv").open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["Type"] == kind]
        return sum(int(r["Request Count"]) for r in rows), sum(int(r["Failure Count"]) for r in rows)

    def failure_occurrences(self) -> int:
        with Path(f"{self.prefix}_failures.csv").open(newline="") as f:
            return sum(int(r["Occurrences"]) for r in csv.DictReader(f))


def prompts_file(tmp: Path) -> Path:
    path = tmp / "prompts.jsonl"
    path.write_text(PROMPTS)
    return path


def locust_args(tmp: Path, url: str, *extra: str, users: int = 4, seconds: int = 3,
                name: str = "run", locustfile: str = LOCUSTFILE) -> list[str]:
    run_time = ["-t", f"{seconds}s"] if seconds else []
    host = ["--host", url] if url else []  # without it, each user class keeps its own host
    return ["-f", locustfile, "--headless", "-u", str(users), "-r", str(users), *run_time, *host,
            "--csv", str(tmp / name), "--prompts", str(prompts_file(tmp)),
            "--max-tokens", "32", "--metrics-interval", "1", "--only-summary", *extra]


def chat(tmp: Path, url: str, *extra: str, users: int = 4, seconds: int = 3, name: str = "run",
         env: dict[str, str] | None = None, timeout: float = 120, locustfile: str = LOCUSTFILE) -> Run:
    """Run headless Locust to its end; fail loudly on a traceback."""
    args = locust_args(tmp, url, *extra, users=users, seconds=seconds, name=name, locustfile=locustfile)
    proc = run_locust(args, cwd=tmp, env=env, timeout=timeout)
    run = Run(proc, tmp / name)
    assert "Traceback" not in run.output, run.output[-4000:]
    return run


def start_locust(tmp: Path, url: str, *extra: str, users: int = 4, seconds: int = 0,
                 name: str = "run") -> subprocess.Popen:
    """Start headless Locust in the background (for signals and servers that come and go)."""
    cmd = pinned([str(BIN / "locust"), *locust_args(tmp, url, *extra, users=users, seconds=seconds,
                                                      name=name)], CLIENT_CPU)
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def error_kind(row: dict) -> str:
    return row["error"].split(":", 1)[0]


def assert_reconciles(run: Run) -> list[dict]:
    """One row per request started, and Locust counts exactly what the rows say: requests cut off at stop
    apart (Interrupted, not failures), every other one under E2E."""
    rows = run.rows()
    failed = [r for r in rows if r["error"]]
    interrupted = sum(error_kind(r) == "interrupted" for r in failed)
    assert run.locust_counts("E2E") == (len(rows) - interrupted, len(failed) - interrupted)
    assert run.locust_counts("Interrupted") == (interrupted, 0)
    assert run.locust_counts("TTFT") == (len(rows) - len(failed), 0)
    # Locust's Aggregated row (and its header RPS) counts each request once, not once per timing too
    assert run.locust_counts("") == (len(rows), len(failed) - interrupted)
    assert run.failure_occurrences() == len(failed) - interrupted
    assert all(None not in r and None not in r.values() for r in rows)  # no ragged rows
    assert {error_kind(r) for r in failed} <= FAULT_NAMES
    return rows


def start_sims(tmp: Path, variants: dict[str, tuple[str, ...]]) -> dict[str, Server]:
    """Start one spec-sim per variant at once (each pays seconds of imports) and wait for all."""
    servers = {}
    for name, args in variants.items():
        port = free_port()
        log = tmp / f"spec-sim-{port}.log"
        cmd = pinned([PY, "-m", "locust_spec.sim", "--host", "127.0.0.1", "--port", str(port), *args],
                     SERVER_CPU)
        proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=REPO, env=SIM_ENV)
        servers[name] = Server(proc, f"http://127.0.0.1:{port}", port, log, list(args))
    try:
        for server in servers.values():
            wait_http(server.url + "/health", timeout=60, proc=server.proc)
    except Exception:
        stop_all(servers.values())
        raise
    return servers


def stop_all(servers) -> None:
    for server in servers:
        server.stop()


def finish(proc: subprocess.Popen, tmp: Path, name: str = "run", timeout: float = 120) -> Run:
    """Wait for a run started with start_locust and read it like `chat`'s."""
    out, err = proc.communicate(timeout=timeout)
    run = Run(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), tmp / name)
    assert "Traceback" not in run.output, run.output[-4000:]
    return run


def post(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).read()


TABLE_KEYS = ("level", "requests", "failed", "acceptance", "ttft50", "ttft99", "tpot50", "tpot99", "tok_s",
              "behind")


def level_table(output: str) -> dict[int, dict[str, str]]:
    """The locust-spec table a headless run printed at its end: its cells per level, as printed."""
    lines = output.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("locust-spec, per level"))
    table = {}
    for line in lines[title + 2:]:
        cells = line.split()
        if len(cells) != len(TABLE_KEYS) or not cells[0].isdigit():
            break
        table[int(cells[0])] = dict(zip(TABLE_KEYS, cells, strict=True))
    return table


def assert_level_table(output: str, rows: list[dict]) -> dict[int, dict[str, str]]:
    """The printed table says what the rows say, per level: requests and failures outside warm-up (those cut
    off at stop apart), the exact TTFT and TPOT percentiles of the successful ones, their tokens/s."""
    table = level_table(output)
    measured = [r for r in rows if r["warmup"] != "1" and error_kind(r) != "interrupted"]
    assert set(table) == {int(r["level_users"]) for r in measured}
    for users, cells in table.items():
        at = [r for r in measured if int(r["level_users"]) == users]
        ok = [r for r in at if not r["error"]]
        assert (int(cells["requests"]), int(cells["failed"])) == (len(at), len(at) - len(ok))
        for metric in ("ttft", "tpot"):
            hist = new_histogram()
            record_ms(hist, [float(r[f"{metric}_ms"]) for r in ok if r[f"{metric}_ms"]])
            p50, p99 = percentiles_us(hist, (50.0, 99.0))
            assert (cells[f"{metric}50"], cells[f"{metric}99"]) == (f"{p50 / 1000:.3f}", f"{p99 / 1000:.3f}")
        span = (max(float(r["start_unix_s"]) + float(r["e2e_ms"]) / 1000 for r in ok)
                - min(float(r["start_unix_s"]) for r in ok))
        tokens = sum(int(r["output_tokens"]) for r in ok)
        assert float(cells["tok_s"]) == pytest.approx(tokens / span, rel=0.01)  # the file's times are rounded
    return table
