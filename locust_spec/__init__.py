"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment.

`from locust_spec import ChatCompletionUser` registers the plugin's Locust options and listeners. The pure
modules (`counters`, `exposition`, ...) import without Locust, so `spec-verdict` does not pull in gevent.
"""

__all__ = ["ChatCompletionUser"]


def __getattr__(name: str):
    if name == "ChatCompletionUser":
        # imported for their Locust listeners
        from locust_spec import distributed, guard, level, options, plugin, scraper, summary, webui  # noqa: F401
        from locust_spec.user import ChatCompletionUser

        return ChatCompletionUser
    raise AttributeError(f"module 'locust_spec' has no attribute {name!r}")
