"""The quality gate: speculative decoding must not change the answers (pure).

With the standard verifier speculation is lossless: at temperature 0 the candidate answers what the
baseline answers, up to the numerical noise of batching (a near-tie decided otherwise in a differently
shaped batch). A lossy verifier (vLLM 0.33's `rejection_sample_method: "fly"`) or a broken draft setup
raises acceptance by changing the answers. Per level this compares each candidate answer with the
baseline's answers of the same prompt (the rows' `output_hash`, core/answers.py) and sets the share that is
identical beside the same share between the baseline's own answers of a prompt, where the baseline
answered a prompt more than once (its noise). A shortfall beyond that noise holds the candidate back.

Shares are per answer: the chance that an answer equals another answer of its prompt, the candidate's
against the baseline's (identical) and the baseline's against each other (baseline vs itself). Prompts are
the independent units: the shortfall's interval resamples prompts, never answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from locust_spec.core.answers import BLOCK_CHARS, first_difference

ANSWER_COLUMNS = ("prompt_class", "prompt_id", "output_hash", "output_marks")
TOLERANCE = 0.05
"""A shortfall (baseline vs itself minus identical) the gate forgives: speculation changes the shape of
the batches, so its own batching noise can be a little above the baseline's."""
MIN_PROMPTS = 2
"""Prompts the baseline answered more than once: fewer cannot measure its noise."""
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0

SAME, DIFFER, NOISE_UNKNOWN = "same", "differ", "noise unknown"


@dataclass(frozen=True)
class AnswerCheck:
    """One level's answers, candidate against baseline."""

    compared: int
    """Candidate answers to prompts the baseline also answered at this level."""
    prompts: int
    identical_share: float
    baseline_self_share: float | None
    """None: no prompt was answered twice by the baseline at this level."""
    self_prompts: int
    shortfall_ci95: tuple[float, float] | None
    """(baseline vs itself) - identical, 95% interval over prompts."""
    differing: int
    """Candidate answers unlike the baseline's most common answer of their prompt."""
    first_difference: tuple[int, int] | None
    """(earliest, median) character offset where those first differ from it (to `BLOCK_CHARS`)."""
    status: str

    @property
    def lossy(self) -> bool:
        return self.status == DIFFER

    def to_dict(self) -> dict:
        first = self.first_difference
        return {"compared": self.compared, "prompts": self.prompts, "identical_share": self.identical_share,
                "baseline_self_share": self.baseline_self_share, "self_prompts": self.self_prompts,
                "shortfall_ci95": list(self.shortfall_ci95) if self.shortfall_ci95 else None,
                "differing": self.differing,
                "first_difference_chars": ({"earliest": first[0], "median": first[1]} if first else None),
                "status": self.status}

    def line(self) -> str:
        """'answers: 97% identical to the baseline's (baseline vs itself 98%, 12 prompts); ...'"""
        text = f"answers: {self.identical_share:.0%} of {self.compared} identical to the baseline's"
        if self.baseline_self_share is not None:
            text += (f" (baseline vs itself {self.baseline_self_share:.0%} over the {self.self_prompts} "
                     "prompts it answered more than once)")
        else:
            text += " (baseline vs itself: no prompt answered twice, so its noise is unknown)"
        if self.first_difference is not None:
            text += (f"; {self.differing} differ from the baseline's usual answer, first at character "
                     f"{self.first_difference[0]} (median {self.first_difference[1]}, to {BLOCK_CHARS})")
        return text


def level_answers(frames: Sequence[pd.DataFrame | None], users: int) -> pd.DataFrame | None:
    """Every run's answers at one level, pooled (repeats of an arm add answers); None when no run of the
    arm recorded any (runs written before the answer's columns)."""
    present = [f[f["level_users"] == users] for f in frames if f is not None]
    return pd.concat(present, ignore_index=True) if present else None


def _counts(frame: pd.DataFrame) -> pd.Series:
    """Answers per (prompt, hash)."""
    return frame.groupby(["prompt", "output_hash"], observed=True).size()


