"""Where a host is, as far as an address tells: on this machine (loopback) or not (pure)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether an address is reachable from this machine only ("" and "*" mean every interface)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def on_this_machine(url: str) -> bool:
    """Whether a server URL points at this machine's loopback (the server then shares its cores)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host is not None and is_loopback(host)
