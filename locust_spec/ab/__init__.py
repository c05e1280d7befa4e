"""spec-ab: the A/B sweep's command, its preflight, child processes, progress display and prompt priming."""

# Locust first, as inside Locust: its gevent patches before anything else is imported (spec-ab's threads,
# sockets), and the plugin's options registered (spec-ab checks its Locust command lines in-process).
from locust_spec import plugin  # noqa: E402, F401
