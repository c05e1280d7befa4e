"""A small word-piece tokenizer whose vocabulary and corpus come from Python's own standard library."""

from __future__ import annotations

import functools
import re
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Modules whose source (code, comments and prose docstrings) is the corpus: shipped with every CPython,
# so the vocabulary and the Markov chain are the same on every machine with the same Python version.
CORPUS_MODULES = (
    "argparse.py", "textwrap.py", "difflib.py", "dataclasses.py", "string.py", "pprint.py",
    "json/__init__.py", "json/decoder.py", "json/encoder.py", "csv.py", "random.py", "fractions.py",
)
VOCAB_SIZE = 6000
# Characters outside the vocabulary get ids above this, so any text round-trips.
CHAR_BASE = 1_000_000
_PIECE = re.compile(r" ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\n| +(?! )|\s")


@dataclass(frozen=True)
class Tokenizer:
    """Greedy word-piece tokenizer: a known pre-split piece is one token, else its longest known prefixes."""

    pieces: tuple[str, ...]
    ids: dict[str, int]
    max_piece: int

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        ids = self.ids
        for piece in _PIECE.findall(text):
            tok = ids.get(piece)
            if tok is not None:
                out.append(tok)
            else:
                out.extend(self._split(piece))
        return out

    def _split(self, piece: str) -> list[int]:
        out = []
        i = 0
        while i < len(piece):
            for j in range(min(len(piece), i + self.max_piece), i, -1):
                tok = self.ids.get(piece[i:j])
                if tok is not None:
                    out.append(tok)
                    i = j
                    break
            else:
                out.append(CHAR_BASE + ord(piece[i]))
                i += 1
        return out

    def decode_one(self, tok: int) -> str:
        return chr(tok - CHAR_BASE) if tok >= CHAR_BASE else self.pieces[tok]

    def decode(self, toks: list[int]) -> str:
        return "".join(self.decode_one(t) for t in toks)


def corpus_text() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return "\n".join((stdlib / name).read_text(encoding="utf-8") for name in CORPUS_MODULES)


def build_tokenizer(text: str, size: int = VOCAB_SIZE) -> Tokenizer:
    counts = Counter(_PIECE.findall(text))
    chars = sorted({c for c in text if c.isprintable()} | {"\n", " "})
    frequent = [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if len(p) > 1]
    pieces = tuple(chars + frequent[: max(0, size - len(chars))])
    return Tokenizer(pieces, {p: i for i, p in enumerate(pieces)}, max(len(p) for p in pieces))


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[Tokenizer, tuple[int, ...]]:
    """The shared tokenizer and the corpus as token ids (built once per process, ~0.3 s)."""
    text = corpus_text()
    tok = build_tokenizer(text)
    return tok, tuple(tok.encode(text))
