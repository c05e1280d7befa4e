"""When a user sends again after a refusal: Retry-After read as RFC 9110 says (seconds or a date) and
bounded; without it a wait that doubles while the refusals go on; nothing after any other outcome."""

from __future__ import annotations

import pytest

from locust_spec.client.backoff import RETRY_AFTER_MAX_S, next_wait, retry_after_s

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("value", "seconds"), [
    ("5", 5.0), (" 120 ", 120.0), ("1.5", 1.5), ("0", 0.0),
    ("Fri, 15 Jan 2027 08:00:10 GMT", 10.0),  # an HTTP date 10 s after NOW
    ("Fri, 15 Jan 2027 07:59:00 GMT", 0.0),  # in the past: no wait
    (None, None), ("", None), ("soon", None), ("-3", None), ("1e400", None), ("nan", None),
    ("9" * 400, None), ("５", None),
])
def test_retry_after_is_seconds_or_a_date(value, seconds):
    assert retry_after_s(value, NOW) == seconds


def test_a_429_or_503_waits_what_retry_after_asks_within_bounds():
    assert next_wait(0.0, "http_429", 5.0) == 5.0
    assert next_wait(0.0, "http_503", 3600.0) == RETRY_AFTER_MAX_S
    assert next_wait(0.0, "http_429", 0.0) == 0.25  # "at once" from a server that just refused: not at once


def test_without_retry_after_the_wait_doubles_to_a_cap_and_ends_with_the_refusals():
    waits = [0.0]
    for _ in range(8):
        waits.append(next_wait(waits[-1], "http_503", None))
    assert waits[1:] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert next_wait(10.0, None, None) == 0.0
    assert next_wait(10.0, "http_500", None) == 0.0  # a server error is no request to slow down


def test_a_refused_connect_waits_from_50_ms_to_1_s():
    assert [next_wait(w, "connect", None) for w in (0.0, 0.05, 0.8)] == [0.05, 0.1, 1.0]
    assert next_wait(0.0, "timeout_connect", None) == 0.05


@pytest.mark.parametrize("kind", ["not_event_stream", "compressed", "http_401", "http_403", "http_404"])
def test_an_answer_every_request_would_get_is_waited_for_as_a_503_without_retry_after(kind):
    """Before: no wait after a JSON 200 (one user sent 2,081 requests in 3 s)."""
    assert [next_wait(w, kind, None) for w in (0.0, 0.25, 8.0)] == [0.25, 0.5, 10.0]
    assert next_wait(0.0, kind, 30.0) == 0.25  # Retry-After is a 429's or a 503's to give


@pytest.mark.parametrize("kind", ["http_400", "http_413", "http_422", "timeout_first_token", "no_done"])
def test_a_failure_of_that_request_alone_sends_the_next_at_once(kind):
    assert next_wait(0.0, kind, None) == 0.0
