"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment.

Importing the package registers the plugin with Locust (its options and its listeners, plugin.py), whatever
module a locustfile imports first; `from locust_spec import ChatCompletionUser` is the usual way in.
"""

from locust_spec import plugin  # noqa: F401  (the plugin's Locust listeners)
from locust_spec.wiring.user import ChatClientUser, ChatCompletionUser

__all__ = ["ChatClientUser", "ChatCompletionUser"]
