"""When a user sends again after its server refused it: the wait, from what the refusal was (pure).

A server that answers 429 (too many requests) or 503 (unavailable) asks its clients to slow down, often
saying for how long (`Retry-After`); a refused connection says nobody is there. A user that sent again at
once would record thousands of failures a second while the server is down or shedding load, so a 5 s
outage reads as a run of failures, and it would add to the overload it measures. Instead the user waits
before its next request: what Retry-After asks (bounded), else a wait that doubles while the refusals go
on. An answer that refuses every request alike comes back as fast and is waited for the same way: a 200
that is no event stream (a JSON completion, a proxy's page) or is compressed, a 401, 403 or 404 (the
credential, the path, the model); one user had sent 2,081 requests in 3 s to a server answering JSON. A
500 or a 400 may be that request's alone (its prompt): the next one goes out at once. The wait belongs to
no request's latency; it is counted apart (recording/budget.py: the time users were held back at each
level, in the summary), since the server then saw fewer users than the level's.
"""

from __future__ import annotations

import email.utils
import math
from datetime import timezone

from locust_spec.core.runfiles import CONNECT_FAILURES, ErrorKind, http_error

CONNECT_BACKOFF_S = (0.05, 1.0)
"""A refused connect: doubling from 50 ms, capped at 1 s (the server may be back any moment)."""
SERVER_BACKOFF_S = (0.25, 10.0)
"""A 429 or 503 without Retry-After: doubling from 250 ms, capped at 10 s."""
RETRY_AFTER_MAX_S = 60.0
"""Retry-After is honoured up to this: a run's levels last minutes, and a server asking for more is down."""
SLOW_DOWN = frozenset({http_error(429), http_error(503)})
REFUSED_ALIKE = frozenset({ErrorKind.NOT_EVENT_STREAM.value, ErrorKind.COMPRESSED.value,
                           *(http_error(status) for status in (401, 403, 404))})
"""Answers every request would get: waited for as a 429 without Retry-After is."""
_CONNECT = frozenset(kind.value for kind in CONNECT_FAILURES)


def retry_after_s(value: str | None, now_unix: float) -> float | None:
    """The seconds a Retry-After header asks for: delay-seconds or an HTTP date (RFC 9110 10.2.3), never
    negative; None when absent or unreadable."""
    text = (value or "").strip()
    if not text:
        return None
    if len(text) <= 12 and text.isascii() and text.replace(".", "", 1).isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp() - now_unix
    return max(0.0, seconds) if math.isfinite(seconds) else None


def next_wait(previous_s: float, kind: str | None, retry_after: float | None) -> float:
    """Seconds to wait before the next request, after one that ended as `kind` (a row's error kind:
    `http_429`, `connect`, ...; None when it did not fail), `previous_s` the wait before it."""
    if kind in SLOW_DOWN or kind in REFUSED_ALIKE:
        lo, hi = SERVER_BACKOFF_S
        if retry_after is not None and kind in SLOW_DOWN:
            return min(max(retry_after, lo), RETRY_AFTER_MAX_S)
    elif kind in _CONNECT:
        lo, hi = CONNECT_BACKOFF_S
    else:
        return 0.0
    return min(max(previous_s * 2, lo), hi)
