"""The server's own reason in a failed call's one line."""

from __future__ import annotations

import io
import urllib.error

from locust_spec import server_api


def _http_error(status: int, body: bytes) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://h/v1/x", status, "Bad Request", {}, io.BytesIO(body))


def test_the_reason_is_read_from_openai_fastapi_or_plain_bodies():
    openai = b'{"error": {"message": "This model\'s maximum context length is 512 tokens", "code": 400}}'
    assert server_api.server_message(openai) == "This model's maximum context length is 512 tokens"
    assert server_api.server_message(b'{"detail": "Not Found"}') == "Not Found"
    assert server_api.server_message(b'{"error": "bad model"}') == "bad model"
    assert server_api.server_message(b"upstream\n  timed out") == "upstream timed out"
    assert len(server_api.server_message(b"x" * 10_000)) == 300


def test_an_http_error_line_has_the_status_and_the_reason():
    line = server_api.error_text(_http_error(400, b'{"error": {"message": "prompt too long"}}'))
    assert line == "HTTP 400: prompt too long"
    assert server_api.error_text(_http_error(502, b"")) == "HTTP 502: Bad Request"
    assert server_api.status_of(_http_error(401, b"")) == 401
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    assert server_api.error_text(refused) == "[Errno 111] Connection refused"
    assert server_api.status_of(refused) is None