def check_level(base: pd.DataFrame | None, cand: pd.DataFrame | None) -> AnswerCheck | None:
    """Compare one level's answers (columns prompt, output_hash, output_marks); None when either arm has
    none or they share no prompt."""
    if base is None or cand is None or base.empty or cand.empty:
        return None
    b, c = _counts(base), _counts(cand)
    b_total = b.groupby(level="prompt", observed=True).sum()
    c_total = c.groupby(level="prompt", observed=True).sum()
    common = b_total.index.intersection(c_total.index)
    if not len(common):
        return None
    joint = pd.concat({"b": b, "c": c}, axis=1).fillna(0.0)
    joint = joint[joint.index.get_level_values("prompt").isin(common)]
    n_b = b_total.reindex(common).to_numpy(float)
    n_c = c_total.reindex(common).to_numpy(float)
    matches = (joint["b"] * joint["c"]).groupby(level="prompt", observed=True).sum().reindex(common)
    same_b = (joint["b"] * (joint["b"] - 1)).groupby(level="prompt", observed=True).sum().reindex(common)
    cross_num = matches.to_numpy(float) / n_b          # per candidate answer: share of equal baseline answers
    self_ok = n_b >= 2
    self_num = np.where(self_ok, same_b.to_numpy(float) / np.maximum(n_b - 1, 1), 0.0)
    self_den = np.where(self_ok, n_b, 0.0)
    identical = float(cross_num.sum() / n_c.sum())
    self_prompts = int(self_ok.sum())
    self_share = float(self_num.sum() / self_den.sum()) if self_prompts else None
    shortfall = None
    status = NOISE_UNKNOWN
    if self_prompts >= MIN_PROMPTS:
        paired = self_ok
        shortfall = _shortfall_ci(self_num[paired], self_den[paired], cross_num[paired], n_c[paired])
        status = DIFFER if shortfall[0] > TOLERANCE else SAME
    differing, first = _first_differences(base, cand)
    return AnswerCheck(compared=int(n_c.sum()), prompts=len(common), identical_share=identical,
                       baseline_self_share=self_share, self_prompts=self_prompts, shortfall_ci95=shortfall,
                       differing=differing, first_difference=first, status=status)


def _shortfall_ci(self_num: np.ndarray, self_den: np.ndarray, cross_num: np.ndarray,
                  cross_den: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap interval of (baseline vs itself) - identical, resampling prompts."""
    rng = np.random.default_rng(SEED)
    weights = rng.multinomial(len(self_num), np.full(len(self_num), 1.0 / len(self_num)), size=RESAMPLES)
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = weights @ self_num / (weights @ self_den) - weights @ cross_num / (weights @ cross_den)
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    lo, hi = np.nanpercentile(diff, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _first_differences(base: pd.DataFrame, cand: pd.DataFrame) -> tuple[int, tuple[int, int] | None]:
    """How many candidate answers differ from the baseline's most common answer of their prompt, and the
    (earliest, median) character where they first do."""
    answers = base.groupby(["prompt", "output_hash", "output_marks"], observed=True).size()
    usual = (answers.reset_index(name="n")
             .sort_values(["prompt", "n", "output_hash"], ascending=[True, False, True])
             .drop_duplicates("prompt").set_index("prompt"))
    joined = cand.merge(usual[["output_hash", "output_marks"]], left_on="prompt", right_index=True,
                        suffixes=("", "_usual"))
    differ = joined[joined["output_hash"].astype(str) != joined["output_hash_usual"].astype(str)]
    if differ.empty:
        return 0, None
    pairs = differ.groupby(["output_marks", "output_marks_usual"], observed=True).size()
    offsets = [(first_difference(str(a), str(b)), n) for (a, b), n in pairs.items()]
    located = np.repeat([o for o, _ in offsets if o is not None], [n for o, n in offsets if o is not None])
    if not len(located):
        return len(differ), None
    return len(differ), (int(located.min()), int(np.median(located)))


def lossy_reason(check: AnswerCheck | None, allow_lossy: bool) -> str | None:
    """The reason line when the candidate's answers differ beyond the baseline's own noise, else None."""
    if check is None or not check.lossy:
        return None
    lo, hi = check.shortfall_ci95 or (0.0, 0.0)
    head = (f"the answers changed: {check.identical_share:.0%} of the candidate's answers are identical to "
            f"the baseline's, against {check.baseline_self_share:.0%} between the baseline's own answers "
            f"(short by {lo:.0%} to {hi:.0%}, beyond the {TOLERANCE:.0%} allowed): speculation with the "
            "standard verifier does not change answers, so this verifier is lossy or the draft setup is "
            "broken")
    if allow_lossy:
        return head + "; judged on speed alone (--allow-lossy)"
    return head + "; not shipped (--allow-lossy judges it on speed alone)"
