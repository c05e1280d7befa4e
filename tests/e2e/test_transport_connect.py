"""Opening the connection: a TLS handshake that never completes, or fails, is a named, bounded connect
failure (not an exception escaping the user)."""

from __future__ import annotations

import subprocess

import pytest

from locust_spec.client.transport import Connection, Endpoint, StreamFailure
from tests.support import PY

# A plain-TCP server: each connection gets `reply` (nothing: it stays silent) after the client's first bytes.
SERVER = r"""
import socket, sys, time
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    conn.recv(4096)
    if sys.argv[1]:
        conn.sendall(sys.argv[1].encode())
        conn.close()
"""


@pytest.mark.parametrize(("reply", "kind"), [("", "timeout_connect"),
                                             ("HTTP/1.1 400 Bad Request\r\n\r\n", "connect")])
def test_a_tls_handshake_that_fails_or_never_ends_is_a_named_connect_failure(reply, kind):
    server = subprocess.Popen([PY, "-c", SERVER, reply], stdout=subprocess.PIPE, text=True)
    try:
        conn = Connection(Endpoint(f"https://127.0.0.1:{server.stdout.readline().strip()}"), 0.5)
        with pytest.raises(StreamFailure) as failed:
            conn.connect()
        assert failed.value.kind == kind and conn.sock is None
    finally:
        server.kill()
        server.wait()
