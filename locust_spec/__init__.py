"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment.

Importing this package registers the plugin's Locust options and listeners.
"""

from locust_spec import level, options, plugin, scraper  # noqa: F401  (imported for their Locust listeners)
from locust_spec.user import ChatCompletionUser

__all__ = ["ChatCompletionUser"]
