"""Connect, first-token, idle and whole-request timeouts: each an option with a sane default, each its own
failure name, each honoured at the value given (one Locust run, a user class per misbehaving server)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.e2e.chat_runs import Run, assert_reconciles, chat, error_kind, start_sims, stop_all
from tests.support import PY, REPO

TIMEOUTS = ("--connect-timeout", "0.3", "--first-token-timeout", "1", "--idle-timeout", "0.6",
            "--request-timeout", "1.8")
SERVERS = {
    # name: (spec-sim options, the failure it must produce, or "" for none)
    "healthy": (("--time-scale", "0.1"), ""),
    "stall mid-stream": (("--time-scale", "0.1", "--fault-stall", "1", "--stall-seconds", "3"),
                         "timeout_idle"),
    # a steady trickle: ~20 tokens/s, no gap near the idle timeout, but longer than the request timeout
    "slow": (("--time-scale", "8", "--model-size", "70b"), "timeout_request"),
    "short stall": (("--time-scale", "0.1", "--fault-stall", "1", "--stall-seconds", "0.3"), ""),
}


@pytest.fixture(scope="module")
def unanswered_port() -> Iterator[int]:
    """A listening port whose accept queue is full: a connect there gets no answer at all."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = []
    for _ in range(4):
        client = socket.socket()
        client.settimeout(0.2)
        with contextlib.suppress(OSError):
            client.connect(("127.0.0.1", port))
        held.append(client)
    yield port
    for s in (*held, listener):
        s.close()


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A server that accepts and reads requests but never answers one byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.close()
    for conn in held:
        conn.close()


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory, unanswered_port, silent_port) -> Iterator[tuple[Run, list[dict]]]:
    tmp = tmp_path_factory.mktemp("timeouts")
    sims = start_sims(tmp, {name: options for name, (options, _) in SERVERS.items()})
    try:
        hosts = {name: sim.url for name, sim in sims.items()}
        hosts["unanswered connect"] = f"http://127.0.0.1:{unanswered_port}"
        hosts["silent server"] = f"http://127.0.0.1:{silent_port}"
        run = chat(tmp, "", *TIMEOUTS, "--model", "sim-8b", users=2 * len(hosts), seconds=4,
                   locustfile=str(REPO / "tests" / "e2e" / "fault_hosts_locustfile.py"),
                   env={"FAULT_HOSTS": json.dumps(hosts)})
        yield run, assert_reconciles(run)
    finally:
        stop_all(sims.values())


EXPECTED = {name: failure for name, (_, failure) in SERVERS.items()} | {
    "unanswered connect": "timeout_connect", "silent server": "timeout_first_token"}
LIMIT_S = {"timeout_connect": 0.3, "timeout_first_token": 1.0, "timeout_idle": 0.6, "timeout_request": 1.8}


@pytest.mark.parametrize("server", sorted(EXPECTED))
def test_each_timeout_has_its_own_failure_name(timed_run, server):
    run, all_rows = timed_run
    rows = [r for r in all_rows if r["prompt_class"] == server]
    assert rows
    kinds = {error_kind(r) for r in rows if r["error"]} - {"interrupted"}
    expected = EXPECTED[server]
    assert kinds == ({expected} if expected else set()), {r["error"] for r in rows}
    if expected:
        assert f"E2E {server}: StreamError('{expected}" in run.output


@pytest.mark.parametrize("server", ["unanswered connect", "silent server", "stall mid-stream", "slow"])
def test_a_timeout_fires_at_the_value_given(timed_run, server):
    _, all_rows = timed_run
    failure = EXPECTED[server]
    failed = [r for r in all_rows if r["prompt_class"] == server and error_kind(r) == failure]
    assert failed
    if failure == "timeout_connect":  # no request went out: the row has no clock, Locust's E2E has
        assert all(r["e2e_ms"] == "" for r in failed)
        return
    # e2e runs from sending; the idle timeout counts from the last byte, so it fires later than its value;
    # the whole-request timer starts just before the send clock, so it may read a few ms under its value
    assert all(float(r["e2e_ms"]) >= LIMIT_S[failure] * 1000 - 20 for r in failed)
    assert all(float(r["e2e_ms"]) < (LIMIT_S[failure] + 5.0) * 1000 for r in failed)


def test_a_stall_shorter_than_the_idle_timeout_is_waited_out(timed_run):
    _, all_rows = timed_run
    rows = [r for r in all_rows if r["prompt_class"] == "short stall" and not r["error"]]
    assert rows and all(float(r["e2e_ms"]) >= 300 for r in rows)


DEFAULTS = """
from locust.argument_parser import get_parser, parse_options
from locust_spec import ChatCompletionUser
o = parse_options(["-f", "x.py"])
print(get_parser().format_help())
print(o.connect_timeout, o.first_token_timeout, o.idle_timeout, o.request_timeout)
"""


def test_timeout_options_have_sane_defaults():
    # in a child process: importing Locust monkey-patches the interpreter
    child = subprocess.run([PY, "-c", DEFAULTS], capture_output=True, text=True, timeout=60, cwd=REPO)
    *help_lines, values = child.stdout.splitlines()
    assert values.split() == ["10.0", "120.0", "60.0", "600.0"], child.stderr[-2000:]
    help_text = " ".join(" ".join(help_lines).split())
    for name in ("connect", "first_token", "idle", "request"):
        assert f"--{name.replace('_', '-')}-timeout" in help_text and f"timeout_{name}" in help_text
