"""What every request of a run is sent with: the client's settings, resolved once from the plugin's options
(wiring/options.py fills them; the client only reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from locust_spec.client.transport import MAX_LINE_BYTES, MAX_RESPONSE_BYTES
from locust_spec.core.max_tokens import effective_max_tokens


@dataclass(frozen=True)
class RequestSettings:
    """What every request of the run is sent with, resolved once from the options."""

    model: str
    max_tokens: int
    """For a request that does not set its own."""
    max_tokens_cap: int | None
    """`--max-tokens`: no request asks for more, whatever its prompt says."""
    temperature: float
    ignore_eos: bool
    response_format: dict | None
    client: str
    request_timeout: float
    connect_timeout: float
    first_token_timeout: float
    idle_timeout: float
    max_line_bytes: int = MAX_LINE_BYTES
    max_response_bytes: int = MAX_RESPONSE_BYTES

    def max_tokens_for(self, own: int | None) -> int:
        """What a request asks for (core/max_tokens.py): its own max_tokens (else the default), never above
        the cap."""
        return effective_max_tokens(own, self.max_tokens_cap, self.max_tokens)
