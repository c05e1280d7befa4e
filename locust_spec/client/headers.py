"""Header values made from what a user configured (the API key, a metrics token).

A secret mounted from a file (a Kubernetes secret, `$(cat key)`) often ends with a newline: surrounding
whitespace is stripped. A control character left inside would end the header line and start another (CR/LF
in a raw request head is request splitting) and makes http.client raise an error that prints the value:
such a value is refused, in one line that says where it came from and never shows it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


class HeaderValueError(ValueError):
    """A configured value that cannot go into a header; the message names its source, never the value."""


def credential(value: str, what: str) -> str:
    """`value` (`what`: where it came from, e.g. "--api-key") without surrounding whitespace;
    HeaderValueError when a control or non-ASCII character is left in it."""
    value = value.strip()
    if value.isascii() and value.isprintable():  # the one check a good value pays for
        return value
    for position, char in enumerate(value, 1):
        if not char.isascii():
            raise HeaderValueError(f"{what} holds a character that is not ASCII (character {position}); "
                                   "no header can carry it")
        if not char.isprintable():
            raise HeaderValueError(f"{what} holds a control character such as a line break (character "
                                   f"{position}); a header cannot carry it: remove it")
    return value


def bearer(token: str, what: str) -> str:
    """The `Authorization` value for `token` (see `credential`)."""
    return f"Bearer {credential(token, what)}"


def credential_type(what: str) -> Callable[[str], str]:
    """An option's `type` for a credential (`credential`): a bad one is a one-line usage error that never
    shows it (argparse prints the value with a plain ValueError)."""

    def parse(text: str) -> str:
        try:
            return credential(text, what)
        except HeaderValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse
