"""Credentials as users hand them over: a key mounted from a file (a trailing newline) is stripped and
works, a control character in any header value is a one-line error that never shows the value, and no
call that carries the key follows a redirect to another origin.

Before: `OPENAI_API_KEY` with a trailing newline was printed whole in tracebacks (http.client refused the
header), with `--model` a CR/LF in the key reached the raw request head (a header of the key's choosing
went to the server), and the context check's GET /v1/models took the key along a redirect anywhere."""

from __future__ import annotations

import csv
import os

import pytest
from locust.argument_parser import parse_options

from locust_spec import plugin  # noqa: F401  (its options, which parse_options reads, whatever ran before)
from locust_spec.client import context
from locust_spec.client.headers import HeaderValueError
from locust_spec.client.http_fetch import FetchError, request
from locust_spec.recording import scraper
from tests.hostile import runs
from tests.hostile.server import chat_stream, metrics_text, models, redirect

KEY = "sk-mounted-7c2e"
CHAT = "/v1/chat/completions"


def _run(tmp, url: str, *extra: str, env: dict[str, str]) -> tuple[int, str]:
    proc = runs.start(tmp, url, "--headless", "-u", "1", "-r", "1", "-t", "2s", *extra,
                      env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | env)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def test_a_key_with_a_trailing_newline_is_stripped_and_works(hostile, tmp_path):
    server = hostile({"/v1/models": models(), CHAT: chat_stream(), "/metrics": metrics_text})
    code, out = _run(tmp_path, server.url, env={"OPENAI_API_KEY": KEY + "\n",
                                                "LOCUST_SPEC_METRICS_TOKEN": " token-1 \n"})
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and KEY not in out
    assert {s.headers.get("Authorization") for s in server.requests_to(CHAT)} == {f"Bearer {KEY}"}
    assert {s.headers.get("Authorization") for s in server.requests_to("/v1/models")} == {f"Bearer {KEY}"}
    assert {s.headers.get("Authorization") for s in server.requests_to("/metrics")} == {"Bearer token-1"}
    with (tmp_path / "run_requests.csv").open(newline="") as f:
        assert [r for r in csv.DictReader(f) if not r["error"]]


@pytest.mark.parametrize(("env", "option", "named"), [
    ({"OPENAI_API_KEY": KEY + "\r\nX-Injected: yes"}, (), "--api-key (or $OPENAI_API_KEY)"),
    ({}, ("--api-key", KEY + "\nX-Injected: yes"), "--api-key (or $OPENAI_API_KEY)"),
    ({"LOCUST_SPEC_METRICS_TOKEN": KEY + "\x1b[2J"}, (), "--metrics-token (or $LOCUST_SPEC_METRICS_TOKEN)"),
])
def test_a_control_character_in_a_credential_is_one_line_that_never_shows_it(monkeypatch, capsys, env, option,
                                                                               named):
    # what Locust's start does with them: its parser (the plugin's options: a usage error), then the
    # plugin's init check (its ValueError is the process's one-line exit)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises((SystemExit, HeaderValueError)) as stopped:
        options = parse_options(["-f", "x.py", "--model", "m", *option])
        scraper.check_url_options(options, os.environ)
    message = capsys.readouterr().err or str(stopped.value)
    errors = [line for line in message.splitlines() if "control character" in line]
    assert len(errors) == 1 and named in errors[0]
    assert "mounted" not in message and "Injected" not in message


def test_a_header_value_with_a_line_break_is_refused_by_name(hostile):
    server = hostile({"/metrics": metrics_text})
    with pytest.raises(FetchError, match="the Authorization header holds a control character") as refused:
        request(server.url + "/metrics", deadline_s=5, max_bytes=1 << 20,
                headers={"Authorization": f"Bearer {KEY}\r\nX-Injected: yes"})
    assert KEY not in str(refused.value) and not server.seen


def test_the_context_check_keeps_the_key_with_its_origin(hostile):
    thief = hostile({"/v1/models": models()})
    liar = hostile({"/v1/models": redirect(thief.url + "/v1/models")})
    assert context.server_max_model_len(liar.url, KEY, "hostile-model", 5.0) is None
    assert liar.requests_to("/v1/models") and not thief.seen
