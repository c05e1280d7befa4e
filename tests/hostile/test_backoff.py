"""A server that asks its clients to slow down (429, 503) is heard: the user waits what Retry-After asks
(bounded), else a wait that doubles, before it sends again; the wait is in no request's latency and is
counted on the request it delayed. The user's client in this process, a refusing server on loopback.

Before: one user sent ~1,900 requests a second to a server asking it to wait 5 s, and 2,081 in 3 s to one
answering every request with a JSON 200 (no stream)."""

from __future__ import annotations

import time

import pytest

from tests.hostile.clients import MESSAGES, client
from tests.hostile.server import chat_stream, send

CHAT = "/v1/chat/completions"


def refuse(status: int, retry_after: str | None):
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return lambda handler: send(handler, status, b'{"error": {"message": "slow down"}}', "application/json",
                                headers)


def waits(kept, n: int) -> list[float]:
    """The seconds each of the first `n` requests was held back."""
    return [kept.captures[i].held_s for i in range(n)]


@pytest.mark.parametrize("kind", ["fast", "openai"])
def test_retry_after_is_honoured(hostile, kind):
    server = hostile({CHAT: refuse(429, "1")})
    user, kept = client(server.url, kind)
    started = time.monotonic()
    for _ in range(2):
        user.stream(MESSAGES)  # no think time: only the server's request holds it back
    assert time.monotonic() - started > 0.8  # the second went out a second after the first's answer
    assert [kept.error(n)[:8] for n in range(2)] == ["http_429"] * 2
    first, second = waits(kept, 2)
    assert first == 0.0 and 0.8 < second <= 1.0


def test_a_503_without_retry_after_is_answered_by_waits_that_double(hostile):
    server = hostile({CHAT: refuse(503, None)})
    user, kept = client(server.url)
    started = time.monotonic()
    for _ in range(3):
        user.stream(MESSAGES)
    assert time.monotonic() - started > 0.6
    held = waits(kept, 3)
    assert held[0] == 0.0 and 0.15 < held[1] <= 0.25 and 0.4 < held[2] <= 0.5


def test_the_wait_is_counted_on_the_request_it_delayed_not_in_its_latency(hostile):
    server = hostile({CHAT: refuse(429, "1")})
    user, kept = client(server.url)
    user.stream(MESSAGES)
    server.routes[CHAT] = chat_stream()
    user.stream(MESSAGES)
    after = kept.captures[-1]
    assert kept.error() == "" and after.held_s > 0.5
    assert after.timing().e2e_ms < 500  # its own time, from sending; the wait came before it
    user.stream(MESSAGES)
    assert kept.captures[-1].held_s == 0.0  # an answer ends the waits


@pytest.mark.parametrize("kind", ["fast", "openai"])
def test_a_200_that_is_no_stream_is_waited_for_as_a_503_is(hostile, kind):
    server = hostile({CHAT: lambda handler: send(handler, 200, b'{"choices": []}', "application/json")})
    user, kept = client(server.url, kind)
    for _ in range(3):
        user.stream(MESSAGES)
    assert [kept.error(n) for n in range(3)] == ["not_event_stream: content-type application/json"] * 3
    held = waits(kept, 3)
    assert held[0] == 0.0 and 0.15 < held[1] <= 0.25 and 0.4 < held[2] <= 0.5
