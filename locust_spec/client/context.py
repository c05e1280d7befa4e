"""Prompts that cannot fit the server's context: found before the run sends them, left out with one warning.

vLLM refuses (HTTP 400) a request whose prompt tokens plus `max_tokens` exceed the model's `max_model_len`
(from GET /v1/models); sending it anyway would fail at every level of a sweep. Prompt tokens come from the
server's own tokenizer (vLLM's `POST /tokenize`, chat template included) when it has one; otherwise from a
lower bound, so that only prompts that surely do not fit are left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from locust_spec.client.server_api import get_json, post_json
from locust_spec.client.transport import Endpoint
from locust_spec.core.prompts import Prompt

BYTES_PER_TOKEN_MAX = 8
"""Longer than almost any tokenizer's tokens: bytes / 8 never counts more tokens than the server will."""
TEMPLATE_TOKENS_MAX = 32
"""A chat template's tokens per message (role headers) at most, plus as many once for the reply's header."""


@dataclass(frozen=True)
class TooLong:
    prompt: Prompt
    tokens: int
    max_tokens: int


def _text_bytes(prompt: Prompt) -> int:
    return sum(len(str(m.get("content") or "").encode()) for m in prompt.messages)


def upper_bound(prompt: Prompt) -> int:
    """Prompt tokens at most: a byte-level tokenizer never makes more tokens than bytes, plus the template."""
    return _text_bytes(prompt) + TEMPLATE_TOKENS_MAX * (len(prompt.messages) + 1)


def lower_bound(prompt: Prompt) -> int:
    """Prompt tokens at least, with no tokenizer at hand."""
    return math.ceil(_text_bytes(prompt) / BYTES_PER_TOKEN_MAX)


def too_long(prompts: Iterable[Prompt], max_model_len: int, max_tokens: Callable[[int | None], int],
             count: Callable[[Prompt], int]) -> list[TooLong]:
    """The prompts whose tokens (`count`) plus the max_tokens they are sent with exceed `max_model_len`;
    `count` is asked only about prompts whose upper bound does not fit already."""
    out = []
    for prompt in prompts:
        asked = max_tokens(prompt.max_tokens)
        if upper_bound(prompt) + asked <= max_model_len:
            continue
        tokens = count(prompt)
        if tokens + asked > max_model_len:
            out.append(TooLong(prompt, tokens, asked))
    return out


def warning(found: list[TooLong], total: int, max_model_len: int, counted: bool) -> str:
    how = ("counted by the server's /tokenize" if counted else
           f"estimated without a /tokenize endpoint (at least one token per {BYTES_PER_TOKEN_MAX} bytes), "
           "so prompts that may still not fit are sent")
    worst = max(found, key=lambda f: f.tokens)
    return (f"{len(found)} of {total} prompts left out: prompt plus max_tokens exceeds the server's "
            f"max_model_len {max_model_len} (e.g. {worst.prompt.id}: {worst.tokens} prompt tokens + "
            f"{worst.max_tokens}); prompt tokens {how}")


def server_max_model_len(host: str, api_key: str, model: str, timeout: float) -> int | None:
    """`max_model_len` of `model` in GET /v1/models (vLLM's extension); None when not there or unreadable.
    Both calls here carry the key: they go through server_api, which keeps it with the host's origin."""
    try:
        entries = get_json(host, "/models", api_key, timeout)["data"]
        found = next((e for e in entries if e.get("id") == model), None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    value = found.get("max_model_len") if isinstance(found, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def server_counter(host: str, api_key: str, model: str, timeout: float) -> Callable[[Prompt], int] | None:
    """Prompt tokens by the server's `POST /tokenize` (at the server's root, next to /v1); None when the
    server has none (a probe with one message fails)."""
    endpoint = Endpoint(host)
    scheme = "https" if endpoint.ssl else "http"
    url = f"{scheme}://{endpoint.host_header}{endpoint.api_base[: -len('/v1')]}/tokenize"

    def count(prompt: Prompt) -> int:
        answer = post_json(url, {"model": model, "messages": list(prompt.messages),
                                 "add_generation_prompt": True}, api_key, timeout)
        value = answer.get("count") if isinstance(answer, dict) else None
        if not isinstance(value, int):
            raise ValueError("no count in the /tokenize answer")
        return value

    try:
        count(Prompt("probe", "probe", ({"role": "user", "content": "hi"},), None))
    except (OSError, ValueError, AttributeError):
        return None
    return count
