"""A run's levels cut into blocks of time: the units its intervals resample (docs/verdict-method.md).

Under an interleaved or simultaneous design (the run's PREFIX_design.json) the blocks are the design's:
a request belongs to the level and block its start falls in (by the shared clock, not by the row's
`level_users` or `level_rate`, which the ladder updates up to a second late), and the run's warm-up at a
level is the start of its first block there. A run without a design (sequential, or older than designs)
has its level's measured window (first measured start to last end) cut into blocks of `BLOCK_S` or longer.

Each block has a window: the seconds it measured, and the output tokens that arrived in it, every
request of the level spreading its tokens evenly from its first token to its end. Throughput is then
tokens over seconds of the arm's own windows, so a request running past its block's end counts where
its tokens arrived, the same way on every arm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from locust_spec.core.design import DEFAULT_BLOCK_S, Design

from .model import Rate

BLOCK_S = DEFAULT_BLOCK_S
MAX_BLOCKS = 100
"""A long level without a design is cut into at most this many blocks (longer ones when it is long)."""


@dataclass(frozen=True, eq=False)
class LevelBlocks:
    """One run's level: its measured rows with the block of each, and per block its group (the key that
    pairs it with other arms' blocks: (level index, group) under a design), measured seconds and the
    output tokens (all, and of requests meeting the SLO) that arrived in its window."""

    users: float
    """The level: its users, or its rate (open loop)."""
    rows: np.ndarray
    block: np.ndarray
    groups: tuple[tuple[int, int], ...]
    window_s: np.ndarray
    tokens: np.ndarray
    good_tokens: np.ndarray | None
    designed: bool
    starts: np.ndarray
    """Each block's window start (unix s); it ends `window_s` later."""
    in_flight_s: np.ndarray | None = None
    """Designed runs: per block the request-seconds the arm had in flight inside its window (all its
    requests), so in_flight_s / window_s is the concurrency its server saw there."""
    request_s: float | None = None
    """Designed runs: the request-seconds of all the level's requests, inside its windows or not."""

    @property
    def spill_share(self) -> float | None:
        """The share of the level's request time outside the arm's own windows: requests that ran on
        after their block ended, at a falling concurrency (and the warm-up)."""
        if self.in_flight_s is None or not self.request_s:
            return None
        return max(0.0, 1.0 - float(self.in_flight_s.sum()) / self.request_s)


@dataclass(frozen=True, eq=False)
class RunBlocks:
    """Per row the level it is measured at (its users or rate; -1: not measured), and each level's
    blocks."""

    level_key: np.ndarray
    levels: dict[float, LevelBlocks]


def level_keys(frame: pd.DataFrame) -> tuple[np.ndarray, type]:
    """Each row's level as a number, its rate on a rate run (open loop) else its users, and the type that
    makes a number a level (Rate, int). runs.py has checked that a run holds one kind."""
    if "level_rate" in frame and frame["level_rate"].notna().any():
        return frame["level_rate"].to_numpy(dtype=np.float64), Rate
    return frame["level_users"].to_numpy(dtype=np.float64), int


def interrupted(frame: pd.DataFrame) -> np.ndarray:
    """Rows cut off by the run's stop (their server may well have finished them)."""
    error = frame["error"].cat
    return error.codes.isin(np.flatnonzero(error.categories.astype(str).str.startswith("interrupted"))
                            ).to_numpy()


