"""An answer's fingerprint in the request row (pure): a hash of the text, and marks that locate where two
answers of the same prompt first differ without keeping either text.

Speculative decoding with the standard verifier is lossless: at temperature 0 the candidate must answer
what the baseline answered, up to the numerical noise of batching. The rows carry `output_hash` (the whole
text) and `output_marks`: one character per `BLOCK_CHARS` characters of text, 6 bits of a running CRC-32 of
the text up to that block's end. Two answers' first differing mark is the block of their first difference
(a later one once in 64, when a differing block's mark agrees by chance). `output_hash_ws` is the hash of
the text with its whitespace normalised (every run of whitespace one space, none at the ends): two answers
that differ only in whitespace (a tokenizer's choice between "\n\n" and "\n" under a different batch) share
it, and the gate counts them apart from answers that changed.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable

BLOCK_CHARS = 16
MAX_MARKS = 256
"""4,096 characters are located; past them only the hash tells answers apart."""
# No `-`, `=`, `+` or `@`: a cell starting with one is written with a leading apostrophe (spreadsheets).
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def whitespace_hash(text: str) -> str:
    """output_hash_ws: the hash of the text with every run of whitespace one space, none at its ends."""
    return _digest(" ".join(text.split()))


def fingerprint(pieces: Iterable[str]) -> tuple[str, str]:
    """(output_hash, output_marks) of the text the pieces make, in order."""
    text = "".join(pieces)
    digest = _digest(text)
    crc = 0
    marks = []
    for start in range(0, min(len(text), BLOCK_CHARS * MAX_MARKS), BLOCK_CHARS):
        crc = zlib.crc32(text[start:start + BLOCK_CHARS].encode("utf-8", "surrogatepass"), crc)
        marks.append(_ALPHABET[crc & 63])
    return digest, "".join(marks)


def first_difference(a_marks: str, b_marks: str) -> int | None:
    """The character offset of the block where two different answers first differ, from their marks; None
    when their marks agree throughout (the difference lies past what the marks cover, or in the length of
    a last partial block)."""
    for i, (a, b) in enumerate(zip(a_marks, b_marks, strict=False)):
        if a != b:
            return i * BLOCK_CHARS
    if len(a_marks) != len(b_marks) and min(len(a_marks), len(b_marks)) < MAX_MARKS:
        return min(len(a_marks), len(b_marks)) * BLOCK_CHARS
    return None
