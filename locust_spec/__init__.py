"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment.

Inside Locust (a locustfile importing any module of the package, Locust itself imported first) the package
registers the plugin: its options and its listeners (plugin.py). `from locust_spec import ChatCompletionUser`
is the usual way in, and registers it too. The package's own commands (spec-sim, spec-ab, spec-verdict,
spec-tune) do not import Locust at all unless they use it: importing it (and its gevent patches) cost each
of them about a second at start.
"""

import sys

__all__ = ["ChatClientUser", "ChatCompletionUser"]

if "locust" in sys.modules:
    from locust_spec import plugin  # noqa: F401  (the plugin's Locust listeners)


def __getattr__(name: str):
    if name in __all__:
        from locust_spec import plugin  # noqa: F401
        from locust_spec.wiring import user

        return getattr(user, name)
    raise AttributeError(f"module 'locust_spec' has no attribute {name!r}")
