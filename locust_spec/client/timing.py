"""Pure timing math: one request's timestamped SSE events -> RequestTiming (TTFT, ITL, TPOT, E2E)."""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np

from locust_spec.client.sse import Chunk, Done, Event, Malformed, completed
from locust_spec.core.answers import fingerprint, whitespace_hash

SORT_MAX = 4096
"""Percentiles of a sample this long or shorter are read off its sorted copy (a stream's ITLs: a few
hundred values); a longer one (a stream of a million chunks) would hold the event loop for a sort of
hundreds of ms."""


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """What one streamed request measured. Times in float ms; None where undefined.

    `itl_ms` holds one value per token after the first token chunk (a chunk with n tokens after a
    gap g gives n values g/n); `chunk_gaps_ms` one value per token-carrying chunk after the first.
    `tokens_estimated` is True when some chunk's token count came from its text, not from usage.
    `error` is what the stream itself reported (malformed event, server error object, no [DONE]).
    `output_hash`, `output_marks`, `output_hash_ws`: the answer's fingerprint (core/answers.py), of whatever
    text arrived.
    `merged_chunks`: token chunks after the first that arrived in the same read as the one before them (the
    same stamp): the client read late, or they came within the reader's gather window (client/mux.py), or
    something on the way held the stream back and let it go at once. Their gap reads 0 and the gap before
    them counts the time of both.
    """

    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float
    output_tokens: int
    prompt_tokens: int | None
    tokens_estimated: bool
    chunks: int
    max_tokens_per_chunk: int
    finish_reason: str | None
    itl_ms: tuple[float, ...]
    chunk_gaps_ms: tuple[float, ...]
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    chunk_gap_p50_ms: float | None
    spec_accepted_tokens: int | None
    spec_draft_tokens: int | None
    done: bool
    error: str | None
    output_hash: str | None = None
    output_marks: str | None = None
    output_hash_ws: str | None = None
    merged_chunks: int = 0


def request_timing(start: float, events: Sequence[tuple[float, Event]], end: float) -> RequestTiming:
    """Compute a request's timing from `perf_counter` seconds: `start` just before the request bytes
    went out, each event's arrival, and `end` when the stream stopped (ended, failed or was cut)."""
    return completed(timing_slices(start, events, end, len(events) or 1))


def timing_slices(start: float, events: Sequence[tuple[float, Event]], end: float, every: int
                  ) -> Generator[None, None, RequestTiming]:
    """`request_timing`, `every` events at a time: a generator that yields between slices (its caller may
    let others run there) and returns the timing."""
    prev_cum = 0
    first_t = last_t = None
    output_counted = 0
    usage_total: int | None = None
    prompt_tokens = None
    estimated = False
    chunks = max_per_chunk = merged = 0
    finish_reason = None
    accepted = drafted = None
    done = False
    error = None
    itl: list[float] = []
    gaps: list[float] = []
    texts: list[str] = []
    for lo in range(0, len(events), every):
        if lo:
            yield
        # Runs once per chunk of every request: plain comparisons and type() checks, no max() or
        # isinstance().
        for t, chunk in events[lo:lo + every]:
            kind = type(chunk)
            if kind is not Chunk:
                if kind is Done:
                    done = True
                    break
                if kind is Malformed:
                    error = error or f"malformed_sse: {chunk.reason}"
                continue
            if chunk.error is not None:
                error = error or f"server_error: {chunk.error}"
                continue
            cum = chunk.completion_tokens
            if cum is not None and (usage_total is None or cum > usage_total):
                usage_total = cum
            if chunk.prompt_tokens is not None:
                prompt_tokens = chunk.prompt_tokens
            if chunk.spec_draft_tokens is not None:
                accepted, drafted = chunk.spec_accepted_tokens, chunk.spec_draft_tokens
            if chunk.finish_reason:
                finish_reason = chunk.finish_reason
            if not chunk.has_choices:
                continue
            if chunk.text:
                texts.append(chunk.text)
            if cum is not None:
                n = cum - prev_cum  # a count that went down carries no token and leaves the high mark
                if n <= 0:
                    continue
                prev_cum = cum
            elif chunk.text_chars:
                n = 1
                estimated = True
            else:
                continue
            chunks += 1
            output_counted += n
            if n > max_per_chunk:
                max_per_chunk = n
            if first_t is None:
                first_t = t
            else:
                if t == last_t:
                    merged += 1
                gap = (t - last_t) * 1000.0
                gaps.append(gap)
                if n == 1:
                    itl.append(gap)
                else:
                    itl.extend([gap / n] * n)
            last_t = t
        if done:
            break
    if error is None and not done:
        error = "no_done: stream ended without [DONE]"
    output_tokens = output_counted if usage_total is None else max(usage_total, output_counted)
    ttft = (first_t - start) * 1000.0 if first_t is not None else None
    tpot = None
    if first_t is not None and output_tokens > 1:
        tpot = (last_t - first_t) * 1000.0 / (output_tokens - 1)
    sliced = len(events) > every  # a huge stream: its percentiles take a slice each
    if sliced:
        yield
    itl_p50, itl_p99 = _percentiles(itl, 50, 99)
    if sliced:
        yield
    gap_p50 = percentile(gaps, 50)
    if sliced:
        yield
    output_hash, output_marks = fingerprint(texts)
    output_hash_ws = whitespace_hash("".join(texts))
    return RequestTiming(
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=(end - start) * 1000.0,
        output_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
        tokens_estimated=estimated,
        chunks=chunks,
        max_tokens_per_chunk=max_per_chunk,
        finish_reason=finish_reason,
        itl_ms=tuple(itl),
        chunk_gaps_ms=tuple(gaps),
        itl_p50_ms=itl_p50,
        itl_p99_ms=itl_p99,
        chunk_gap_p50_ms=gap_p50,
        spec_accepted_tokens=accepted,
        spec_draft_tokens=drafted,
        done=done,
        error=error,
        output_hash=output_hash,
        output_marks=output_marks,
        output_hash_ws=output_hash_ws,
        merged_chunks=merged,
    )


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Linear-interpolated percentile of a small sample (numpy's default method); None when empty."""
    return _percentiles(values, pct)[0]


def _percentiles(values: Sequence[float], *pcts: float) -> list[float | None]:
    """Several percentiles of one sample, sorted once; past SORT_MAX values only the ranks needed are
    found (numpy's partition, linear), the interpolation the same."""
    n = len(values)
    if not n:
        return [None] * len(pcts)
    ranks = [(n - 1) * pct / 100.0 for pct in pcts]
    if n <= SORT_MAX:
        ordered = sorted(values)
    else:
        needed = sorted({i for rank in ranks for i in (math.floor(rank), min(math.floor(rank) + 1, n - 1))})
        ordered = np.partition(np.asarray(values, dtype=np.float64), needed)
    return [float(_ranked(ordered, rank)) for rank in ranks]


def _ranked(ordered: Sequence[float], rank: float) -> float:
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)
