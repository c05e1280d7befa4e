"""Streaming chat-completion load: `locust -f locustfiles/chat.py --host http://HOST:PORT --prompts code`."""

from locust_spec import ChatCompletionUser


class ChatUser(ChatCompletionUser):
    pass
