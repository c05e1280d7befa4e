"""vLLM's `--speculative-config` as spec-sim and spec-tune check it: methods vLLM removed, and synthetic
acceptance (`rejection_sample_method: "synthetic"`, vLLM 0.32 and 0.33), resolved as vLLM resolves it."""

from __future__ import annotations

REMOVED_METHODS = {"medusa": "0.33", "mlp_speculator": "0.33"}
REJECTION = "rejection_sample_method"
SYNTHETIC = "synthetic"
LENGTH, RATES = "synthetic_acceptance_length", "synthetic_acceptance_rates"


def removed_method(config: dict) -> str | None:
    """One line when the config names a method today's vLLM no longer has, else None."""
    method = config.get("method")
    if not isinstance(method, str) or method not in REMOVED_METHODS:
        return None
    return (f"speculative method {method!r} was removed in vLLM {REMOVED_METHODS[method]} (with "
            f"{' and '.join(repr(m) for m in REMOVED_METHODS if m != method)}): use eagle, eagle3, mtp, "
            "draft_model or ngram")


def is_synthetic(config: dict) -> bool:
    return config.get(REJECTION) == SYNTHETIC


def synthetic_rates(config: dict, num_speculative_tokens: int) -> tuple[float, ...] | None:
    """The per-position acceptance rates synthetic acceptance imposes (None without it): the marginal
    chance that the first i+1 drafts are all accepted. A length L resolves to the minimum-variance
    schedule, 1.0 for the first floor(L-1) positions, the fraction next, 0.0 after (3.5 over 4: 1, 1, 0.5,
    0). ValueError, in vLLM's terms, when vLLM would refuse the config."""
    length, rates = config.get(LENGTH), config.get(RATES)
    if not is_synthetic(config):
        if length is not None or rates is not None:
            raise ValueError(f"{LENGTH} and {RATES} are only valid with {REJECTION}='{SYNTHETIC}'.")
        return None
    if (length is None) == (rates is None):
        raise ValueError(f"{REJECTION}='{SYNTHETIC}' requires exactly one of {RATES} or {LENGTH}.")
    k = num_speculative_tokens
    if rates is not None:
        if (not isinstance(rates, list) or len(rates) != k
                or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1
                           for r in rates)):
            raise ValueError(f"{RATES} must be a list of {k} rates within [0, 1].")
        if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
            raise ValueError(f"{RATES} must be non-increasing.")
        return tuple(float(r) for r in rates)
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not 1 <= length <= k + 1:
        raise ValueError(f"{LENGTH} must be a number within [1, num_speculative_tokens + 1] = [1, {k + 1}].")
    return tuple(min(1.0, max(0.0, length - 1 - i)) for i in range(k))
