"""Real text at a trace row's length: the prompt a trace row (core/traces.py) is sent as.

Peers fill a trace's prompts with random tokens, which makes speculative acceptance meaningless; here each
prompt is cut from real text, a corpus (the built-in prompt sets' text by default), in blocks of
`block_tokens`. Block i of a row with `hash_ids` is the text its id i names, so rows sharing a prefix of ids
share that prefix of text, and the server's prefix cache sees what the trace recorded; blocks past a row's
ids, and every block of a row without ids (Azure, BurstGPT), are the row's own. Where a block starts in the
corpus follows from the seed and its id (blake2b, not Python's salted `hash`), so every process, on every
machine, builds the same bytes from the same seed; distinct ids start at distinct places (a permutation of
the corpus's bytes), so text is shared only where the trace says. Lengths are counted as the project
estimates tokens with no tokenizer at hand: 4 bytes of UTF-8 a token (ab/preflight.py's `estimated_tokens`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

from locust_spec.core.formats import Prompt
from locust_spec.core.prompts import load_prompt_set
from locust_spec.core.traces import TraceRow

BYTES_PER_TOKEN = 4
DEFAULT_BLOCK_TOKENS = 512
"""Mooncake's and Bailian's hash_ids name blocks of 512 tokens."""
TRACE_CLASS = "trace"


@dataclass(frozen=True)
class Corpus:
    """The text prompts are cut from, as UTF-8 bytes."""

    text: bytes

    def __post_init__(self) -> None:
        if len(self.text) < BYTES_PER_TOKEN * DEFAULT_BLOCK_TOKENS:
            raise ValueError(f"a trace corpus needs at least {BYTES_PER_TOKEN * DEFAULT_BLOCK_TOKENS} "
                             f"bytes of text, not {len(self.text)}")

    @classmethod
    def of(cls, prompts: Iterable[Prompt]) -> Corpus:
        """Every message's text of `prompts` (each turn), in order, a blank line between them."""
        parts = [str(m.get("content") or "") for p in prompts for m in p.messages]
        parts += [turn for p in prompts for turn in p.followups]
        return cls("\n\n".join(part for part in parts if part).encode())

    def place(self, seed: int, number: int) -> int:
        """Where block `number` starts: (a * number + b) mod the corpus's length, a and b drawn from the
        seed and a prime to the length, so numbers less than the length apart never start at one place (no
        two of a trace's ids share text by chance)."""
        size = len(self.text)
        digest = hashlib.blake2b(f"{seed}".encode(), digest_size=16).digest()
        a, b = 1 + int.from_bytes(digest[:8], "big") % (size - 1), int.from_bytes(digest[8:], "big")
        while math.gcd(a, size) != 1:
            a += 1
        return (a * number + b) % size

    def scattered(self, key: str) -> int:
        """A place drawn from `key` alone (a row's own block after its first)."""
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % len(self.text)

    def cut(self, start: int, size: int) -> bytes:
        """`size` bytes of the corpus from `start`, running on from its start past its end."""
        out = self.text[start:start + size]
        while len(out) < size:
            out += self.text[:size - len(out)]
        return out


def builtin_corpus() -> Corpus:
    """The built-in prompt sets' text (prompts/), every set."""
    return Corpus.of(load_prompt_set("all"))


def block_starts(row: TraceRow, corpus: Corpus, seed: int, blocks: int) -> list[int]:
    """Where each of a row's blocks is cut from. Block i < len(hash_ids) is its id's place, shared by every
    row naming the id; a row's first block without an id is numbered -(1 + its index), its own; its later
    own blocks follow a first block no other row has, so a place drawn from the row and block will do."""
    def start(i: int) -> int:
        if i < len(row.hash_ids):
            return corpus.place(seed, row.hash_ids[i])
        if i == 0:
            return corpus.place(seed, -1 - row.index)
        return corpus.scattered(f"{seed}:row:{row.index}:{i}")

    return [start(i) for i in range(blocks)]


def trace_prompt(row: TraceRow, corpus: Corpus, seed: int = 0,
                 block_tokens: int = DEFAULT_BLOCK_TOKENS) -> Prompt:
    """The prompt row `row` is sent as: one user message of about `row.input_tokens` tokens (4 bytes each; at
    least one) of real text, `max_tokens` its output tokens."""
    if block_tokens < 1:
        raise ValueError(f"a trace block is at least one token, not {block_tokens}")
    total = max(row.input_tokens, 1) * BYTES_PER_TOKEN
    block = block_tokens * BYTES_PER_TOKEN
    starts = block_starts(row, corpus, seed, -(-total // block))
    text = b"".join(corpus.cut(start, min(block, total - i * block)) for i, start in enumerate(starts))
    # a block may start or end inside a character: its partial bytes go, the same in every row that shares it
    content = text.decode("utf-8", errors="ignore")
    return Prompt(f"{TRACE_CLASS}-{row.index}", TRACE_CLASS, ({"role": "user", "content": content},),
                  row.output_tokens)
