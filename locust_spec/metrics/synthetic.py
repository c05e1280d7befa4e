"""vLLM's synthetic acceptance, recognised in the per-position counters (pure).

`"rejection_sample_method": "synthetic"` (vLLM 0.32 and 0.33) accepts draft tokens by configured rates
instead of by the target's agreement: benchmarkers use it to replay a published acceptance length. Given
`synthetic_acceptance_length` L over k positions, vLLM resolves the rates as the minimum-variance schedule
(`SpeculativeConfig._acceptance_length_to_rates`): 1.0 for the first floor(L-1) positions, the fraction
of L-1 next, 0.0 after, cut to k positions (L 3.5 over 4: 1.0, 1.0, 0.5, 0.0; L 4.5 over 4: 1.0, 1.0,
1.0, 0.5, no 0.0 left). The counters then show exactly that shape. No real drafter does: over many drafts
its position 0 is not accepted every single time, nor a later position never while an earlier one often
is. Two ends of the schedule look like a real draft and are left unnamed: L = k + 1 (every position 1.0,
a draft that is a copy of the target) and L = 1 (every position 0.0, one that never agrees).
(`synthetic_acceptance_rates`, an explicit curve, leaves no such signature.)
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_DRAFTS = 100
"""Fewer drafts than this can show whole numbers by chance."""
_EXACT = 1e-9


def synthetic_length(per_position: Sequence[float], drafts: float) -> float | None:
    """The `synthetic_acceptance_length` the per-position acceptance implies, None when it is not that
    shape: at least two positions, `MIN_DRAFTS` drafts, positions of exactly 1.0, at most one in between,
    then positions of exactly 0.0; not all 1.0 (a perfect draft) and not all 0.0 (a useless one). The 0.0s
    may be none (L 4.5 over 4 positions), the 1.0s too (L 1.37: 0.37, 0.0, 0.0)."""
    if len(per_position) < 2 or drafts < MIN_DRAFTS:
        return None
    ones = 0
    while ones < len(per_position) and per_position[ones] >= 1.0 - _EXACT:
        ones += 1
    rest = list(per_position[ones:])
    fraction = rest.pop(0) if rest and _EXACT < rest[0] < 1.0 - _EXACT else 0.0
    if any(p > _EXACT for p in rest) or ones == len(per_position) or (ones == 0 and fraction == 0.0):
        return None
    return 1.0 + ones + fraction
