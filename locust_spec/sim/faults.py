"""Faults on demand: per-request decisions drawn from a seeded generator, so runs are reproducible."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class FaultConfig:
    """Rates (0..1) of each fault, and the stall's length and where it starts."""

    http_500: float = 0.0
    http_429: float = 0.0
    reset: float = 0.0
    malformed: float = 0.0
    stall: float = 0.0
    no_done: float = 0.0
    stall_seconds: float = 30.0
    stall_at_token: int = 1
    retry_after_s: int = 1


@dataclass(frozen=True)
class RequestFaults:
    """What goes wrong with one request: an error status, or a misbehaving stream at a given chunk."""

    status: int = 0
    reset_after_chunks: int = -1
    malformed_at_chunk: int = -1
    stall: bool = False
    no_done: bool = False


def draw(cfg: FaultConfig, rng: random.Random) -> RequestFaults:
    """Decide one request's faults; each fault is an independent draw at its own rate."""
    if rng.random() < cfg.http_500:
        return RequestFaults(status=500)
    if rng.random() < cfg.http_429:
        return RequestFaults(status=429)
    return RequestFaults(
        reset_after_chunks=rng.randint(1, 4) if rng.random() < cfg.reset else -1,
        malformed_at_chunk=rng.randint(1, 4) if rng.random() < cfg.malformed else -1,
        stall=rng.random() < cfg.stall,
        no_done=rng.random() < cfg.no_done,
    )
