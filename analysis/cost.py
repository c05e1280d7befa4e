"""Whether speculation pays in the units a team decides in: dollars per million output tokens and, from
the GPUs' own power series, watts and joules per output token, per level and arm, with the change's
interval from the same design as throughput's (docs/cost.md). Pure: the caller reads the runs.

- Cost per million output tokens = usd_per_gpu_hour x gpus / 3600 / (output tok/s) x 1e6, from the
  level's throughput (tokens that arrived in the arm's own block windows over their seconds). Its ratio,
  candidate over baseline, is the GPU ratio over throughput's ratio, so its interval is throughput's
  interval mapped through that (decreasing) function: exact, no second bootstrap.
- Energy: each block window's joules (`locust_spec.metrics.power`) over the tokens that arrived in it
  (joules per token) or its seconds (watts), resampled over the same units as throughput (block pairs when
  the arms shared a clock, else each arm's blocks; runs as clusters).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from locust_spec.metrics import power

from . import levels as lv
from . import stats
from .model import ArmMetrics, ArmsValue, LevelVerdict, Pricing, level_label
from .stats import BETTER, SAME, WORSE, Interval

USD_PER_MTOK = "cost_per_mtok_usd"
POWER_W = "power_w"
JOULES_PER_TOKEN = "joules_per_token"
TOKENS_PER_JOULE = "tokens_per_joule"
KEYS = (USD_PER_MTOK, POWER_W, JOULES_PER_TOKEN, TOKENS_PER_JOULE)
LABELS = {USD_PER_MTOK: ("$ per million output tokens", "${:.2f}"), POWER_W: ("GPU power (W)", "{:.0f}"),
          JOULES_PER_TOKEN: ("joules per output token", "{:.3f}"),
          TOKENS_PER_JOULE: ("output tokens per joule", "{:.2f}")}
"""Each quantity's row label in the reports and the format of its values."""
LOWER_IS_BETTER = {USD_PER_MTOK: True, POWER_W: True, JOULES_PER_TOKEN: True, TOKENS_PER_JOULE: False}


def pricing_from(usd_per_gpu_hour: float | None, gpus: float | None = None,
                 gpus_baseline: float | None = None, gpus_candidate: float | None = None) -> Pricing | None:
    """`--gpu-cost-per-hour` with `--gpus` (both arms) or the per-arm counts; None when not priced.
    ValueError when a GPU count comes without a price, or is not positive."""
    counts = {"--gpus": gpus, "--gpus-baseline": gpus_baseline, "--gpus-candidate": gpus_candidate}
    given = [name for name, n in counts.items() if n is not None]
    if usd_per_gpu_hour is None:
        if given:
            raise ValueError(f"{given[0]} counts GPUs for a cost: give --gpu-cost-per-hour too")
        return None
    if not 0 < usd_per_gpu_hour < float("inf"):
        raise ValueError("--gpu-cost-per-hour must be a positive number of dollars")
    for name in given:
        if not 0 < counts[name] < float("inf"):
            raise ValueError(f"{name} must be a positive number of GPUs")
    both = 1.0 if gpus is None else float(gpus)
    return Pricing(float(usd_per_gpu_hour), both if gpus_baseline is None else float(gpus_baseline),
                   both if gpus_candidate is None else float(gpus_candidate))


def usd_per_mtok(usd_per_gpu_hour: float, gpus: float, tok_s: float | None) -> float | None:
    """Dollars per million output tokens of `gpus` GPUs at `usd_per_gpu_hour` each, serving `tok_s`."""
    if tok_s is None or not tok_s > 0:
        return None
    return usd_per_gpu_hour * gpus / 3600.0 / tok_s * 1e6


def cost_interval(usd_per_gpu_hour: float, gpus: float, throughput: Interval | None) -> Interval | None:
    """Dollars per million output tokens of a throughput's interval (tok/s): the bounds swap (spec-tune's
    arms)."""
    if throughput is None or throughput.estimate is None:
        return None

    def usd(x: float | None) -> float | None:
        return None if x is None else usd_per_mtok(usd_per_gpu_hour, gpus, x)

    return Interval(usd(throughput.estimate), usd(throughput.hi), usd(throughput.lo), throughput.confidence,
                    throughput.method, throughput.units, throughput.unit, throughput.df)


def inverse_change(ci: Interval, factor: float = 1.0) -> Interval:
    """The % change of factor / X from X's % change (its interval's bounds swap: the map falls). A change
    of -100% or below (the candidate measured nothing) has no inverse."""
    def inv(x: float | None) -> float | None:
        return None if x is None or x <= -100.0 else (factor / (1.0 + x / 100.0) - 1.0) * 100.0

    lo, hi = inv(ci.hi), inv(ci.lo)
    if lo is None or hi is None:
        lo = hi = None
    return Interval(inv(ci.estimate), lo, hi, ci.confidence, ci.method, ci.units, ci.unit, ci.df)


def cost_value(pricing: Pricing, base: ArmMetrics, cand: ArmMetrics, throughput: Interval) -> ArmsValue:
    """Cost per million output tokens per arm, and its change from throughput's change and interval."""
    price = pricing.usd_per_gpu_hour
    return ArmsValue(USD_PER_MTOK, usd_per_mtok(price, pricing.gpus_baseline, base.output_tok_s),
                     usd_per_mtok(price, pricing.gpus_candidate, cand.output_tok_s),
                     inverse_change(throughput, pricing.gpus_candidate / pricing.gpus_baseline))


