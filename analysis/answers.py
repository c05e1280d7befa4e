"""The quality gate: speculative decoding must not change the answers (pure).

With the standard verifier speculation is lossless: at temperature 0 the candidate answers what the
baseline answers, up to the numerical noise of batching (a near-tie decided otherwise in a differently
shaped batch). A lossy verifier (vLLM 0.33's `rejection_sample_method: "fly"`) or a broken draft setup
raises acceptance by changing the answers. Per level this compares each candidate answer with the
baseline's answers of the same prompt and sets the share that is identical beside the baseline's own
noise floor: the same share between the baseline's own answers of a prompt. A shortfall beyond that noise
holds the candidate back.

Answers are compared by their whitespace-normalised hash (`output_hash_ws`, core/answers.py) where the
run recorded one: an answer that differs only in whitespace is counted apart (`whitespace_only`), not as
changed. The noise floor is the level's own where the baseline answered at least `MIN_PROMPTS` prompts
more than once there, else the baseline's over all its levels (and its self-check, answered twice on
purpose while priming, where spec-ab ran one). Without any floor, a candidate whose answers are mostly not
the baseline's is still held back: lossless speculation does not change greedy answers. A baseline whose
own answers at temperature 0 mostly disagree is named as not deterministic: no candidate can be checked
against it. A run without the answer columns is "not checked", said.

Shares are per answer: the chance that an answer equals another answer of its prompt, the candidate's
against the baseline's (identical) and the baseline's against each other (baseline vs itself). Prompts are
the independent units: the intervals resample prompts, never answers.
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

DETERMINISTIC = 0.5
"""At temperature 0, a baseline whose own answers of a prompt agree less often than this is named as not
deterministic (a server that samples anyway, a seed per request): it cannot tell a lossy candidate."""

SAME, DIFFER, NOISE_UNKNOWN = "same", "differ", "noise unknown"
UNMEASURED_DIFFER = "differ, noise unmeasured"
NOT_DETERMINISTIC = "baseline not deterministic"
NOT_CHECKED = "not checked"
HELD = {DIFFER: "off", UNMEASURED_DIFFER: "off", NOT_DETERMINISTIC: "inconclusive"}
"""The level's verdict word when the answers hold a candidate back (verdict.py's OFF and INCONCLUSIVE)."""


@dataclass(frozen=True)
class Floor:
    """The baseline's agreement with itself: the share of its answers equal to another of their prompt."""

    share: float
    prompts: int
    """Prompts it answered more than once."""
    source: str
    """Where: 'this level', 'all levels', 'all levels and the self-check'."""


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
    whitespace_only: int = 0
    """Candidate answers that differ from the baseline's usual answer of their prompt only in whitespace
    (counted as identical)."""
    floor_source: str | None = None
    """Where `baseline_self_share` was measured (Floor.source); None: nowhere."""
    why: str | None = None
    """NOT_CHECKED: why."""

    @property
    def lossy(self) -> bool:
        return self.status in (DIFFER, UNMEASURED_DIFFER)

    @property
    def held(self) -> str | None:
        """The level's verdict when the answers hold the candidate back, else None."""
        return HELD.get(self.status)

    def as_dict(self) -> dict:
        first = self.first_difference
        return {"compared": self.compared, "prompts": self.prompts, "identical_share": self.identical_share,
                "baseline_self_share": self.baseline_self_share, "self_prompts": self.self_prompts,
                "shortfall_ci95": list(self.shortfall_ci95) if self.shortfall_ci95 else None,
                "differing": self.differing, "whitespace_only": self.whitespace_only,
                "noise_floor_from": self.floor_source,
                "first_difference_chars": ({"earliest": first[0], "median": first[1]} if first else None),
                "status": self.status, **({"why": self.why} if self.why else {})}

    def line(self) -> str:
        """'answers: 97% identical to the baseline's (baseline vs itself 98%, 12 prompts); ...'"""
        if self.status == NOT_CHECKED:
            return f"answers: not checked ({self.why})"
        text = f"answers: {self.identical_share:.0%} of {self.compared} identical to the baseline's"
        if self.baseline_self_share is not None:
            text += (f" (baseline vs itself {self.baseline_self_share:.0%} over the {self.self_prompts} "
                     f"prompts it answered more than once, {self.floor_source})")
        else:
            text += " (baseline vs itself: no prompt answered twice, so its noise is unknown)"
        if self.whitespace_only:
            text += f"; {self.whitespace_only} differ from it in whitespace only (counted as identical)"
        if self.first_difference is not None:
            text += (f"; {self.differing} differ from the baseline's usual answer, first at character "
                     f"{self.first_difference[0]} (median {self.first_difference[1]}, to {BLOCK_CHARS})")
        if self.status == NOT_DETERMINISTIC:
            text += "; the baseline is not deterministic: its own answers to a prompt mostly differ"
        return text


