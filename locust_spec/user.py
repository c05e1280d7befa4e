"""ChatCompletionUser: a Locust user whose `client` streams chat completions and measures each one.

The built-in task sends the run's prompts one after another. A locustfile can add its own tasks on the
same client (see locustfiles/multiturn.py):

    class Agent(ChatCompletionUser):
        @task
        def ask(self):
            reply = self.client.stream([{"role": "user", "content": "hi"}], name="greeting", max_tokens=32)
            ...  # reply.reply() is the assistant's text; its row and Locust events are already on the way
"""

from __future__ import annotations

import math

import gevent
from locust import User, constant, task

from locust_spec.client import Capture, ChatClient
from locust_spec.prompts import Prompt
from locust_spec.run import run_of


class ChatCompletionUser(User):
    """One streaming `POST /v1/chat/completions` per task, on one connection opened in on_start.

    Subclass it in a locustfile (or use it as is) to change `wait_time` or add tasks; `self.client` is a
    `locust_spec.client.ChatClient`.
    """

    abstract = True
    wait_time = constant(0)
    client: ChatClient | None = None

    def on_start(self) -> None:
        self.run = run_of(self.environment)
        try:
            self.client = self.run.client(self.host or "")
        except RuntimeError as e:
            self.run.give_up(str(e))
            gevent.sleep(math.inf)  # until the quit that give_up started stops this user
        self.client.connect()

    def on_stop(self) -> None:
        if self.client is not None:
            self.client.close()

    @task
    def chat(self) -> None:
        self.send(self.run.sampler.next())

    def send(self, prompt: Prompt) -> Capture:
        """Send one of the run's prompts, read its stream to the end and hand it on; never raises but on
        stop."""
        fields = {"max_tokens": prompt.max_tokens} if prompt.max_tokens else {}
        return self.client.stream(prompt.messages, name=prompt.cls, prompt_id=prompt.id, **fields)