def arrived_by(times: np.ndarray, first: np.ndarray, end: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Tokens arrived by each of `times`: each request's tokens spread evenly from its first token to its
    end (all at the end when those coincide). One sort, O((rows + times) log rows)."""
    tokens = np.nan_to_num(tokens)
    if not len(first):
        return np.zeros(len(times))
    # Relative to the first arrival: unix seconds times a rate would cancel away the sum's precision.
    ref = float(first.min())
    first, end, times = first - ref, end - ref, np.asarray(times) - ref
    span = end - first
    rate = np.where(span > 0, tokens / np.where(span > 0, span, 1.0), 0.0)
    point = np.where(span > 0, 0.0, tokens)
    a_order, e_order = np.argsort(first), np.argsort(end)
    a_sorted, e_sorted = first[a_order], end[e_order]

    def cum(order: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(values[order])])

    ia = np.searchsorted(a_sorted, times, side="right")
    ie = np.searchsorted(e_sorted, times, side="right")
    rate_started, rate_ended = cum(a_order, rate)[ia], cum(e_order, rate)[ie]
    ra_started, ra_ended = cum(a_order, rate * first)[ia], cum(e_order, rate * first)[ie]
    done = cum(e_order, rate * span + point)[ie]
    return done + times * (rate_started - rate_ended) - (ra_started - ra_ended)


def _arrivals(frame: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start = frame["start_unix_s"].to_numpy(dtype=np.float64)[rows]
    ttft = np.nan_to_num(frame["ttft_ms"].to_numpy(dtype=np.float64)[rows]) / 1000.0
    e2e = frame["e2e_ms"].to_numpy(dtype=np.float64)[rows] / 1000.0
    e2e = np.where(np.isnan(e2e), ttft, e2e)
    return start + np.minimum(ttft, e2e), start + e2e, frame["output_tokens"].to_numpy(dtype=np.float64)[rows]


def _window_tokens(frame: pd.DataFrame, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   good: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    first, end, tokens = _arrivals(frame, rows)
    edges = np.concatenate([starts, ends])

    def per_window(weights: np.ndarray) -> np.ndarray:
        by = arrived_by(edges, first, end, weights)
        return by[len(starts):] - by[:len(starts)]

    return per_window(tokens), (None if good is None else per_window(np.where(good[rows], tokens, 0.0)))


def _designed(frame: pd.DataFrame, design: Design, good: np.ndarray | None) -> RunBlocks:
    start = frame["start_unix_s"].to_numpy(dtype=np.float64)
    ends = start + np.nan_to_num(frame["e2e_ms"].to_numpy(dtype=np.float64)) / 1000.0
    elapsed = start - design.clock_unix_s
    index = np.floor(elapsed / design.stage_s)
    inside = (elapsed >= 0) & (index < len(design.levels))
    level_index = np.where(inside, index, -1).astype(np.int64)
    ok = ~interrupted(frame)
    level_key = np.full(len(frame), -1.0)
    parts: dict[float, list] = {}
    for li, step in enumerate(design.steps):
        users = float(step)
        own = design.own_blocks(li)
        warm = design.warmup_until(li)
        b_start = np.array([max(b.start_unix_s, warm) for b in own])
        b_end = np.array([b.end_unix_s for b in own])
        at_level = np.flatnonzero(level_index == li)
        rows = at_level[(start[at_level] >= warm) & ok[at_level]]
        # A request belongs to the last of this arm's blocks started by then (one sent a few ms after
        # its block's end, between the gate and the stamp, stays in its block).
        block = np.searchsorted(np.array([b.start_unix_s for b in own]), start[rows], side="right") - 1
        keep = block >= 0
        rows, block = rows[keep], block[keep]
        level_key[rows] = users
        tokens, good_tokens = _window_tokens(frame, at_level, b_start, b_end, good)
        by = arrived_by(np.concatenate([b_start, b_end]), start[at_level], ends[at_level],
                        ends[at_level] - start[at_level])
        parts.setdefault(users, []).append((rows, block, tuple((li, b.group) for b in own), b_end - b_start,
                                            tokens, good_tokens, b_start, by[len(own):] - by[:len(own)],
                                            float((ends[at_level] - start[at_level]).sum())))
    return RunBlocks(level_key, {users: _merged(users, p, True) for users, p in parts.items()})


def _merged(users: float, parts: list, designed: bool) -> LevelBlocks:
    """Levels of the same user count or rate (a ladder that comes back to one) as one set of blocks."""
    offsets = np.cumsum([0] + [len(p[2]) for p in parts])
    goods = [p[5] for p in parts]
    return LevelBlocks(
        users, np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] + off for p, off in zip(parts, offsets, strict=False)]),
        tuple(g for p in parts for g in p[2]), np.concatenate([p[3] for p in parts]),
        np.concatenate([p[4] for p in parts]),
        None if any(g is None for g in goods) else np.concatenate(goods), designed,
        np.concatenate([p[6] for p in parts]), np.concatenate([p[7] for p in parts]),
        sum(p[8] for p in parts))


def _timed(frame: pd.DataFrame, good: np.ndarray | None) -> RunBlocks:
    start = frame["start_unix_s"].to_numpy(dtype=np.float64)
    end = start + np.nan_to_num(frame["e2e_ms"].to_numpy(dtype=np.float64)) / 1000.0
    users_col, _ = level_keys(frame)
    used = (frame["warmup"] != 1).to_numpy() & ~interrupted(frame)
    level_key = np.where(used, users_col, -1.0)
    levels = {}
    for users in np.unique(level_key[level_key >= 0]):
        rows = np.flatnonzero(level_key == users)
        t0, t1 = float(start[rows].min()), float(end[rows].max())
        span = max(t1 - t0, 1e-9)
        n = max(1, min(MAX_BLOCKS, int(round(span / BLOCK_S))))
        edges = t0 + span * np.arange(n + 1) / n
        block = np.clip(np.searchsorted(edges, start[rows], side="right") - 1, 0, n - 1)
        tokens, good_tokens = _window_tokens(frame, np.flatnonzero(users_col == users), edges[:-1], edges[1:],
                                             good)
        levels[float(users)] = LevelBlocks(float(users), rows, block, tuple((0, j) for j in range(n)),
                                         np.diff(edges), tokens, good_tokens, False, edges[:-1])
    return RunBlocks(level_key, levels)


def run_blocks(frame: pd.DataFrame, design: Design | None, good: np.ndarray | None = None) -> RunBlocks:
    """The run's measured rows per level and its blocks: the design's, else blocks of time."""
    if design is not None and design.blocked and design.clock_unix_s is not None:
        return _designed(frame, design, good)
    return _timed(frame, good)
