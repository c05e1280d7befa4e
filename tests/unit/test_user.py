"""The users without a Locust process: a real Environment and SpecRun, the user's task called directly,
against the replay server (real captured vLLM bytes) on loopback; what it sent is in the replay's log."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from locust import task
from locust.argument_parser import parse_options
from locust.env import Environment
from locust.event import Events

from locust_spec import ChatClientUser, ChatCompletionUser
from locust_spec.wiring.run import SpecRun, attach
from tests.support import PY, REPO, free_port, wait_http

PROMPTS = ('{"id": "a", "class": "code", "prompt": "def f(x):", "max_tokens": 40}\n'
           '{"id": "b", "class": "chat", "prompt": "Say hello."}\n')


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    port, log = free_port(), tmp / "sent.jsonl"
    proc = subprocess.Popen([PY, "-m", "tests.replay", "--port", str(port), "--time-scale", "0.01",
                             "--send-log", str(log)], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", proc=proc)
    yield url, log
    proc.terminate()
    proc.wait(10)


class Chat(ChatCompletionUser):
    pass


class TwoTurns(ChatClientUser):
    @task
    def talk(self) -> None:
        history = [{"role": "user", "content": "first question"}]
        first = self.client.stream(history, name="turns", prompt_id="1", max_tokens=8, tools=[])
        history += [{"role": "assistant", "content": first.reply()}, {"role": "user", "content": "more"}]
        self.client.stream(history, name="turns", prompt_id="2")


def start(tmp_path, url: str, user_class: type, *extra: str):
    (tmp_path / "p.jsonl").write_text(PROMPTS)
    options = parse_options(["-f", "x.py", "--host", url, "--prompts", str(tmp_path / "p.jsonl"),
                             "--csv", str(tmp_path / "run"), *extra])
    env = Environment(user_classes=[user_class], parsed_options=options, host=url, events=Events())
    fired: list[dict] = []
    env.events.request.add_listener(lambda **kw: fired.append(kw))
    run = attach(env, SpecRun.for_environment(env))
    user = user_class(env)
    user.host = url  # what Locust's runner does with --host as it spawns a user
    user.on_start()
    return run, user, fired


def finish(run: SpecRun, user, tmp_path) -> list[dict]:
    user.on_stop()
    run.stop()
    run.close()
    with (tmp_path / "run_requests.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def sent(log, n: int) -> list[dict]:
    return [json.loads(line)["body"] for line in log.read_text().splitlines()][-n:]


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_the_built_in_task_sends_each_prompt_and_measures_it(tmp_path, replay, client):
    url, log = replay
    run, user, fired = start(tmp_path, url, Chat, "--client", client)
    for _ in range(2):
        user.chat()
    rows = finish(run, user, tmp_path)
    bodies = sent(log, 2)
    assert sorted(r["prompt_id"] for r in rows) == ["a", "b"]
    assert all(not r["error"] and r["output_tokens"] == "200" for r in rows)
    by_id = {r["prompt_id"]: r for r in rows}
    for body in bodies:
        prompt = "a" if body["messages"][0]["content"] == "def f(x):" else "b"
        assert body["max_tokens"] == (40 if prompt == "a" else 256)  # the prompt's own, else the default
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert by_id[prompt]["prompt_class"] == ("code" if prompt == "a" else "chat")
    assert sorted(e["request_type"] for e in fired) == ["E2E", "E2E", "TPOT", "TPOT", "TTFT", "TTFT"]


def test_a_task_of_its_own_carries_the_reply_and_body_fields_and_is_measured_alike(tmp_path, replay):
    url, log = replay
    run, user, fired = start(tmp_path, url, TwoTurns, "--max-tokens", "20")
    user.talk()
    rows = finish(run, user, tmp_path)
    first, second = sent(log, 2)
    assert first["tools"] == [] and first["max_tokens"] == 8 and second["max_tokens"] == 20
    reply = second["messages"][1]
    assert reply["role"] == "assistant" and len(reply["content"]) > 100
    assert [(r["prompt_class"], r["prompt_id"], r["error"]) for r in rows] == [("turns", "1", ""),
                                                                            ("turns", "2", "")]
    assert [e["request_type"] for e in fired] == ["TTFT", "TPOT", "E2E"] * 2


def test_max_tokens_caps_a_prompts_own(tmp_path, replay):
    url, log = replay
    run, user, _ = start(tmp_path, url, Chat, "--max-tokens", "30")
    for _ in range(2):
        user.chat()
    finish(run, user, tmp_path)
    assert sorted(body["max_tokens"] for body in sent(log, 2)) == [30, 30]