def not_checked(why: str) -> AnswerCheck:
    """The gate said to be off, and why (a run without the answer's columns)."""
    return AnswerCheck(compared=0, prompts=0, identical_share=0.0, baseline_self_share=None, self_prompts=0,
                       shortfall_ci95=None, differing=0, first_difference=None, status=NOT_CHECKED, why=why)


def level_answers(frames: Sequence[pd.DataFrame | None], users: int) -> pd.DataFrame | None:
    """Every run's answers at one level, pooled (repeats of an arm add answers); None when no run of the
    arm recorded any (runs written before the answer's columns)."""
    present = [f[f["level_users"] == users] for f in frames if f is not None]
    return pd.concat(present, ignore_index=True) if present else None


def _counts(frame: pd.DataFrame) -> pd.Series:
    """Answers per (prompt, answer): `answer` is the whitespace-normalised hash where recorded."""
    return frame.groupby(["prompt", "answer"], observed=True).size()


def _self_terms(n_b: np.ndarray, same_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prompt: answered more than once, and the numerator and weight of its self-agreement."""
    ok = n_b >= 2
    return ok, np.where(ok, same_b / np.maximum(n_b - 1, 1), 0.0), np.where(ok, n_b, 0.0)


def self_agreement(frames: Sequence[pd.DataFrame | None], source: str) -> Floor | None:
    """The baseline's noise floor over every answer given (all levels, repeats, a self-check); None when
    it answered fewer than MIN_PROMPTS prompts more than once."""
    present = [f for f in frames if f is not None and not f.empty]
    if not present:
        return None
    counts = _counts(pd.concat(present, ignore_index=True)).astype(float)
    n_b = counts.groupby(level="prompt", observed=True).sum().to_numpy(float)
    same_b = (counts * (counts - 1)).groupby(level="prompt", observed=True).sum().to_numpy(float)
    ok, num, den = _self_terms(n_b, same_b)
    if ok.sum() < MIN_PROMPTS:
        return None
    return Floor(float(num.sum() / den.sum()), int(ok.sum()), source)


def check_level(base: pd.DataFrame | None, cand: pd.DataFrame | None, floor: Floor | None = None,
                temperature: float | None = None) -> AnswerCheck | None:
    """Compare one level's answers (columns prompt, answer, output_hash, output_marks); None when either
    arm has none or they share no prompt. `floor`: the baseline's noise over all it answered, for a level
    where it answered too few prompts twice; `temperature`: the runs' (None: not recorded)."""
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
    self_ok, self_num, self_den = _self_terms(n_b, same_b.to_numpy(float))
    identical = float(cross_num.sum() / n_c.sum())
    self_prompts = int(self_ok.sum())
    shortfall = None
    if self_prompts >= MIN_PROMPTS:
        floor = Floor(float(self_num.sum() / self_den.sum()), self_prompts, "this level")
        shortfall = _shortfall_ci(self_num[self_ok], self_den[self_ok], cross_num[self_ok], n_c[self_ok])
    elif floor is not None:
        lo, hi = _share_ci(cross_num, n_c)
        shortfall = (floor.share - hi, floor.share - lo)
    differing, whitespace, first = _first_differences(base, cand)
    status = _status(floor, shortfall, cross_num, n_c, temperature)
    return AnswerCheck(compared=int(n_c.sum()), prompts=len(common), identical_share=identical,
                       baseline_self_share=floor.share if floor else None,
                       self_prompts=floor.prompts if floor else self_prompts, shortfall_ci95=shortfall,
                       differing=differing, first_difference=first, status=status, whitespace_only=whitespace,
                       floor_source=floor.source if floor else None)


def _status(floor: Floor | None, shortfall: tuple[float, float] | None, cross_num: np.ndarray,
            n_c: np.ndarray, temperature: float | None) -> str:
    greedy = temperature is None or temperature == 0
    if floor is not None and shortfall is not None:
        if greedy and floor.share < DETERMINISTIC:
            return NOT_DETERMINISTIC
        return DIFFER if shortfall[0] > TOLERANCE else SAME
    # No floor: at temperature 0 a lossless candidate answers what the baseline answers; fewer identical
    # answers than 1 - TOLERANCE (at the top of the interval over prompts) are changed answers.
    if greedy and _share_ci(cross_num, n_c)[1] < 1.0 - TOLERANCE:
        return UNMEASURED_DIFFER
    return NOISE_UNKNOWN


def _share_ci(cross_num: np.ndarray, n_c: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the identical share, resampling prompts."""
    rng = np.random.default_rng(SEED)
    weights = rng.multinomial(len(n_c), np.full(len(n_c), 1.0 / len(n_c)), size=RESAMPLES)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = weights @ cross_num / (weights @ n_c)
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    lo, hi = np.nanpercentile(shares, [tail, 100.0 - tail])
    return float(lo), float(hi)


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


def _first_differences(base: pd.DataFrame,
                       cand: pd.DataFrame) -> tuple[int, int, tuple[int, int] | None]:
    """How many candidate answers differ from the baseline's most common answer of their prompt, how many
    others differ from it in whitespace only, and the (earliest, median) character where the first
    differ."""
    answers = base.groupby(["prompt", "answer", "output_hash", "output_marks"], observed=True).size()
    usual = (answers.reset_index(name="n")
             .sort_values(["prompt", "n", "output_hash"], ascending=[True, False, True])
             .drop_duplicates("prompt").set_index("prompt"))
    joined = cand.merge(usual[["answer", "output_hash", "output_marks"]], left_on="prompt", right_index=True,
                        suffixes=("", "_usual"))
    changed = joined["answer"].astype(str) != joined["answer_usual"].astype(str)
    whitespace = int((~changed & (joined["output_hash"].astype(str)
                                  != joined["output_hash_usual"].astype(str))).sum())
    differ = joined[changed]
    if differ.empty:
        return 0, whitespace, None
    pairs = differ.groupby(["output_marks", "output_marks_usual"], observed=True).size()
    offsets = [(first_difference(str(a), str(b)), n) for (a, b), n in pairs.items()]
    located = np.repeat([o for o, _ in offsets if o is not None], [n for o, n in offsets if o is not None])
    if not len(located):
        return len(differ), whitespace, None
    return len(differ), whitespace, (int(located.min()), int(np.median(located)))


def lossy_reason(check: AnswerCheck | None, allow_lossy: bool) -> str | None:
    """The reason line when the answers hold the candidate back (changed beyond the baseline's own noise,
    or beyond none when it has none; a baseline not deterministic), else None."""
    if check is None or check.held is None:
        return None
    if check.status == NOT_DETERMINISTIC:
        head = (f"the baseline is not deterministic: {check.baseline_self_share:.0%} of its own answers to a "
                f"prompt agree ({check.floor_source}) at temperature 0, so a candidate that changes answers "
                "cannot be told from it (a server that samples anyway, or a seed per request)")
    elif check.status == UNMEASURED_DIFFER:
        head = (f"the answers changed: {check.identical_share:.0%} of the candidate's answers are identical "
                f"to the baseline's ({check.differing} of {check.compared} differ from its usual answer), "
                "and the baseline answered no prompt twice to measure its own noise: speculation with the "
                "standard verifier does not change greedy answers, so this verifier is lossy or the draft "
                "setup is broken")
    else:
        lo, hi = check.shortfall_ci95 or (0.0, 0.0)
        head = (f"the answers changed: {check.identical_share:.0%} of the candidate's answers are identical "
                f"to the baseline's, against {check.baseline_self_share:.0%} between the baseline's own "
                f"answers ({check.floor_source}; short by {lo:.0%} to {hi:.0%}, beyond the {TOLERANCE:.0%} "
                "allowed): speculation with the standard verifier does not change answers, so this "
                "verifier is lossy or the draft setup is broken")
    if allow_lossy:
        return head + "; judged on speed alone (--allow-lossy)"
    return head + "; not shipped (--allow-lossy judges it on speed alone)"


def headline(levels: Sequence[tuple[str, AnswerCheck | None]]) -> str | None:
    """The sentence that leads the summary when the answers hold the candidate back at some level."""
    changed = [label for label, check in levels if check is not None and check.lossy]
    unsteady = [label for label, check in levels if check is not None and check.status == NOT_DETERMINISTIC]
    parts = []
    if changed:
        parts.append("The candidate's answers changed beyond the baseline's own noise at "
                     f"{', '.join(changed)} (a lossy verifier or a broken draft setup).")
    if unsteady:
        parts.append(f"The baseline is not deterministic at {', '.join(unsteady)}: the answers could not be "
                     "checked there.")
    return " ".join(parts) or None
