"""spec-sim against hostile clients: malformed requests get a 400 (no traceback), a silent or trickling
connection is closed, and a web page cannot restart the server. Before: `Content-Length: abc` and
`content: [{"text": 5}]` were tracebacks with no answer, idle connections lived forever, and
`POST /admin/restart` worked from any page's simple request."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.support import ADMIN_TOKEN

# One server takes every bad request of this file (its log must stay free of tracebacks throughout); the
# restart test has its own.
FAST = ("--time-scale", "0.02", "--idle-timeout", "2")


def exchange(port: int, raw: bytes, timeout: float = 30) -> bytes:
    """Send `raw`, read until the server closes; everything it answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def chat_post(body: bytes, length: bytes | None = None) -> bytes:
    length = str(len(body)).encode() if length is None else length
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + length + b"\r\n\r\n" + body)


@pytest.mark.parametrize("length", [b"abc", b"-5", b"1e3", b""])
def test_an_unreadable_content_length_is_a_400_and_the_server_lives_on(shared_sim, length):
    sim = shared_sim(*FAST)
    answer = exchange(sim.port, chat_post(b"{}", length))
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"Content-Length is not a number" in answer
    urllib.request.urlopen(sim.url + "/health", timeout=10).read()
    assert "Traceback" not in sim.log_text()


@pytest.mark.parametrize("message", [{"role": "user", "content": [{"text": 5}]},
                                     {"role": "user", "content": 5},
                                     {"role": 7, "content": "hi"},
                                     {"role": "user", "content": [5]}])
def test_wrong_json_types_in_a_message_are_a_400(shared_sim, message):
    sim = shared_sim(*FAST)
    body = json.dumps({"model": "sim-8b", "messages": [message], "max_tokens": 4}).encode()
    answer = exchange(sim.port, chat_post(body).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"each message needs a string role" in answer
    assert "Traceback" not in sim.log_text()


def test_a_silent_or_trickling_connection_is_closed(shared_sim):
    sim = shared_sim(*FAST)
    started = time.monotonic()
    assert exchange(sim.port, b"") == b""  # nothing sent: closed after the idle timeout
    with socket.create_connection(("127.0.0.1", sim.port), timeout=30) as sock:
        closed = False
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.2)
        closed = closed or sock.recv(1) == b""
    assert closed
    assert time.monotonic() - started < 60  # bounds, not speed: both end by the 2 s deadline, not never


def test_restart_needs_the_admin_token(spec_sim):
    sim = spec_sim(*FAST)

    def restart(headers: dict[str, str]) -> int:
        request = urllib.request.Request(sim.url + "/admin/restart", b"", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    # what a web page can send without a CORS preflight: no Authorization header
    assert restart({"Content-Type": "text/plain"}) == 403
    assert restart({"Authorization": "Bearer wrong"}) == 403
    assert restart({"Authorization": f"Bearer {ADMIN_TOKEN}"}) == 200
