"""Locust users whose `client` streams chat completions and measures each one.

ChatCompletionUser's built-in task sends the run's prompts one after another. ChatClientUser has the same
client and no task, for a locustfile's own tasks (see locustfiles/multiturn.py):

    class Agent(ChatClientUser):
        @task
        def ask(self):
            reply = self.client.stream([{"role": "user", "content": "hi"}], name="greeting", max_tokens=32)
            ...  # reply.reply() is the assistant's text; its row and Locust events are already on the way
"""

from __future__ import annotations

import math

import gevent
from locust import User, constant, task

from locust_spec.client.client import Capture, ChatClient
from locust_spec.core.prompts import Prompt
from locust_spec.wiring.run import SpecRun, run_of


class ChatClientUser(User):
    """A user with a measuring chat client (`self.client`, a `locust_spec.client.client.ChatClient`) and no
    task: subclass it to write your own tasks. Its connection is opened in on_start, ahead of the first
    request."""

    abstract = True
    wait_time = constant(0)
    client: ChatClient | None = None
    spec: SpecRun | None = None
    """The run this user belongs to (its prompt sampler, settings, level)."""

    def on_start(self) -> None:
        self.spec = run_of(self.environment)
        try:
            self.client = self.spec.client(self.host or "")
        except RuntimeError as e:
            self.give_up(str(e))
        self.client.connect()

    def give_up(self, message: str) -> None:
        """Nothing can be measured (no model to ask for, no prompt that fits): the run quits, exit code 2."""
        self.spec.give_up(message)
        gevent.sleep(math.inf)  # until the quit that give_up started stops this user

    def on_stop(self) -> None:
        if self.client is not None:
            self.client.close()


class ChatCompletionUser(ChatClientUser):
    """One streaming `POST /v1/chat/completions` per task, a prompt of the run's prompt sets each.

    Subclass it in a locustfile (or use it as is) to change `wait_time` or add tasks.
    """

    abstract = True

    @task
    def chat(self) -> None:
        if not self.spec.wait_turn():
            gevent.sleep(1.0)  # the design is over: the ladder stops the test
            return
        try:
            prompt = self.spec.next_prompt(self.client.server)
        except RuntimeError as e:
            self.give_up(str(e))
        self.send(prompt)

    def send(self, prompt: Prompt) -> Capture:
        """Send one of the run's prompts, read its stream to the end and hand it on; never raises but on
        stop."""
        fields = {"max_tokens": prompt.max_tokens} if prompt.max_tokens else {}
        return self.client.stream(prompt.messages, name=prompt.cls, prompt_id=prompt.id, **fields)
