"""The server's own reason in a failed call's one line."""

from __future__ import annotations

import http.server
import io
import threading
import urllib.error

import orjson
import pytest

from locust_spec.client import server_api


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


class _Models(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


def _serve(body: bytes) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("Handler", (_Models,), {"body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_model_list_is_read_within_a_bound():
    small, url = _serve(orjson.dumps({"data": [{"id": "m", "max_model_len": 4096}]}))
    huge, huge_url = _serve(b"[" + b"0," * (server_api.MAX_JSON_BYTES // 2) + b"0]")
    try:
        assert server_api.first_model(url, "", timeout=10) == "m"
        with pytest.raises(server_api.CallError, match="larger than"):
            server_api.get_json(huge_url, "/models", "", timeout=10)
    finally:
        small.shutdown()
        huge.shutdown()


def test_what_a_server_says_it_serves_is_kept_within_bounds_whatever_it_sends():
    loras = [{"id": f"lora-{i}", "root": "/models/base", "max_model_len": 8192} for i in range(40)]
    listing = {"data": [{"id": "x" * 1000, "root": ["not", "text"], "max_model_len": True}, *loras, "no"]}
    server, url = _serve(orjson.dumps(listing))
    try:
        models = server_api.served_models(url, "", timeout=10)
        assert len(models) == server_api.MAX_MODELS
        assert models[0] == {"id": "x" * server_api.MAX_NAME_CHARS, "root": None, "max_model_len": None}
        assert models[1] == {"id": "lora-0", "root": "/models/base", "max_model_len": 8192}
    finally:
        server.shutdown()
