"""ChatCompletionUser: sends streaming chat completions and hands each finished stream to the plugin."""

from __future__ import annotations

import contextlib
import math
import time

import gevent
import orjson
from gevent import GreenletExit
from locust import User, constant, task

from locust_spec import plugin
from locust_spec.prompts import Prompt
from locust_spec.transport import (
    Arrivals,
    BodyRefused,
    Connection,
    Endpoint,
    RequestTimeout,
    StreamFailure,
    request_bytes,
    sdk_saw_done,
    with_timeout,
)

CHAT_PATH = "/chat/completions"
# A refused connect fails at once: without a pause each user would record thousands of failures a second
# while a server is down, swamping the failure rate and the rows. Doubling from 50 ms, capped at 1 s.
CONNECT_BACKOFF_S = (0.05, 1.0)
CONNECT_FAILURES = ("connect", "timeout_connect")


class ChatCompletionUser(User):
    """One streaming `POST /v1/chat/completions` per task, on one connection opened in on_start.

    Subclass it in a locustfile (or use it as is) to change `wait_time` or add tasks.
    """

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        self._plugin = plugin.get(self.environment)
        self._endpoint = Endpoint(self.host or "")
        self._conn = None
        self._backoff = 0.0
        try:
            self._settings = self._plugin.settings(self.host)
        except RuntimeError as e:
            self._plugin.give_up(str(e))
            gevent.sleep(math.inf)  # until the quit that give_up started stops this user
        self._sdk = self._plugin.openai_client(self.host) if self._settings.client == "openai" else None
        self._conn = Connection(self._endpoint, self._settings.connect_timeout)
        if self._sdk is None:
            # on failure the first request retries the connect and records why it failed
            with contextlib.suppress(StreamFailure):
                self._conn.connect()

    def on_stop(self) -> None:
        if self._conn is not None:
            self._conn.close()

    @task
    def chat(self) -> None:
        self.send(self._plugin.sampler.next())

    def body(self, prompt: Prompt, continuous_usage: bool) -> dict:
        s = self._settings
        body: dict = {
            "model": s.model,
            "messages": list(prompt.messages),
            "max_tokens": prompt.max_tokens or s.max_tokens,
            "temperature": s.temperature,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}
            if continuous_usage else {"include_usage": True},
        }
        if s.ignore_eos:
            body["ignore_eos"] = True
        if s.response_format is not None:
            body["response_format"] = s.response_format
        return body

    def send(self, prompt: Prompt) -> None:
        """Send one prompt, read its stream to the end and hand it on; never raises but on stop."""
        level = self._plugin.level()
        started = plugin.Started(prompt, level.users, level.in_warmup(time.time()))
        connect_failed = False
        try:
            with with_timeout(self._settings.request_timeout):
                if self._sdk is not None:
                    self._send_sdk(prompt, started)
                else:
                    self._send_fast(prompt, started)
        except StreamFailure as e:
            started.error = str(e)
            connect_failed = e.kind in CONNECT_FAILURES
        except RequestTimeout:
            self._conn.close()
            started.error = f"timeout_request: over {self._settings.request_timeout:g} s"
        except GreenletExit:
            started.error = "interrupted: test stopped"
            started.end = time.perf_counter()
            self._plugin.submit(started)
            raise
        started.end = time.perf_counter()
        self._plugin.submit(started)
        lo, hi = CONNECT_BACKOFF_S
        self._backoff = min(max(self._backoff * 2, lo), hi) if connect_failed else 0.0
        if self._backoff:
            gevent.sleep(self._backoff)

    def _send_fast(self, prompt: Prompt, started: plugin.Started) -> None:
        s = self._settings
        host = self.host or ""
        for continuous in (self._plugin.continuous_usage(host), False):
            request = request_bytes(self._endpoint, CHAT_PATH, orjson.dumps(self.body(prompt, continuous)),
                                    self._plugin.api_key)
            started.arrivals = Arrivals()
            try:
                status, error_body = self._conn.stream(request, started.arrivals, s.first_token_timeout,
                                                       s.idle_timeout, s.max_line_bytes, s.max_response_bytes)
            finally:
                started.start_unix, started.start = self._conn.start_unix, self._conn.start
            if status == 200:
                return
            if status == 400 and continuous and b"continuous_usage_stats" in error_body:
                self._plugin.reject_continuous_usage(host)
                continue
            raise StreamFailure(f"http_{status}", _short(error_body))

    def _send_sdk(self, prompt: Prompt, started: plugin.Started) -> None:
        import openai

        body = self.body(prompt, self._plugin.continuous_usage(self.host or ""))
        body.pop("stream")
        extra = {"stream_options": body.pop("stream_options")}
        for key in ("ignore_eos",):
            if key in body:
                extra[key] = body.pop(key)
        started.objects = []
        started.start_unix, started.start = time.time(), time.perf_counter()
        try:
            stream = self._sdk.chat.completions.create(stream=True, extra_body=extra, **body)
            for chunk in stream:
                started.objects.append((time.perf_counter(), chunk))
        except BodyRefused as e:
            raise StreamFailure(e.kind, e.detail) from None
        except openai.APIStatusError as e:
            raise StreamFailure(f"http_{e.status_code}", _short(str(e.message).encode())) from None
        except openai.APITimeoutError:
            raise StreamFailure("timeout_idle" if started.objects else "timeout_first_token") from None
        except openai.APIConnectionError as e:
            raise StreamFailure("reset", str(e)) from None
        except openai.APIError as e:  # an error object in the stream
            raise StreamFailure("server_error", _short(str(e.message).encode())) from None
        except (ValueError, TypeError, AttributeError, KeyError) as e:  # the SDK could not read a chunk
            raise StreamFailure("malformed_sse", f"the SDK failed on a chunk ({type(e).__name__})") from None
        started.sdk_done = sdk_saw_done(stream)


def _short(body: bytes, limit: int = 120) -> str:
    """A one-line excerpt of an error body, preferring the server's error message."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text[:limit]
