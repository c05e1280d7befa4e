"""The max_tokens a request is sent with, decided in one place (pure): the request body (client/client.py),
the context checks that leave out what cannot fit (client/context.py through RequestSettings) and spec-ab's
preflight (ab/preflight.py) all ask `effective_max_tokens`, so what is checked is what is sent."""

from __future__ import annotations

DEFAULT_MAX_TOKENS = 256
"""A request's max_tokens when neither it (its prompt, its task's body) nor the run (`--max-tokens`) says."""


def effective_max_tokens(own: int | None, cap: int | None, default: int = DEFAULT_MAX_TOKENS) -> int:
    """What a request asks for: its own max_tokens (a prompt's `max_tokens`, a task's body field), else the
    run's `--max-tokens` (`cap`), else `default`; never above the cap."""
    value = own if own is not None else cap if cap is not None else default
    return min(value, cap) if cap is not None else value
