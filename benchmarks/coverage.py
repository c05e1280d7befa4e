"""Do the intervals keep their promise at few block pairs? Coverage of zero and power at the reported MDE.

Usage:
  python benchmarks/coverage.py [--trials 400] [--pairs 4,6,12,24] [--seed 1]
  python benchmarks/coverage.py --aa 200 [--pairs 6]

Simulates an interleaved level (ABBA blocks, block pairs as the units) with identical arms under three
kinds of machine trouble, through the project's own functions (stats.quantile_changes for TPOT p50/p90,
stats.ratio_change for output tok/s, Interval.mde_pct):
  drift:    a linear slowdown over the level (the arms' blocks alternate, so it falls on both),
  autocorr: block states following an AR(1) process (rho 0.7),
  neighbour: an on/off neighbour that slows every block it is on in by 30%, switching at random.
Prints, per scenario, quantity and number of block pairs, how often the 95% interval holds 0 before
(old: the cluster bootstrap widened to t for throughput too) and now (new: a paired t on the block
pairs' log ratios for throughput; TPOT's quantiles keep the bootstrap), then the power at the MDE the
level reports: the share of levels with that true change whose interval clears the 2% band.

--aa N: N simulated A/A ladders (levels 1, 16, 64; six tasks; identical arms, the scenarios in turn)
judged by the verdict's own rule (verdict.build_verdict, and tasks as tasks.task_verdicts judges them:
verdict.adjust_family under Benjamini-Hochberg, judge_level): how often a level, a task and the headline
said ship, off or tradeoff, and how many intervals excluded 0, at every layer.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust_spec.analysis import stats  # noqa: E402
from locust_spec.analysis.aa import binomial_interval  # noqa: E402
from locust_spec.analysis.model import ArmMetrics, LevelInput, SpecStats  # noqa: E402
from locust_spec.analysis.multiplicity import BH  # noqa: E402
from locust_spec.analysis.verdict import (  # noqa: E402
    INCONCLUSIVE,
    Thresholds,
    adjust_family,
    build_verdict,
    judge_level,
)

BAND = 2.0
PER_BLOCK = 8
"""Requests per arm and block (one user, ~0.6 s each in 5 s blocks)."""
SCENARIOS = ("drift", "autocorr", "neighbour")


def block_states(rng: np.random.Generator, scenario: str, blocks: int) -> np.ndarray:
    """The machine's slowdown (log) in each block of time, both arms' blocks in time order."""
    t = np.arange(blocks)
    noise = rng.normal(0, 0.05, blocks)
    if scenario == "drift":
        return 0.3 * t / blocks + noise
    if scenario == "autocorr":
        out = np.empty(blocks)
        out[0] = rng.normal(0, 0.1)
        for i in range(1, blocks):
            out[i] = 0.7 * out[i - 1] + rng.normal(0, 0.1 * math.sqrt(1 - 0.49))
        return out + noise
    on = np.empty(blocks, dtype=bool)
    on[0] = rng.random() < 0.5
    for i in range(1, blocks):
        on[i] = on[i - 1] if rng.random() < 0.7 else not on[i - 1]
    return np.log(1.3) * on + noise


def level(rng: np.random.Generator, scenario: str, pairs: int, effect: float = 0.0):
    """One level's arms: per-request TPOT with each request's block pair, and per-pair tokens over seconds.
    `effect`: the candidate's true change of TPOT (log); its throughput changes by the inverse."""
    states = block_states(rng, scenario, 2 * pairs)
    # ABBA: pair i's blocks are time slots 2i and 2i+1, the baseline first in even pairs
    first = np.arange(pairs) % 2 == 0
    base_slot = np.where(first, 2 * np.arange(pairs), 2 * np.arange(pairs) + 1)
    cand_slot = np.where(first, 2 * np.arange(pairs) + 1, 2 * np.arange(pairs))
    units = np.repeat(np.arange(pairs), PER_BLOCK)
    base = np.exp(np.log(20) + states[base_slot][units] + rng.normal(0, 0.25, len(units)))
    cand = np.exp(np.log(20) + effect + states[cand_slot][units] + rng.normal(0, 0.25, len(units)))
    seconds = np.full(pairs, 5.0)
    # a block's tokens: its seconds over its mean TPOT (one stream), with a little per-block spread
    tok_b = np.bincount(units, 1 / base) / PER_BLOCK * 5000 * np.exp(rng.normal(0, 0.02, pairs))
    tok_c = np.bincount(units, 1 / cand) / PER_BLOCK * 5000 * np.exp(rng.normal(0, 0.02, pairs))
    return base, cand, units, tok_b, tok_c, seconds


