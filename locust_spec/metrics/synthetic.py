"""vLLM's synthetic acceptance, recognised in the per-position counters (pure).

`"rejection_sample_method": "synthetic"` (vLLM 0.32 and 0.33) accepts draft tokens by configured rates
instead of by the target's agreement: benchmarkers use it to replay a published acceptance length. Given
`synthetic_acceptance_length` L, vLLM resolves the rates as the minimum-variance schedule, the marginal
chance that the first i+1 drafts are all accepted: 1.0 for the first floor(L-1) positions, the fraction of
L-1 at the next, 0.0 after (L 3.5 over 4 positions: 1.0, 1.0, 0.5, 0.0). The counters then show exactly
that shape. No real drafter does: its position 0 is never accepted every single time over many drafts
while a later one never is. (`synthetic_acceptance_rates`, an explicit curve, leaves no such signature.)
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_DRAFTS = 100
"""Fewer drafts than this can show whole numbers by chance."""
_EXACT = 1e-9


def synthetic_length(per_position: Sequence[float], drafts: float) -> float | None:
    """The `synthetic_acceptance_length` the per-position acceptance implies, None when it is not that
    shape: at least two positions, `MIN_DRAFTS` drafts, positions of exactly 1.0, at most one in between,
    then at least one of exactly 0.0 (all 1.0, a perfect draft, and all 0.0, a useless one, are not it)."""
    if len(per_position) < 2 or drafts < MIN_DRAFTS:
        return None
    ones = 0
    while ones < len(per_position) and per_position[ones] >= 1.0 - _EXACT:
        ones += 1
    rest = list(per_position[ones:])
    fraction = rest.pop(0) if rest and _EXACT < rest[0] < 1.0 - _EXACT else 0.0
    if not rest or any(p > _EXACT for p in rest) or (ones == 0 and fraction == 0.0):
        return None
    return 1.0 + ones + fraction
