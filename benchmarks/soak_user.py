"""benchmarks/soak.py's user with a think time: the built-in chat task, then $SOAK_THINK_S seconds idle (its
kept-alive connection idle too, as a server's keep-alive timeout sees it)."""

import os

from locust import constant

from locust_spec import ChatCompletionUser


class ThinkingUser(ChatCompletionUser):
    wait_time = constant(float(os.environ.get("SOAK_THINK_S", "0")))
