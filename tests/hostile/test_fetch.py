"""Plain calls (/metrics, /v1/models, priming) against hostile servers: bounded time and bytes, and
credentials that never leave their origin. Real sockets on loopback, no mocks."""

from __future__ import annotations

import base64
import time

import pytest

from locust_spec.client import server_api
from locust_spec.client.http_fetch import FetchError, request
from locust_spec.core.prompts import Prompt
from locust_spec.recording.scraper import http_fetcher
from tests.hostile.server import (
    METRICS,
    chat_stream,
    endless,
    huge_metrics,
    metrics_text,
    models,
    redirect,
    send,
    slow,
)

TOKEN = "metrics-bearer-5f1c"
API_KEY = "sk-hostile-92ad"
PROMPT = Prompt(id="p1", cls="code", messages=({"role": "user", "content": "hi"},), max_tokens=None)


def test_a_server_sending_a_byte_a_second_costs_one_deadline_not_a_hang(hostile):
    server = hostile({"/metrics": slow(1.0)})
    started = time.monotonic()
    with pytest.raises(FetchError, match="timed out: no complete answer within 2 s"):
        http_fetcher(None, timeout_s=2.0)(server.url + "/metrics")
    # the whole answer would take most of a day at this pace: the deadline, not the answer, ended it
    assert time.monotonic() - started < 30


def test_an_answer_over_the_cap_is_refused_before_it_is_all_read(hostile):
    big = hostile({"/metrics": huge_metrics(6 << 20), "/v1/models": endless})
    with pytest.raises(FetchError, match="larger than the limit of 1048576"):
        http_fetcher(None, timeout_s=30, max_bytes=1 << 20)(big.url + "/metrics")
    with pytest.raises(RuntimeError, match="larger than the limit"):
        server_api.first_model(big.url, API_KEY, timeout=30)


def test_a_real_metrics_answer_passes_whole(hostile):
    server = hostile({"/metrics": metrics_text})
    assert http_fetcher(TOKEN, timeout_s=10)(server.url + "/metrics") == METRICS.decode()
    assert server.requests_to("/metrics")[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert server.requests_to("/metrics")[0].headers["Accept-Encoding"] == "identity"


def test_an_answer_that_closes_the_connection_is_read_whole(hostile):
    # `Connection: close` makes http.client close its connection as the head arrives; a body larger than the
    # first read (70 kB here) must still come whole, not as "Bad file descriptor"
    body = b"# TYPE vllm:x counter\n" + b"".join(b"vllm:x_total{n=\"%06d\"} 1.0\n" % i for i in range(2500))
    server = hostile({"/metrics": lambda h: send(h, 200, body, headers={"Connection": "close"})})
    assert http_fetcher(None, timeout_s=10)(server.url + "/metrics") == body.decode()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_no_credential_follows_a_redirect_to_another_origin(hostile, status):
    thief = hostile({"/metrics": metrics_text, "/v1/models": models(), "/v1/chat/completions": chat_stream()})
    liar = hostile({path: redirect(thief.url + path, status)
                    for path in ("/metrics", "/v1/models", "/v1/chat/completions")})
    userinfo = liar.url.replace("http://", "http://scraper:url-pass-77@")
    for fetch, url in ((http_fetcher(TOKEN, 10), liar.url + "/metrics"),
                       (http_fetcher(None, 10), userinfo + "/metrics")):
        with pytest.raises(FetchError, match=f"redirected to {thief.url}/metrics: not followed"):
            fetch(url)
    with pytest.raises(RuntimeError, match="not followed"):
        server_api.first_model(liar.url, API_KEY, timeout=10)
    primed = server_api.prime(liar.url, [PROMPT], "m", API_KEY, timeout=10)
    assert primed.failed == 1 and "not followed" in primed.first_error
    assert thief.seen == []  # nothing was sent there: neither the key, nor the token, nor the password
    assert len(liar.seen) == 4


def test_a_redirect_within_the_origin_is_followed_with_its_credentials(hostile):
    server = hostile({"/metrics": redirect("/metrics/", 307), "/metrics/": metrics_text})
    url = server.url.replace("http://", "http://scraper:url-pass-77@") + "/metrics"
    assert http_fetcher(None, timeout_s=10)(url) == METRICS.decode()
    auth = server.requests_to("/metrics/")[0].headers["Authorization"]
    assert base64.b64decode(auth.removeprefix("Basic ")) == b"scraper:url-pass-77"


def test_a_redirected_post_is_not_resent_anywhere(hostile):
    server = hostile({"/v1/chat/completions": redirect("/v1/other", 307), "/v1/other": chat_stream()})
    with pytest.raises(FetchError, match="not followed"):
        request(server.url + "/v1/chat/completions", deadline_s=10, max_bytes=1000, body=b"{}")
    assert server.requests_to("/v1/other") == []


def test_priming_and_the_model_list_read_bounded_bodies(hostile):
    server = hostile({"/v1/models": models("m1"), "/v1/chat/completions": endless})
    assert server_api.first_model(server.url, API_KEY, timeout=10) == "m1"
    primed = server_api.prime(server.url, [PROMPT], "m1", API_KEY, timeout=30)
    assert primed.failed == 1 and "larger than the limit" in primed.first_error
