"""Plain (non-streamed) calls to an OpenAI-compatible server: its model list, and priming its prefix cache."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson

from locust_spec.prompts import Prompt
from locust_spec.transport import Endpoint


def api_url(host: str, path: str) -> str:
    endpoint = Endpoint(host)
    scheme = "https" if endpoint.ssl else "http"
    return f"{scheme}://{endpoint.host_header}{endpoint.api_base}{path}"


def _request(url: str, api_key: str, body: bytes | None = None) -> urllib.request.Request:
    request = urllib.request.Request(url, data=body)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    return request


def first_model(host: str, api_key: str, timeout: float) -> str:
    """The first model id of GET /v1/models; RuntimeError with one line (never the key) when unreadable."""
    try:
        with urllib.request.urlopen(_request(api_url(host, "/models"), api_key), timeout=timeout) as r:
            return orjson.loads(r.read())["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise RuntimeError(f"cannot read the model from {host}/v1/models ({e}); pass --model") from None


def prime_body(prompt: Prompt, model: str) -> bytes:
    """One token per prompt: the server prefills (and caches) the prompt and decodes almost nothing."""
    return orjson.dumps({"model": model, "messages": list(prompt.messages), "max_tokens": 1,
                         "temperature": 0, "stream": False})


@dataclass(frozen=True)
class PrimeResult:
    sent: int
    failed: int
    first_error: str | None


def prime(host: str, prompts: Iterable[Prompt], model: str, api_key: str = "", concurrency: int = 8,
          timeout: float = 120.0) -> PrimeResult:
    """Send every prompt once, so the server's prefix cache holds them all before measuring.

    Without it an A/B comparison on a finite prompt set is biased: the faster arm has sent more prompts
    by the time a level starts, so more of its prefills are cache hits and it looks faster still.
    """
    url = api_url(host, "/chat/completions")

    def send(prompt: Prompt) -> str | None:
        request = _request(url, api_key, prime_body(prompt, model))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                r.read()
            return None
        except OSError as e:
            return f"{prompt.id}: {e}"

    todo = list(prompts)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        errors = [e for e in pool.map(send, todo) if e is not None]
    return PrimeResult(sent=len(todo), failed=len(errors), first_error=errors[0] if errors else None)
