"""Many questions at once: p-values adjusted so that the words a verdict says keep their error rate.

A ladder asks one primary question per level and one loss question per guard; per task it asks them
again for every task. Each at 5% alone, some level or task says something false in most A/A
runs (issue #38: 82-85% of simulated ones). The levels' questions are adjusted by Holm's step-down (the
chance of any false claim among them stays at alpha); the per-task breakdown is exploratory, adjusted by
Benjamini-Hochberg (among its claims, the expected share of false ones stays at alpha). Pure functions;
None (a question that could not be asked) passes through and does not count.
"""

from __future__ import annotations

from collections.abc import Sequence

HOLM = "holm"
BH = "benjamini-hochberg"


def _asked(ps: Sequence[float | None]) -> list[int]:
    return sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's adjusted p-values: the i-th smallest of m times (m - i), made monotone, capped at 1."""
    order = _asked(ps)
    out: list[float | None] = [None] * len(ps)
    running, m = 0.0, len(order)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def benjamini_hochberg(ps: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg q-values: the i-th smallest times m / i, made monotone from the largest down."""
    order = _asked(ps)
    out: list[float | None] = [None] * len(ps)
    running, m = 1.0, len(order)
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, ps[i] * m / (rank + 1))
        out[i] = running
    return out


ADJUST = {HOLM: holm, BH: benjamini_hochberg}


def adjust(members: Sequence[dict[str, float | None]], method: str) -> list[dict[str, float | None]]:
    """Each member (a level, or a task's level) asks several questions, their p-values already weighted
    on the member's alpha (a weighted Bonferroni inside it: the member's smallest is its own p). The
    members' p-values are the family, adjusted by `method`; each question then carries its member's
    adjustment (its weighted p times the member's adjusted over raw), so a question is claimed at alpha
    exactly when its member is and its own weight allows."""
    firsts = [min((p for p in m.values() if p is not None), default=None) for m in members]
    adjusted = ADJUST[method](firsts)
    out = []
    for member, first, adj in zip(members, firsts, adjusted, strict=True):
        scale = 1.0 if not first or adj is None else adj / first
        out.append({k: None if p is None else min(1.0, p * scale) for k, p in member.items()})
    return out
