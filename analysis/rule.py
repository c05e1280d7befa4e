"""The decision rule, declared before the numbers: one primary question per level, the guards that must
not get worse, the margins, the error rate and its correction (docs/verdict-method.md).

Per level the verdict asks one primary question (did the objective's measure move beyond the noise band,
and which way) and one loss question per guard (did it get worse beyond the non-inferiority margin).
SHIP needs the primary better and every guard's worse end inside its margin; OFF a measured loss; anything
else is inconclusive. Every question's p-value comes from its own interval (stats.p_beyond), and the
levels' questions are adjusted together (Holm), the tasks' as an exploratory family (Benjamini-Hochberg).
Pure: from intervals and bands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .multiplicity import BH, HOLM
from .stats import CONFIDENCE, Interval, p_beyond

LATENCY, THROUGHPUT, GOODPUT = "latency", "throughput", "goodput"
OBJECTIVES = (LATENCY, THROUGHPUT, GOODPUT)
"""What a level's primary question asks about: per-token latency (TPOT p50, the default), output tokens per
second, or goodput (tokens of requests within --slo per second)."""
ALPHA = round(1 - CONFIDENCE, 10)
MARGIN_PCT = 5.0
"""The default non-inferiority margin: how much worse a guard's interval may reach and still ship."""
TTFT_MARGIN_PCT = 50.0
"""TTFT's own margin: a draft adds work to a request's first step, once per request rather than per token
(the demo at one user: TTFT p50 +27.3% [-5.9, +33.7] of 10.5 ms while TPOT p50 fell 65%)."""
PRIMARY_SHARE = 0.8
"""A level's share of alpha spent on its primary question; the rest is split among its guards' losses
(a weighted Bonferroni inside the level, so that an off on a guard's loss is under the family's control)."""
LOWER_IS_BETTER = {"tpot_p50_ms": True, "tpot_p90_ms": True, "ttft_p50_ms": True, "output_tok_s": False,
                   "goodput_tok_s": False}
NAMES = {"tpot_p50_ms": "TPOT p50", "tpot_p90_ms": "TPOT p90", "ttft_p50_ms": "TTFT p50",
         "output_tok_s": "output tok/s", "goodput_tok_s": "goodput tok/s"}
PRIMARY, GUARD = "primary", "guard"


@dataclass(frozen=True)
class DecisionRule:
    """What every level is asked, declared at the start and in the report."""

    objective: str
    primary: str
    guards: tuple[str, ...]
    margin_pct: float
    noise_pct: float
    ttft_margin_pct: float = TTFT_MARGIN_PCT
    alpha: float = ALPHA
    correction: str = HOLM
    """The levels' family; the per-task breakdown is always exploratory under EXPLORATORY."""

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.primary, *self.guards)

    def role(self, key: str) -> str | None:
        return PRIMARY if key == self.primary else GUARD if key in self.guards else None

    def describe(self) -> str:
        """One line: 'decision rule: TPOT p50 better beyond +-2% ... (Holm, alpha 0.05)'."""
        better = "lower" if LOWER_IS_BETTER[self.primary] else "higher"
        return (f"decision rule ({self.objective}): ship when {NAMES[self.primary]} is better ({better}) "
                f"beyond the +-{self.noise_pct:g}% noise band and {', '.join(NAMES[g] for g in self.guards)} "
                f"stay within a {self.margin_pct:g}% non-inferiority margin (TTFT p50 "
                f"{self.ttft_margin_pct:g}%); off on a measured loss; "
                f"levels under {CORRECTIONS[self.correction]} at alpha {self.alpha:g}, per-task breakdowns "
                f"exploratory ({CORRECTIONS[EXPLORATORY]}); acceptance explains, never decides")

    def as_dict(self) -> dict:
        return {"objective": self.objective, "primary": self.primary, "guards": list(self.guards),
                "noise_band_pct": self.noise_pct, "margin_pct": self.margin_pct,
                "ttft_margin_pct": self.ttft_margin_pct, "primary_share": PRIMARY_SHARE, "alpha": self.alpha,
                "correction": self.correction, "exploratory_correction": EXPLORATORY}


EXPLORATORY = BH
CORRECTIONS = {HOLM: "Holm's step-down", BH: "Benjamini-Hochberg FDR"}


def rule_for(objective: str, throughput_key: str, *, offered: bool, margin_pct: float,
             noise_pct: float, ttft_margin_pct: float = TTFT_MARGIN_PCT) -> DecisionRule:
    """The rule a level is judged by. `throughput_key`: goodput with an SLO, else output tok/s;
    `offered`: a rate level, where the output rate is the offered load, so throughput guards nothing."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if objective == GOODPUT and throughput_key != "goodput_tok_s":
        raise ValueError("--objective goodput needs --slo (goodput counts the requests within it)")
    latency = ("tpot_p90_ms", "ttft_p50_ms")
    if objective == LATENCY:
        primary, guards = "tpot_p50_ms", (*latency, *(() if offered else (throughput_key,)))
    else:
        primary = "goodput_tok_s" if objective == GOODPUT else "output_tok_s"
        guards = ("tpot_p50_ms", *latency)
    return DecisionRule(objective, primary, guards, margin_pct, noise_pct, ttft_margin_pct)


def questions(rule: DecisionRule, interval_of: Callable[[str], Interval],
              band_of: Callable[[str], float]) -> dict[str, float | None]:
    """Per key, the p-value of its question (on the two-sided scale of stats.p_beyond: at or below alpha
    exactly when the 95% interval's end clears the bound): the primary's, beyond the band on the side its
    estimate leans to; each guard's, a loss beyond its margin."""
    out: dict[str, float | None] = {}
    ci, band = interval_of(rule.primary), band_of(rule.primary)
    sides = [p for p in (p_beyond(ci, band, above=True), p_beyond(ci, -band, above=False)) if p is not None]
    out[rule.primary] = min(sides) if sides else None
    for key in rule.guards:
        lower = LOWER_IS_BETTER[key]
        edge = margin(rule, key, band_of(key))
        out[key] = p_beyond(interval_of(key), edge * (1 if lower else -1), above=lower)
    return out


def margin(rule: DecisionRule, key: str, band: float) -> float:
    """A guard's margin: the rule's (TTFT's own), never narrower than the noise band (a repeats' spread
    widens it)."""
    return max(rule.ttft_margin_pct if key == "ttft_p50_ms" else rule.margin_pct, band)


def weighted(rule: DecisionRule, ps: dict[str, float | None]) -> dict[str, float | None]:
    """The questions' p-values on the level's alpha: the primary's over PRIMARY_SHARE, each guard's over
    its share of the rest."""
    guards = max(len(rule.guards), 1)
    return {k: None if p is None else min(1.0, p / PRIMARY_SHARE if k == rule.primary else
                                          p * guards / (1 - PRIMARY_SHARE)) for k, p in ps.items()}