def intervals(data, pairs: int, seed: int, resamples: int,
              method: str = stats.PAIRED_T) -> dict[str, stats.Interval]:
    """TPOT p50 and p90 (the cluster bootstrap, unchanged) and output tok/s (`method`: the paired t now,
    the bootstrap before) of one level, paired by block pair."""
    base, cand, units, tok_b, tok_c, seconds = data
    paired = stats.Units.single(pairs, "block pairs")
    p50, p90 = stats.quantile_changes(base, units, cand, units, (0.5, 0.9), paired, seed=seed,
                                      resamples=resamples)
    tput = stats.ratio_change(tok_b, seconds, tok_c, seconds, paired, seed=seed, resamples=resamples,
                              method=method)
    return {"tpot_p50_ms": p50, "tpot_p90_ms": p90, "output_tok_s": tput}


TASKS = 6
SPEC = SpecStats(0.6, 3.0, (0.8, 0.6), 100.0, 400.0, 240.0, 1000.0, "vllm-v1",
                 ("vllm:spec_decode_num_drafts",))


def aa_input(rng: np.random.Generator, scenario: str, pairs: int, users: int,
             task: int | None) -> LevelInput:
    """One level of identical arms (or one task's share of its requests) as the verdict reads it."""
    base, cand, units, tok_b, tok_c, seconds = level(rng, scenario, pairs)
    ttft_b, ttft_c = (np.exp(np.log(50) + rng.normal(0, 0.2, len(units))) for _ in range(2))
    if task is not None:  # a task holds every TASKS-th request of each block
        keep = np.arange(len(units)) % TASKS == task
        base, cand, units, ttft_b, ttft_c = base[keep], cand[keep], units[keep], ttft_b[keep], ttft_c[keep]
    paired = stats.Units.single(pairs, "block pairs")
    p50, p90 = stats.quantile_changes(base, units, cand, units, (0.5, 0.9), paired, resamples=400)
    (ttft,) = stats.quantile_changes(ttft_b, units, ttft_c, units, (0.5,), paired, resamples=400)
    tput = stats.ratio_change(tok_b, seconds, tok_c, seconds, paired)

    def arm(values: np.ndarray, ttft_values: np.ndarray, tokens: np.ndarray) -> ArmMetrics:
        return ArmMetrics(len(values), 0, float(np.median(ttft_values)), None, None, float(np.median(values)),
                          None, float(tokens.sum() / seconds.sum()), 1.0, float(np.quantile(values, 0.9)),
                          output_tokens=100 * len(values))

    return LevelInput(users, arm(base, ttft_b, tok_b), arm(cand, ttft_c, tok_c), SPEC,
                      changes={"tpot_p50_ms": p50, "tpot_p90_ms": p90, "ttft_p50_ms": ttft,
                               "output_tok_s": tput})


