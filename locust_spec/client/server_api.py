"""Plain (non-streamed) calls to an OpenAI-compatible server: its model list and version, and priming its
prefix cache."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import orjson

from locust_spec.client import http_fetch
from locust_spec.client.headers import HeaderValueError, bearer
from locust_spec.client.transport import Endpoint
from locust_spec.core.prompts import Prompt


def api_url(host: str, path: str) -> str:
    endpoint = Endpoint(host)
    scheme = "https" if endpoint.ssl else "http"
    return f"{scheme}://{endpoint.host_header}{endpoint.api_base}{path}"


def root_url(host: str, path: str) -> str:
    """A path beside the API, not under /v1 (vLLM's GET /version)."""
    return api_url(host, "").removesuffix("/v1") + path


# Bytes of an error answer read for its message: enough for any server's one-line reason.
MAX_ERROR_BYTES = 4096
# Bytes of a JSON answer (a model list): real ones are a few kB; a runaway body is refused, not held.
MAX_JSON_BYTES = 4 * 1024 * 1024


class CallError(OSError):
    """A call that failed; the text is one line with the server's own reason when it sent one."""


def status_of(exc: BaseException) -> int | None:
    return exc.code if isinstance(exc, urllib.error.HTTPError) else None


def server_message(body: bytes) -> str:
    """The reason inside an error body: OpenAI's `error.message`, FastAPI's `detail`, else the text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        found = error.get("message") if isinstance(error, dict) else error
        found = found or data.get("message") or data.get("detail")
        if found:
            return " ".join(str(found).split())[:300]
    return " ".join(body.decode("utf-8", "replace").split())[:300]


def error_text(exc: BaseException) -> str:
    """One line for a failed call: the HTTP status with the server's reason (e.g. a 400's), or the network
    error (connection refused, timed out)."""
    if isinstance(exc, urllib.error.HTTPError):
        try:
            message = server_message(exc.read(MAX_ERROR_BYTES))
        except OSError:
            message = ""
        return f"HTTP {exc.code}: {message or exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args, **_kwargs) -> None:
        return None  # the 3xx is the answer (an HTTPError): the key never follows it anywhere


NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)
"""urllib's opener for calls that carry the API key (the preflight's streamed probe)."""


def request(url: str, api_key: str, body: bytes | None = None) -> urllib.request.Request:
    """A urllib request carrying the key; HeaderValueError (one line, never the key) when it cannot."""
    request = urllib.request.Request(url, data=body)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", bearer(api_key, "the API key"))
    return request


# An answer to max_tokens 1 is a few hundred bytes.
PRIME_MAX_BYTES = 1024 * 1024


def _call(url: str, api_key: str, timeout: float, max_bytes: int, body: bytes | None = None) -> bytes:
    """The body of a 200 answer within one deadline and a byte cap (http_fetch: the key goes to `url`'s
    origin only); CallError with the status and the server's reason for any other."""
    try:
        headers = {"Authorization": bearer(api_key, "the API key")} if api_key else {}
        resp = http_fetch.request(url, deadline_s=timeout, max_bytes=max_bytes, body=body, headers=headers)
    except (http_fetch.FetchError, http_fetch.UrlError, HeaderValueError) as e:
        raise CallError(str(e)) from None
    if resp.status != 200:
        message = server_message(resp.body[:MAX_ERROR_BYTES])
        raise CallError(f"HTTP {resp.status}: {message}" if message else f"HTTP {resp.status}")
    return resp.body


def get_json(host: str, path: str, api_key: str, timeout: float) -> object:
    """GET HOST/v1{path} as JSON; CallError (one line, the server's reason, never the key) on failure."""
    return _json(_call(api_url(host, path), api_key, timeout, MAX_JSON_BYTES))


def post_json(url: str, body: object, api_key: str, timeout: float) -> object:
    """POST `body` as JSON to `url`, its answer as JSON; CallError as get_json."""
    return _json(_call(url, api_key, timeout, MAX_JSON_BYTES, orjson.dumps(body)))


def _json(body: bytes) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise CallError("the answer is not JSON") from None


def first_model(host: str, api_key: str, timeout: float) -> str:
    """The first model id of GET /v1/models; RuntimeError with one line (never the key) when unreadable.

    Only a server that answers without a model gets the `--model` hint: naming the model does not make a
    dead server answer."""
    try:
        return get_json(host, "/models", api_key, timeout)["data"][0]["id"]
    except CallError as e:
        raise RuntimeError(f"cannot read the model from {host}/v1/models ({e})") from None
    except (KeyError, IndexError, TypeError) as e:
        raise RuntimeError(f"cannot read the model from {host}/v1/models (no model listed: {e!r}); "
                           "pass --model") from None


# A /v1/models listing can name hundreds of LoRA adapters; the run's record keeps the first ones, and no
# more of a name than a real one needs (a path on the server, a hub id).
MAX_MODELS = 16
MAX_NAME_CHARS = 300


def served_models(host: str, api_key: str, timeout: float) -> list[dict]:
    """The models GET /v1/models lists, as vLLM describes them: id, root (what was loaded) and
    max_model_len, each None where the server does not say; CallError (one line) when unreadable."""
    data = get_json(host, "/models", api_key, timeout)
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise CallError("no model list in the answer")

    def field(entry: dict, key: str, kind: type) -> object:
        value = entry.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return None
        return value[:MAX_NAME_CHARS] if isinstance(value, str) else value

    return [{"id": field(m, "id", str), "root": field(m, "root", str),
             "max_model_len": field(m, "max_model_len", int)}
            for m in listed[:MAX_MODELS] if isinstance(m, dict)]


