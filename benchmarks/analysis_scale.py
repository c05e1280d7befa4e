"""How long spec-verdict takes, and how much memory, on 10k / 100k / 1M request rows per arm.

Usage: python benchmarks/analysis_scale.py [--design sequential|interleaved] [ROWS ...]
       (default: interleaved, 10000 100000 1000000)
Each size is generated into a temporary folder, then analysed in a fresh process that reports its wall
time and peak resident memory (the target: 1M rows per arm under 10 s and under 1 GB). Interleaved: both
arms' runs share one clock and a PREFIX_design.json, every request starts in its arm's blocks (ABBA,
48 blocks a level), so the intervals are paired over block pairs; sequential: one arm after the other,
each level cut into blocks of time.
"""

from __future__ import annotations

import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust_spec.core.answers import fingerprint  # noqa: E402
from locust_spec.core.design import INTERLEAVED, Design  # noqa: E402
from locust_spec.metrics.exposition import Sample, Snapshot, rows_from_snapshot  # noqa: E402
from locust_spec.recording.histograms import LatencyHistograms  # noqa: E402
from locust_spec.recording.records import COLUMNS  # noqa: E402

LEVELS = (1, 8, 64)
T0 = 1_800_000_000.0
PROMPTS = 360  # the built-in sets: each prompt answered the same way (temperature 0), ~400 characters
ANSWERS = [fingerprint([f"answer to prompt {i}: " + "the same greedy text " * 19]) for i in range(PROMPTS)]


def level_seconds(rows: int) -> float:
    """One level's length for `rows` requests per arm: the slowest level's requests, back to back per user."""
    per_level = rows // len(LEVELS)
    e2e_ms = {users: 100 * max(10 + 0.3 * users, (10 + 1.5 * users) / 3) for users in LEVELS}  # write_arm's
    return 2 * max(per_level * e2e_ms[users] / 1000 / users for users in LEVELS)  # two arms take turns


def starts_in(design: Design | None, level: int, t0: float, span: float, n: int,
              rng: np.random.Generator) -> np.ndarray:
    """n start times: uniform over the level's span, or over this arm's blocks of it."""
    if design is None:
        return t0 + np.sort(rng.uniform(0, span, n))
    own = design.own_blocks(level)
    picks = rng.integers(0, len(own), n)
    begin = np.array([b.start_unix_s for b in own])[picks]
    return np.sort(begin + rng.uniform(design.warmup_s, design.block_s, n))


def write_arm(prefix: Path, rows: int, speculative: bool, seed: int, design: Design | None) -> None:
    rng = np.random.default_rng(seed)
    per_level = rows // len(LEVELS)
    frames, hists, spans = [], LatencyHistograms(), []
    start = T0
    for index, users in enumerate(LEVELS):
        step = 10 + 0.3 * users * (5 if speculative else 1)
        tpc = 3.0 if speculative else 1.0
        e2e = rng.normal(100 * step / tpc, step, per_level).clip(1)
        if design is not None:
            start = design.level_start(index)
        starts = starts_in(design, index, start, per_level * e2e.mean() / 1000 / users, per_level, rng)
        prompt = rng.integers(0, PROMPTS, per_level)
        frame = pd.DataFrame({
            "start_unix_s": starts, "level_users": users,
            "prompt_class": rng.choice(["json", "code", "creative"], per_level),
            "prompt_id": [f"p-{i}" for i in prompt],
            "prompt_tokens": 120, "output_tokens": 100, "tokens_estimated": 0,
            "chunks": int(100 / tpc), "max_tokens_per_chunk": int(tpc) + 1,
            "ttft_ms": rng.normal(50, 5, per_level), "tpot_ms": e2e / 100, "e2e_ms": e2e,
            "itl_p50_ms": step / tpc, "itl_p99_ms": step, "chunk_gap_p50_ms": step, "finish_reason": "length",
            "spec_accepted_tokens": 60 if speculative else None,
            "spec_draft_tokens": 130 if speculative else None,
            "error": np.where(rng.random(per_level) < 0.001, "http_500: boom", None),
            "warmup": (np.arange(per_level) < users).astype(int),
            "output_hash": [ANSWERS[i][0] for i in prompt], "output_marks": [ANSWERS[i][1] for i in prompt],
        })
        frames.append(frame[list(COLUMNS)])
        for metric, values in (("itl", rng.exponential(step / tpc, 200_000)), ("ttft", frame["ttft_ms"]),
                               ("chunk_gap", rng.normal(step, 1, 50_000).clip(0.1))):
            hists.record(metric, "json", users, list(values), warmup=False)
        end = float((starts + e2e / 1000).max())
        spans.append((start, end))
        start = end + 1
    pd.concat(frames).to_csv(f"{prefix}_requests.csv", index=False, float_format="%.3f")
    if design is not None:
        Path(f"{prefix}_design.json").write_text(json.dumps(design.to_dict()))
    Path(f"{prefix}_latency.json").write_text(json.dumps(hists.to_dict()))
    with open(f"{prefix}_server_metrics.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(("timestamp_unix_s", "url", "metric", "labels", "value"))
        total = 0.0
        for lo, hi in spans:
            for t in np.linspace(lo, hi, 20):
                total += 1000
                labels = (("engine", "0"), ("model_name", "m"))
                samples = (
                    Sample("vllm:generation_tokens_total", labels, total * 3),
                    *((Sample("vllm:spec_decode_num_drafts_total", labels, total),
                       Sample("vllm:spec_decode_num_draft_tokens_total", labels, total * 4),
                       Sample("vllm:spec_decode_num_accepted_tokens_total", labels, total * 2.6))
                      if speculative else ()),
                )
                out.writerows(rows_from_snapshot(Snapshot(float(t), "http://x/metrics", samples)))


def measure(base: str, cand: str) -> None:
    from locust_spec.analysis.api import render, verdict_for

    t = time.perf_counter()
    verdict = verdict_for([Path(base)], [Path(cand)])
    render(verdict, "text")
    wall = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": round(wall, 2), "peak_rss_mb": round(peak_mb), "verdict": verdict.verdict}))


def main(sizes: list[int], kind: str) -> None:
    for rows in sizes:
        plan = None
        if kind == INTERLEAVED:
            stage_s = level_seconds(rows)
            plan = Design.planned(INTERLEAVED, LEVELS, stage_s, 0.5, 2, stage_s / 48)
        with tempfile.TemporaryDirectory() as tmp:
            base, cand = Path(tmp) / "off", Path(tmp) / "on"
            write_arm(base, rows, False, 1, plan.for_slot(0, T0) if plan else None)
            write_arm(cand, rows, True, 2, plan.for_slot(1, T0) if plan else None)
            mb = Path(f"{cand}_requests.csv").stat().st_size / 1e6
            result = subprocess.run([sys.executable, __file__, "--measure", str(base), str(cand)],
                                    capture_output=True, text=True, check=True)
            print(f"{rows:>9} rows/arm ({mb:.0f} MB CSV, {kind}): {result.stdout.strip()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        measure(sys.argv[2], sys.argv[3])
    else:
        args = sys.argv[1:]
        kind = INTERLEAVED
        if args[:1] == ["--design"]:
            kind, args = args[1], args[2:]
        main([int(a) for a in args] or [10_000, 100_000, 1_000_000], kind)
