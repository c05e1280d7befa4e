"""The request body a client sends: the run's settings, the caller's fields, `--max-tokens` as a cap."""

from __future__ import annotations

from dataclasses import replace

import pytest

from locust_spec.client.client import chat_body
from locust_spec.client.settings import RequestSettings
from locust_spec.core.max_tokens import DEFAULT_MAX_TOKENS

SETTINGS = RequestSettings(model="m", max_tokens=DEFAULT_MAX_TOKENS, max_tokens_cap=None, temperature=0.0,
                           ignore_eos=False, response_format=None, client="fast", request_timeout=600.0,
                           connect_timeout=10.0, first_token_timeout=120.0, idle_timeout=60.0)
HI = ({"role": "user", "content": "hi"},)


def capped(cap: int) -> RequestSettings:
    return replace(SETTINGS, max_tokens=cap, max_tokens_cap=cap)


def test_without_a_cap_a_prompts_own_max_tokens_wins_else_the_default():
    assert chat_body(SETTINGS, HI, True, {"max_tokens": 512})["max_tokens"] == 512
    assert chat_body(SETTINGS, HI, True, {})["max_tokens"] == DEFAULT_MAX_TOKENS


@pytest.mark.parametrize(("own", "sent"), [(None, 64), (200, 64), (32, 32)])
def test_max_tokens_caps_every_request_its_prompts_own_included(own, sent):
    fields = {"max_tokens": own} if own else {}
    assert chat_body(capped(64), HI, True, fields)["max_tokens"] == sent


def test_the_callers_fields_are_sent_as_given_and_the_stream_is_measured():
    body = chat_body(SETTINGS, HI, False, {"tools": [{"type": "function"}], "temperature": 0.7})
    assert body["tools"] == [{"type": "function"}] and body["temperature"] == 0.7
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert list(body)[:6] == ["model", "messages", "max_tokens", "temperature", "stream", "stream_options"]