def aa(runs: int, pairs: int, seed: int) -> None:
    """Identical arms, judged: every ship/off/tradeoff word is false, every interval excluding 0 too."""
    rng, th = np.random.default_rng(seed), Thresholds()
    words = {"levels": [0, 0], "tasks": [0, 0], "headline": [0, 0]}
    excluded = {"levels": [0, 0], "tasks": [0, 0]}
    runs_with_task_word = 0
    for r in range(runs):
        scenario = SCENARIOS[r % len(SCENARIOS)]
        ladder = [aa_input(rng, scenario, pairs, users, None) for users in (1, 16, 64)]
        verdict = build_verdict(ladder, th)
        tasks = [aa_input(rng, scenario, pairs, users, t) for t in range(TASKS) for users in (1, 16, 64)]
        adjusted = adjust_family(tasks, th, "output_tok_s", BH)
        judged = [judge_level(t, th, adjusted=a, exploratory=True)
                  for t, a in zip(tasks, adjusted, strict=True)]
        for layer, found in (("levels", verdict.levels), ("tasks", judged)):
            words[layer][0] += sum(lv.verdict != INCONCLUSIVE for lv in found)
            words[layer][1] += len(found)
            for lv in found:
                for key in ("tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms", "output_tok_s"):
                    ci = lv.changes[key]
                    excluded[layer][0] += ci.measured and not ci.lo <= 0 <= ci.hi
                    excluded[layer][1] += ci.measured
        runs_with_task_word += any(lv.verdict != INCONCLUSIVE for lv in judged)
        words["headline"][0] += verdict.verdict != INCONCLUSIVE
        words["headline"][1] += 1
    print(f"A/A: {runs} ladders (levels 1, 16, 64; {TASKS} tasks; {pairs} block pairs; "
          f"{', '.join(SCENARIOS)} in turn)")
    for layer, (said, of) in words.items():
        low, high = binomial_interval(said, of)
        print(f"  {layer:9} ship/off/tradeoff words: {said} of {of} ({said / of:.1%}, 95% CI "
              f"{low:.1%}-{high:.1%})")
    print(f"  ladders with any per-task word: {runs_with_task_word} of {runs}")
    for layer, (out, of) in excluded.items():
        low, high = binomial_interval(out, of)
        print(f"  {layer:9} 95% intervals excluding 0 (TPOT p50/p90, TTFT p50, tok/s): {out} of {of} "
              f"({out / of:.1%}, 95% CI {low:.1%}-{high:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--pairs", default="4,6,12,24")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--aa", type=int, metavar="N", help="N simulated A/A ladders judged by the rule")
    args = parser.parse_args()
    ladder = [int(x) for x in args.pairs.split(",")]
    if args.aa:
        aa(args.aa, ladder[0] if "," not in args.pairs else 6, args.seed)
        return
    print(f"{'scenario':10} {'quantity':13} {'pairs':>5} {'cover old':>9} {'cover new':>9} {'MDE %':>6} "
          f"{'power':>6}")
    for scenario in SCENARIOS:
        for pairs in ladder:
            rng = np.random.default_rng(args.seed)
            held = {k: [0, 0] for k in ("tpot_p50_ms", "tpot_p90_ms", "output_tok_s")}
            mdes: dict[str, list[float]] = {k: [] for k in held}
            for i in range(args.trials):
                data = level(rng, scenario, pairs)
                before = intervals(data, pairs, i, args.resamples, stats.BOOTSTRAP)
                for key, ci in intervals(data, pairs, i, args.resamples).items():
                    old = before[key]
                    held[key][0] += old.lo <= 0 <= old.hi
                    held[key][1] += ci.lo <= 0 <= ci.hi
                    mde = ci.mde_pct(BAND)
                    if mde is not None:
                        mdes[key].append(mde)
            for key in held:
                mde = float(np.median(mdes[key]))
                # TPOT slower by the MDE; throughput: the candidate's TPOT faster so tok/s rises by it
                sign = 1 if key != "output_tok_s" else -1
                effect = sign * math.log1p(mde / 100)
                found = 0
                power_rng = np.random.default_rng(args.seed + 1)
                for i in range(args.trials):
                    ci = intervals(level(power_rng, scenario, pairs, effect), pairs, i, args.resamples)[key]
                    found += stats.classify(ci, BAND, lower_is_better=True) in (stats.WORSE, stats.BETTER)
                print(f"{scenario:10} {key:13} {pairs:5d} {held[key][0] / args.trials:9.1%} "
                      f"{held[key][1] / args.trials:9.1%} {mde:6.1f} {found / args.trials:6.1%}", flush=True)


if __name__ == "__main__":
    main()
