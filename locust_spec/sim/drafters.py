"""Draft proposers: vLLM-style n-gram prompt lookup, and a simulated draft model agreeing with p."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from locust_spec.core import schedule, speculative
from locust_spec.sim.model import EOS


@dataclass(frozen=True)
class SpecConfig:
    """Parsed `--speculative-config`: vLLM's keys for the `ngram` and `draft_model` methods."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 2
    draft_model: str = ""
    draft_acceptance: float = 0.8
    vocab_mismatch: bool = False
    per_batch_size: tuple[schedule.Entry, ...] | None = None
    """vLLM's `num_speculative_tokens_per_batch_size`: the k for each step's batch size."""
    synthetic_rates: tuple[float, ...] | None = None
    """`rejection_sample_method: "synthetic"`: per position, the chance the drafts up to it are accepted,
    whatever they are (core/speculative.py)."""

    @property
    def agreement(self) -> float:
        return 0.02 if self.vocab_mismatch else self.draft_acceptance


def parse_spec_config(raw: dict) -> SpecConfig:
    """Validate a speculative config dict; raise ValueError with one clear line when it is not usable."""
    method = raw.get("method")
    removed = speculative.removed_method(raw)
    if removed:
        raise ValueError(removed)
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or k < 1:
        raise ValueError("speculative config needs an integer num_speculative_tokens >= 1")
    per_batch = raw.get(schedule.KEY)
    # vLLM validates the schedule when its scheduler starts, with these messages.
    entries = tuple(schedule.validate(per_batch)) if per_batch is not None else None
    rejection = raw.get(speculative.REJECTION, "standard")
    if rejection not in ("standard", speculative.SYNTHETIC):
        raise ValueError(f"{speculative.REJECTION} {rejection!r} is not simulated (standard or synthetic; "
                         "spec-sim --accept-wrong-drafts imitates a lossy verifier)")
    rates = speculative.synthetic_rates(raw, k)
    if method in ("ngram", "[ngram]"):
        hi = int(raw.get("prompt_lookup_max", raw.get("prompt_lookup_min", 4)))
        lo = int(raw.get("prompt_lookup_min", min(2, hi)))
        if not 1 <= lo <= hi:
            raise ValueError("speculative config needs 1 <= prompt_lookup_min <= prompt_lookup_max")
        return SpecConfig("ngram", k, hi, lo, per_batch_size=entries, synthetic_rates=rates)
    if method in ("draft_model", "eagle", "eagle3", "mtp") or (method is None and raw.get("model")):
        p = float(raw.get("draft_acceptance", 0.8))
        if not 0.0 <= p <= 1.0:
            raise ValueError("draft_acceptance must be within 0..1")
        return SpecConfig("draft_model", k, draft_model=str(raw.get("model", "draft")),
                          draft_acceptance=p, vocab_mismatch=bool(raw.get("vocab_mismatch", False)),
                          per_batch_size=entries, synthetic_rates=rates)
    raise ValueError(f"unsupported speculative method {method!r} (use 'ngram' or 'draft_model')")


class NgramIndex:
    """Latest position following every n-gram (n in lo..hi) of a growing token sequence: O(1) lookups.

    An n-gram is registered only once the token after it exists, so the sequence's own suffix never
    matches itself.
    """

    def __init__(self, tokens: list[int], lo: int, hi: int):
        self.tokens = tokens
        self.lo, self.hi = lo, hi
        self.after: dict[tuple[int, ...], int] = {}
        for i in range(1, len(tokens)):
            self._register(i)

    def _register(self, i: int) -> None:
        toks = self.tokens
        for n in range(self.lo, self.hi + 1):
            if i >= n:
                self.after[tuple(toks[i - n:i])] = i

    def append(self, tok: int) -> None:
        self.tokens.append(tok)
        self._register(len(self.tokens) - 1)

    def propose(self, k: int) -> list[int]:
        """Tokens after the latest earlier occurrence of the longest suffix n-gram (up to k; [] when none)."""
        toks = self.tokens
        for n in range(self.hi, self.lo - 1, -1):
            if len(toks) < n:
                continue
            j = self.after.get(tuple(toks[-n:]))
            if j is not None:
                return toks[j:j + k]
        return []


def unit(seed: int, pos: int, j: int, salt: str = "") -> float:
    """A uniform draw in [0, 1) fixed by the request's seed, the output position and the draft position:
    the same request draws the same, whatever else the server runs (`salt` keeps uses apart)."""
    h = hashlib.blake2b(f"{salt}{seed}:{pos}:{j}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def draft_model_proposal(target: Callable[[int], int], seed: int, pos: int, k: int, p: float,
                         stop_at_eos: bool = True) -> list[int]:
    """k draft tokens from output position `pos`: each agrees with the target with probability p.

    A position that disagrees gets a token the target did not choose; the rest is never verified.
    `stop_at_eos=False` drafts all k, past the target's end, as a draft head does.
    """
    out = []
    for j in range(k):
        t = target(pos + j)
        if t == EOS and stop_at_eos:
            break
        out.append(t if unit(seed, pos, j) < p else t + 1)
    return out


def synthetic_accepted(rates: tuple[float, ...], drafted: int, seed: int, pos: int) -> int:
    """How many of `drafted` tokens synthetic acceptance takes: one draw u per step, and position i is
    accepted when u < rates[i], so the first i+1 are all accepted with exactly that chance."""
    u = unit(seed, pos, 0, "synthetic:")
    return sum(1 for rate in rates[:drafted] if u < rate)


def lossy_accepts(rate: float, seed: int, pos: int, j: int) -> bool:
    """Whether a lossy verifier takes the draft token at `j` the target disagrees with (spec-sim
    --accept-wrong-drafts): fixed per request and position, so a prompt always gets the same answer."""
    return rate > 0.0 and unit(seed, pos, j, "lossy:") < rate