def block_joules(found: Sequence[power.Curve], level: lv.RunLevel) -> np.ndarray | None:
    """The selected GPUs' joules in each of the run's block windows at `level` (None: not measured)."""
    blocks = level.samples.blocks if level.samples is not None else None
    if blocks is None or not found:
        return None
    return power.window_joules(found, blocks.starts, blocks.starts + blocks.window_s)


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _arm(levels: Sequence[lv.RunLevel], joules: Sequence[np.ndarray | None]) -> tuple[float | None, ...]:
    """(watts, joules per token, tokens per joule): each the median over the runs that measured energy."""
    watts, per_token, per_joule = [], [], []
    for level, j in zip(levels, joules, strict=True):
        if j is None:
            continue
        energy, blocks = float(j.sum()), level.samples.blocks
        seconds, tokens = float(blocks.window_s.sum()), float(blocks.tokens.sum())
        if seconds > 0:
            watts.append(energy / seconds)
        if tokens > 0 and energy > 0:
            per_token.append(energy / tokens)
            per_joule.append(tokens / energy)
    return _median(watts), _median(per_token), _median(per_joule)


def _sums(levels: Sequence[lv.RunLevel], joules: Sequence[np.ndarray], codes: np.ndarray, count: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per unit: joules, output tokens and seconds of the arm's block windows in it."""
    blocks = [level.samples.blocks for level in levels]

    def per_unit(values: list[np.ndarray]) -> np.ndarray:
        return np.bincount(codes, np.concatenate(values), count)

    return (per_unit(list(joules)), per_unit([b.tokens for b in blocks]),
            per_unit([b.window_s for b in blocks]))


def energy_values(base: Sequence[lv.RunLevel], base_joules: Sequence[np.ndarray | None],
                  cand: Sequence[lv.RunLevel], cand_joules: Sequence[np.ndarray | None]
                  ) -> tuple[ArmsValue, ...]:
    """Power, joules per token and tokens per joule per arm; their changes with intervals over the level's
    units when every run of both arms measured its energy (else the change alone); () when neither arm did."""
    b, c = _arm(base, base_joules), _arm(cand, cand_joules)
    if all(x is None for x in (*b, *c)):
        return ()
    keys = (POWER_W, JOULES_PER_TOKEN, TOKENS_PER_JOULE)
    changes = {k: Interval(stats.change_pct(bv, cv), None, None, method="no units")
               for k, bv, cv in zip(keys[:2], b, c, strict=False)}
    measured = all(j is not None for j in (*base_joules, *cand_joules))
    if measured and all(level.samples is not None for level in (*base, *cand)):
        lay = lv.layout(base, cand)
        cand_units = lay.base if lay.paired else lay.cand
        bj, bt, bs = _sums(base, base_joules, lay.base_blocks, lay.base.count)
        cj, ct, cs = _sums(cand, cand_joules, lay.cand_blocks, cand_units.count)
        changes[POWER_W] = stats.ratio_change(bj, bs, cj, cs, lay.base, lay.cand,
                                              point_change=changes[POWER_W].estimate)
        changes[JOULES_PER_TOKEN] = stats.ratio_change(bj, bt, cj, ct, lay.base, lay.cand,
                                                       point_change=changes[JOULES_PER_TOKEN].estimate)
    changes[TOKENS_PER_JOULE] = inverse_change(changes[JOULES_PER_TOKEN])
    return tuple(ArmsValue(k, bv, cv, changes[k]) for k, bv, cv in zip(keys, b, c, strict=True))


def _word(change: Interval, noise_pct: float) -> str:
    """How speculation moved a lower-is-better quantity, as far as its interval shows."""
    found = stats.classify(change, noise_pct, lower_is_better=True)
    return {BETTER: "cuts", WORSE: "raises", SAME: "leaves about the same"}.get(found, "may change")


def _phrase(lv_: LevelVerdict, key: str, unit: str, fmt: str, noise_pct: float) -> str | None:
    found = next((v for v in lv_.economy if v.key == key), None)
    if found is None or found.baseline is None or found.candidate is None:
        return None
    change = found.change
    ci = (f" [{change.lo:+.1f}, {change.hi:+.1f}]" if change.measured else "")
    shown = "" if change.estimate is None else f" ({change.estimate:+.1f}%{ci})"
    return (f"at {level_label(lv_.users)} speculation {_word(change, noise_pct)} {unit} from "
            f"{fmt.format(found.baseline)} to {fmt.format(found.candidate)}{shown}")


def headline(levels: Sequence[LevelVerdict], noise_pct: float, serving: int | None = None) -> str:
    """The summary's sentences on cost and energy ('At 16 users speculation cuts the cost per million
    output tokens from $1.84 to $1.21 (-34.2% [-40.1, -28.0])'): at the serving level when given (the
    nearest measured), else at every level; '' when neither was priced or measured."""
    if serving is not None and levels:
        levels = [min(levels, key=lambda x: (abs(x.users - serving), -x.users))]
    out = []
    for key, unit, fmt in ((USD_PER_MTOK, "the cost per million output tokens", "${:.2f}"),
                           (JOULES_PER_TOKEN, "the energy per output token", "{:.3f} J")):
        parts = [p for level in levels if (p := _phrase(level, key, unit, fmt, noise_pct)) is not None]
        if parts:
            text = "; ".join(parts)
            out.append(text[0].upper() + text[1:] + ".")
    return " ".join(out)