def server_version(host: str, api_key: str, timeout: float) -> str | None:
    """vLLM's GET /version (`{"version": "0.32.0"}`); None where the server has no such route."""
    body = _call(root_url(host, "/version"), api_key, timeout, MAX_ERROR_BYTES)
    try:
        version = orjson.loads(body).get("version")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return version[:100] if isinstance(version, str) else None


def check_model(host: str, api_key: str, model: str, timeout: float) -> None:
    """RuntimeError with one line when the server lists its models (GET /v1/models) and `model` is not
    among them: every request would be refused (vLLM: 404), thousands a second. A server that does not
    list them, or does not answer yet, is not judged here: its requests say what is wrong."""
    try:
        listed = [entry["id"] for entry in get_json(host, "/models", api_key, timeout)["data"]]
    except (CallError, KeyError, IndexError, TypeError):
        return
    if model in listed:
        return
    # a hostile list stays one short line
    shown = ", ".join(repr(" ".join(str(m).split())[:80]) for m in listed[:5]) or "no model"
    more = f" and {len(listed) - 5} more" if len(listed) > 5 else ""
    raise RuntimeError(f"{host} does not serve the model {model!r} (GET /v1/models lists {shown}{more}); "
                       "pass --model with one of them, or leave it out for the first")


def prime_body(prompt: Prompt, model: str) -> bytes:
    """One token per prompt: the server prefills (and caches) the prompt and decodes almost nothing."""
    return orjson.dumps({"model": model, "messages": list(prompt.messages), "max_tokens": 1,
                         "temperature": 0, "stream": False})


@dataclass(frozen=True)
class PrimeResult:
    sent: int
    failed: int
    first_error: str | None


T = TypeVar("T")
R = TypeVar("R")


def each_until(call: Callable[[T], R], items: Sequence[T], workers: int,
               stop: threading.Event | None = None) -> list[R]:
    """`call` on every item on `workers` threads, the results of those done in the items' order; once `stop`
    is set no item is started. The threads are daemons and the wait for them is interruptible: a Ctrl-C
    reaches the caller at once (who sets `stop`), and the process exits without waiting for a call in
    flight (ThreadPoolExecutor joins its threads at exit: priming went on 25 s after a Ctrl-C, deaf to a
    second one). The first exception a call raises is raised here once the threads are done."""
    results: list[tuple[int, R]] = []
    failures: list[BaseException] = []
    queue = iter(enumerate(items))
    lock = threading.Lock()

    def work() -> None:
        while stop is None or not stop.is_set():
            with lock:
                nxt = next(queue, None)
            if nxt is None or failures:
                return
            try:
                results.append((nxt[0], call(nxt[1])))
            except BaseException as exc:  # handed to the caller's thread as it is
                failures.append(exc)
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(workers, len(items))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [result for _, result in sorted(results, key=lambda pair: pair[0])]


def prime(host: str, prompts: Iterable[Prompt], model: str, api_key: str = "", concurrency: int = 8,
          timeout: float = 120.0, stop: threading.Event | None = None) -> PrimeResult:
    """Send every prompt once, so the server's prefix cache holds them all before measuring; once `stop` is
    set, no further prompt (`sent` counts those that went).

    Without it an A/B comparison on a finite prompt set is biased: the faster arm has sent more prompts
    by the time a level starts, so more of its prefills are cache hits and it looks faster still.
    """
    url = api_url(host, "/chat/completions")

    def send(prompt: Prompt) -> str | None:
        try:
            _call(url, api_key, timeout, PRIME_MAX_BYTES, prime_body(prompt, model))
            return None
        except CallError as e:
            return f"{prompt.id}: {e}"

    outcomes = each_until(send, list(prompts), concurrency, stop)
    errors = [e for e in outcomes if e is not None]
    return PrimeResult(sent=len(outcomes), failed=len(errors), first_error=errors[0] if errors else None)


def answer_body(prompt: Prompt, model: str, max_tokens: int, ignore_eos: bool, temperature: float) -> bytes:
    """The first turn of a prompt as the run sends it, answered whole (not streamed): the self-check."""
    body = {"model": model, "messages": list(prompt.messages), "max_tokens": max_tokens,
            "temperature": temperature, "stream": False}
    if ignore_eos:
        body["ignore_eos"] = True
    return orjson.dumps(body)


def answer_text(payload: object) -> str:
    """A chat completion's answer as the stream's fingerprint reads it: reasoning, then content."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices and \
        isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise CallError("no message in the answer")
    parts = (message.get("reasoning_content"), message.get("reasoning"), message.get("content"))
    return "".join(p for p in parts if isinstance(p, str))


# A whole answer of a few thousand tokens, with room for its JSON.
ANSWER_MAX_BYTES = 4 * 1024 * 1024


def answer(host: str, body: bytes, api_key: str, timeout: float) -> str:
    """POST one chat completion (answer_body) and return its text; CallError (one line) on failure."""
    return answer_text(_json(_call(api_url(host, "/chat/completions"), api_key, timeout, ANSWER_MAX_BYTES,
                                   body)))
