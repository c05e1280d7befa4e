"""Streaming chat load with the server-metrics scraper: what a user's locustfile with both looks like."""

import locust_spec.recording.scraper  # noqa: F401  (registers the --metrics-* options and listeners)
from locust_spec import ChatCompletionUser


class ChatUser(ChatCompletionUser):
    pass
