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
import time

import gevent
from locust import User, task

from locust_spec.client.client import Capture, ChatClient
from locust_spec.core.prompts import Prompt
from locust_spec.wiring.openloop import WAKE_EARLY_S
from locust_spec.wiring.run import SpecRun, run_of


class ChatClientUser(User):
    """A user with a measuring chat client (`self.client`, a `locust_spec.client.client.ChatClient`) and no
    task: subclass it to write your own tasks. Its connection is opened in on_start, ahead of the first
    request."""

    abstract = True
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
        if self.spec.open_loop:
            if type(self).wait_time is not ChatClientUser.wait_time:
                self.give_up(f"--rate: {type(self).__name__} sets its own wait_time, but in an open loop the "
                             "arrival schedule decides when a task starts: remove it")
            self.prepare()
            self.spec.user_prepared()
            gevent.sleep(self.wait_time())  # the first task waits for an arrival too

    def prepare(self) -> None:
        """Open loop: what to do once, before the first arrival, so that no arrival waits for it."""

    def wait_time(self) -> float:
        """Locust's pause before the next task. Closed loop: none, the next request follows the last. Open
        loop (`--rate`): until the next arrival of this process's share is due (wiring/openloop.py); the
        task's first request starts for it, and if it is already due, the row says how late it went out."""
        spec = self.spec
        if spec is None or not spec.open_loop or spec.arrivals is None or self.client is None:
            return 0.0
        arrival = spec.arrivals.take()
        self.client.arrival = arrival
        return max(arrival.intended_unix_s - time.time() - WAKE_EARLY_S, 0.0)

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

    def prepare(self) -> None:
        try:
            self.spec.fit_prompts(self.client.server)
        except RuntimeError as e:
            self.give_up(str(e))

    @task
    def chat(self) -> None:
        arrival = self.client.arrival
        if not self.spec.wait_turn(None if arrival is None else arrival.intended_unix_s):
            gevent.sleep(1.0)  # the design is over: the ladder stops the test
            return
        try:
            prompt = self.spec.prompt_for(arrival, self.client.server)
        except RuntimeError as e:
            self.give_up(str(e))
        self.send(prompt)

    def send(self, prompt: Prompt) -> Capture:
        """Send one of the run's prompts, read its stream to the end and hand it on; never raises but on
        stop. A prompt with later turns (SpecBench's `turns`, a ShareGPT conversation) is a conversation:
        each turn is one request and one row (`ID`, then `ID#2`, ...), carrying the model's own answers so
        far; a failed turn ends it (its row says why; the next turn would be another conversation)."""
        fields = {"max_tokens": prompt.max_tokens} if prompt.max_tokens else {}
        capture = self.client.stream(prompt.messages, name=prompt.cls, prompt_id=prompt.id, **fields)
        messages = list(prompt.messages)
        for turn, text in enumerate(prompt.followups, 2):
            if capture.error:
                break
            messages += [{"role": "assistant", "content": capture.reply()}, {"role": "user", "content": text}]
            capture = self.client.stream(messages, name=prompt.cls, prompt_id=f"{prompt.id}#{turn}", **fields)
        return capture
