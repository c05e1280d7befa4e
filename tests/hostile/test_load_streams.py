"""The load requests' streams against servers that close, stall, trail or answer in another format: each
request ends where its answer ends, with a named cause, and a connection the server closed between
requests costs no failure. Real sockets on loopback, the user's client in this process.

Before: a request reusing a connection the server had closed was `reset: connection closed.` (every other
request at 3 s think time against a 2 s idle timeout); SSE comments held the first-token timeout off;
bytes after [DONE] counted into E2E and a stream kept open after it held the user to its timeouts; a JSON,
HTML or gzip 200 was `no_done`, and no `Accept-Encoding: identity` was sent."""

from __future__ import annotations

import gzip
import re
import time

import gevent
import pytest

from tests.hostile.clients import MESSAGES, client
from tests.hostile.server import (
    after_done,
    chat_stream,
    chunked_head,
    comments_only,
    once_per_connection,
    send,
    sse_events,
    write_chunk,
)

CHAT = "/v1/chat/completions"


def test_a_connection_the_server_closed_while_idle_is_replaced_without_a_failure(hostile):
    server = hostile({CHAT: chat_stream()}, idle_timeout=0.2)
    user, kept = client(server.url)
    for _ in range(3):
        user.stream(MESSAGES)
        gevent.sleep(0.4)  # think time past the server's idle timeout
    assert [kept.error(n) for n in range(3)] == ["", "", ""]
    assert len(server.requests_to(CHAT)) == 3


def test_a_request_the_server_drops_on_a_reused_connection_is_sent_once_more_on_a_fresh_one(hostile):
    server = hostile({CHAT: once_per_connection(chat_stream())})
    user, kept = client(server.url)
    for _ in range(4):
        user.stream(MESSAGES)
    assert [kept.error(n) for n in range(4)] == [""] * 4
    seen = server.requests_to(CHAT)
    # each retry is a second request: a fresh connection's first, answered
    assert len(seen) == 7 and len({s.peer for s in seen}) == 4
    # timed from the request that was answered, not from the one that went unanswered
    assert all(c.timing().ttft_ms < 1000 for c in kept.captures)


def test_a_fresh_connection_that_gets_nothing_back_is_a_reset_not_retried(hostile):
    server = hostile({CHAT: once_per_connection(chat_stream())})
    user, kept = client(server.url)
    user.stream(MESSAGES)
    server.routes[CHAT] = lambda handler: setattr(handler, "close_connection", True)
    gevent.sleep(0.1)
    user.stream(MESSAGES)  # reused: dropped, retried once on a fresh connection, dropped again
    assert kept.error().startswith("reset:")
    assert len(server.requests_to(CHAT)) == 3


@pytest.mark.parametrize("kind", ["fast", "openai"])
def test_sse_comments_are_no_first_token(hostile, kind):
    server = hostile({CHAT: comments_only(0.05)})
    user, kept = client(server.url, kind, first_token_timeout=0.5, idle_timeout=0.3, request_timeout=20)
    started = time.monotonic()
    user.stream(MESSAGES)
    assert time.monotonic() - started < 10  # the first-token timeout, not the request timeout, ended it
    # what came is said truthfully (before: "no bytes from the server", after 0.5 s of keep-alives)
    said = {"fast": r"timeout_first_token: \d+ bytes from the server but no token \(SSE comments",
            "openai": r"timeout_first_token: no token from the server"}[kind]
    assert re.match(said, kept.error()), kept.error()


@pytest.mark.parametrize("kind", ["fast", "openai"])
def test_a_request_ends_at_done_whatever_follows(hostile, kind):
    server = hostile({CHAT: after_done(b"data: junk that came late\n\n", delay_s=3.0)})
    user, kept = client(server.url, kind)
    user.stream(MESSAGES)
    timing = kept.captures[-1].timing()
    assert kept.error() == "" and timing.done and timing.output_tokens == 4
    assert timing.e2e_ms < 3000  # the junk came 3 s after [DONE]: E2E ended before it


@pytest.mark.parametrize("kind", ["fast", "openai"])
def test_a_stream_kept_open_after_done_does_not_hold_the_user(hostile, kind):
    server = hostile({CHAT: after_done(None)})
    user, kept = client(server.url, kind, idle_timeout=20, request_timeout=30)
    started = time.monotonic()
    for _ in range(2):
        user.stream(MESSAGES)
    assert [kept.error(n) for n in range(2)] == ["", ""]
    assert time.monotonic() - started < 10  # not the idle timeout's 20 s
    # the open connection was left, not reused: the second request came on a new one
    assert len({s.peer for s in server.requests_to(CHAT)}) == 2


def test_done_then_the_end_of_the_body_in_its_own_write_keeps_the_connection(hostile):
    # how vLLM (uvicorn) ends a stream: the [DONE] chunk, then the zero-length chunk in a write of its own
    server = hostile({CHAT: after_done(b"")})
    user, kept = client(server.url)
    for _ in range(5):
        user.stream(MESSAGES)
        gevent.sleep(0.02)
    assert [kept.error(n) for n in range(5)] == [""] * 5
    assert len({s.peer for s in server.requests_to(CHAT)}) == 1


def _json_answer(handler) -> None:
    send(handler, 200, b'{"id": "c", "object": "chat.completion", "choices": []}', "application/json")


def _html_answer(handler) -> None:
    send(handler, 200, b"<html><body>Sign in</body></html>", "text/html; charset=utf-8")


def _gzip_stream(handler) -> None:
    chunked_head(handler, headers={"Content-Encoding": "gzip"})
    write_chunk(handler, gzip.compress(sse_events()))
    write_chunk(handler, b"")


@pytest.mark.parametrize("kind", ["fast", "openai"])
@pytest.mark.parametrize(("answer", "error"), [
    (_json_answer, "not_event_stream: content-type application/json"),
    (_html_answer, "not_event_stream: content-type text/html; charset=utf-8"),
    (_gzip_stream, "compressed: content-encoding gzip"),
])
def test_a_200_that_is_no_event_stream_is_named(hostile, kind, answer, error):
    server = hostile({CHAT: answer})
    user, kept = client(server.url, kind)
    user.stream(MESSAGES)
    assert kept.error() == error
    headers = {k.lower(): v for k, v in server.requests_to(CHAT)[-1].headers.items()}
    assert headers["accept-encoding"] == "identity"
