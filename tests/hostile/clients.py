"""Load clients in this process, as a user holds them: `client(url)` streams to a hostile server and keeps
each finished request (its Capture) instead of handing it to a processor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from locust_spec.client.client import (
    Capture,
    ChatClient,
    FastChatClient,
    OpenAIChatClient,
    Server,
    openai_sdk,
)
from locust_spec.client.settings import RequestSettings
from locust_spec.core.level import LevelBoard

MESSAGES = [{"role": "user", "content": "hi"}]


@dataclass
class Kept:
    """What a test's client handed on: each finished request, in order."""

    captures: list[Capture] = field(default_factory=list)

    def error(self, n: int = -1) -> str:
        """The row's error of request `n`, as the processor would write it ("" when ok)."""
        capture = self.captures[n]
        timing = capture.timing()
        return capture.error or (timing.error if timing is not None else None) or ""


def settings(kind: str = "fast", **timeouts: float) -> RequestSettings:
    values = {"request_timeout": 30.0, "connect_timeout": 5.0, "first_token_timeout": 10.0,
              "idle_timeout": 10.0, **timeouts}
    return RequestSettings(model="hostile-model", max_tokens=8, max_tokens_cap=None, temperature=0.0,
                           ignore_eos=False, response_format=None, client=kind, **values)


def client(url: str, kind: str = "fast", api_key: str = "", submit: Callable[[Capture], None] | None = None,
           **timeouts: float) -> tuple[ChatClient, Kept]:
    """A user's client for `url` (`kind` fast or openai) and what it hands on (also to `submit`)."""
    s = settings(kind, **timeouts)
    sdk = openai_sdk(url, api_key, s) if kind == "openai" else None
    kept = Kept()

    def hand_on(capture: Capture) -> None:
        kept.captures.append(capture)
        if submit is not None:
            submit(capture)

    cls = OpenAIChatClient if kind == "openai" else FastChatClient
    return cls(Server(url, s, api_key, sdk=sdk), LevelBoard(lambda: 1), hand_on), kept
