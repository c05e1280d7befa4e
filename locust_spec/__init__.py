"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment.

Importing this package registers the plugin's Locust options and listeners.
"""

# imported for their Locust listeners
from locust_spec import distributed, level, options, plugin, scraper, summary, webui  # noqa: F401
from locust_spec.user import ChatCompletionUser

__all__ = ["ChatCompletionUser"]
