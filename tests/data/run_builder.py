"""Write contract-conformant run files: requests CSV, HDR latency JSON, server metrics from real captures.

The runs follow a simple roofline: a decode step costs a fixed floor plus a share per token verified, so
speculation wins at 1 user (memory-bound) and loses at 64 (compute-bound). The server counters are the real
vLLM 0.32 n-gram capture, interpolated between its before and after scrape in proportion to tokens produced.
"""

from __future__ import annotations

import csv
import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from locust_spec.core.answers import fingerprint, whitespace_hash
from locust_spec.metrics.batch import INFERENCE_SUM
from locust_spec.metrics.counters import RUNNING
from locust_spec.metrics.exposition import Sample, Snapshot, parse_exposition, rows_from_snapshot
from locust_spec.metrics.power import ENERGY, POWER
from locust_spec.recording.histograms import LatencyHistograms
from locust_spec.recording.records import COLUMNS
from tests.support import REFERENCE

CAPTURES = REFERENCE / "vllm-0.32-cpu"
# The capture's own per-position acceptance (988, 708, 528, 395 accepted of 1032 drafts per position).
PER_POSITION = (0.794, 0.569, 0.424, 0.318)
T0 = 1_800_000_000.0
COUNTER_SUFFIXES = ("_total", "_sum", "_count", "_bucket")
POWER_URL = "http://127.0.0.1:9400/metrics"
IDLE_W = 60.0
SCRAPES_PER_LEVEL = 4


@dataclass
class ArmSpec:
    """How one arm behaves: speculation on or off, and the shape of the load."""

    speculative: bool
    levels: tuple[int, ...] = (1, 64)
    # Long enough for several 5 s blocks per arm and level: the units spec-verdict's intervals resample.
    requests_per_user: dict[int, int] = field(default_factory=lambda: {1: 60, 64: 8})
    output_tokens: int = 100
    classes: tuple[str, ...] = ("json", "code", "creative")
    per_request_stats: bool = True
    server_metrics: bool = True
    warnings: tuple[str, ...] = ()
    client_late_share: dict[int, float] | None = None
    seed: int = 1
    # Every this many seconds from each level's start (the scraper's interval) instead of evenly spaced
    # scrapes ending at the level's last request.
    scrape_every_s: float | None = None
    # A draft the target never accepts: one token per chunk, accepted counters frozen.
    rejects_all: bool = False
    # Prompt classes whose drafts the target never accepts (a translation among copying tasks): one token
    # per chunk and no accepted tokens in their per-request stats; the server's counters stay the capture's.
    rejecting_classes: tuple[str, ...] = ()
    # The /metrics texts before and after the load (default: the real vLLM 0.32 captures).
    metrics_texts: tuple[str, str] | None = None
    # Prompt ids per class, and the share of them whose answer this arm changes (at character 100).
    prompts_per_class: int = 50
    changed_answers: float = 0.0
    # The share of prompts whose answer this arm writes with one more space (a whitespace-only difference),
    # and of calls whose answer is new each time (a server whose answers change between calls).
    whitespace_answers: float = 0.0
    unstable_answers: float = 0.0
    # False: PREFIX_requests.csv without the answer's columns (a CSV written before them, or cut down).
    answer_columns: bool = True
    # Each user's i-th request asks prompt i of its class (every arm the same prompts, none twice per user)
    # instead of a random one.
    prompt_per_request: bool = False
    # PREFIX_run.json: the model served (its /v1/models root); None writes none, as runs before it.
    model_root: str | None = "/models/tiny-llama"
    # PREFIX_run.json's load settings replaced (e.g. {"temperature": 0.7}) and its server's version.
    load: dict = field(default_factory=dict)
    server_version: str = "0.32.0"
    locust_args: tuple[str, ...] = ()
    # PREFIX_run.json's speculative_config (schema 2) as given to Locust's --speculative-config.
    speculative_config: object | None = None
    # A DCGM exporter beside the server (POWER_URL, scraped every second): per GPU (`gpu` label 0, 1, ...)
    # these watts while any request is in flight, IDLE_W otherwise; its energy counter integrates them
    # exactly, its power gauge reads them with a +-10% ripple (DCGM's samples fluctuate around the mean).
    gpu_watts: tuple[float, ...] = ()
    power_series: tuple[str, ...] = (ENERGY, POWER)


def record(prefix: Path, arm: ArmSpec) -> dict:
    """The run's PREFIX_run.json as the plugin writes it (recording/provenance.py)."""
    return {"schema": 1, "run_id": hashlib.sha256(str(prefix).encode()).hexdigest()[:32],
            "started_unix_s": T0, "ended_unix_s": T0 + 60.0, "tests": 1,
            "command": ["locust", "-f", "chat.py", "--headless", "--csv", str(prefix), *arm.locust_args],
            "host": "http://127.0.0.1:8000", "model": "tiny-llama",
            "server": {"models": [{"id": "tiny-llama", "root": arm.model_root, "max_model_len": 2048}],
                       "version": arm.server_version, "errors": []},
            "load": {"prompts": [{"set": c, "file": c, "builtin": True, "weight": 1.0, "prompts": 60,
                                  "sha256": hashlib.sha256(c.encode()).hexdigest()} for c in arm.classes],
                     "seed": 0, "max_tokens": None, "default_max_tokens": 256, "ignore_eos": False,
                     "temperature": 0.0, "response_format": None, "client": "fast", **arm.load},
            "tools": {"locust_spec": "0.1.0", "locust": "2.47.0", "python": "3.11.7"},
            "machine": {"cores": 2, "runner": "local", "workers": 0},
            **({"schema": 2, "speculative_config": {"config": arm.speculative_config, "source": "given"}}
               if arm.speculative_config is not None else {})}


def _share(prompt_id: str, salt: str) -> float:
    return int(hashlib.sha256((salt + prompt_id).encode()).hexdigest(), 16) % 1000 / 1000


def answer(prompt_id: str, arm: ArmSpec, rng: random.Random) -> tuple[str, str, str]:
    """The answer's fingerprint and whitespace hash: one text per prompt, changed at character 100 for a
    share of prompts, a space doubled at character 50 for another, new on a share of calls."""
    text = f"{prompt_id}: " + "the same greedy answer " * 12
    if _share(prompt_id, "") < arm.changed_answers:
        text = text[:100] + "#" + text[101:]
    if _share(prompt_id, "ws") < arm.whitespace_answers:
        at = text.index(" ", 50)
        text = text[:at] + " " + text[at:]
    if arm.unstable_answers and rng.random() < arm.unstable_answers:
        text = text[:80] + f"{rng.random():.9f}" + text[80:]
    return (*fingerprint([text]), whitespace_hash(text))


def step_ms(users: int, speculative: bool) -> float:
    tokens_verified = users * (1 + len(PER_POSITION)) if speculative else users
    return 10.0 + 0.3 * tokens_verified + (1.0 if speculative else 0.0)


def _chunk_sizes(rng: random.Random, n: int, speculative: bool) -> list[int]:
    sizes, left = [], n
    while left > 0:
        size = 1
        if speculative:
            prev = 1.0
            for p in PER_POSITION:
                if rng.random() >= p / prev:
                    break
                size, prev = size + 1, p
        size = min(size, left)
        sizes.append(size)
        left -= size
    return sizes


def _request(rng, start, users, arm, cls, warmup, index):
    step = step_ms(users, arm.speculative)
    rejects = arm.rejects_all or cls in arm.rejecting_classes
    sizes = _chunk_sizes(rng, arm.output_tokens, arm.speculative and not rejects)
    gaps = [step * rng.uniform(0.95, 1.05) for _ in sizes[1:]]
    itl = [g / size for g, size in zip(gaps, sizes[1:], strict=True) for _ in range(size)]
    ttft = 40.0 + step * rng.uniform(0.95, 1.05)
    e2e = ttft + sum(gaps)
    draft = accepted = None
    if arm.speculative and arm.per_request_stats:
        draft = len(sizes) * len(PER_POSITION)
        accepted = 0 if rejects else arm.output_tokens - len(sizes)
    prompt_id = f"{cls}-{index if arm.prompt_per_request else rng.randrange(arm.prompts_per_class)}"
    output_hash, output_marks, output_hash_ws = answer(prompt_id, arm, rng)
    row = {"start_unix_s": f"{start:.6f}", "level_users": users, "prompt_class": cls,
           "prompt_id": prompt_id, "prompt_tokens": 120, "output_hash": output_hash,
           "output_marks": output_marks, "output_hash_ws": output_hash_ws,
           "output_tokens": arm.output_tokens,
           "tokens_estimated": 0, "chunks": len(sizes), "max_tokens_per_chunk": max(sizes),
           "ttft_ms": f"{ttft:.3f}", "tpot_ms": f"{sum(gaps) / (arm.output_tokens - 1):.3f}",
           "e2e_ms": f"{e2e:.3f}", "itl_p50_ms": f"{sorted(itl)[len(itl) // 2]:.3f}",
           "itl_p99_ms": f"{sorted(itl)[int(len(itl) * 0.99)]:.3f}",
           "chunk_gap_p50_ms": f"{sorted(gaps)[len(gaps) // 2]:.3f}", "finish_reason": "length",
           "spec_accepted_tokens": "" if accepted is None else accepted,
           "spec_draft_tokens": "" if draft is None else draft, "error": "", "warmup": int(warmup)}
    return row, {"ttft": [ttft], "itl": itl, "chunk_gap": gaps, "tpot": [float(row["tpot_ms"])], "e2e": [e2e]}


def _capture(name: str) -> list[Sample]:
    return parse_exposition((CAPTURES / name).read_text())


def _sample_at(s: Sample, final: dict, done: float, running: float, busy_s: float) -> Sample:
    """One captured sample at a scrape: counters interpolated by `done`, the running gauge and the
    running-time counter from the requests in flight."""
    if s.metric == INFERENCE_SUM:
        return Sample(s.metric, s.labels, s.value + busy_s)
    if s.metric.endswith(COUNTER_SUFFIXES):
        end = final.get((s.metric, s.labels), s.value)
        return Sample(s.metric, s.labels, s.value + (end - s.value) * done)
    return Sample(s.metric, s.labels, running) if s.metric == RUNNING else s


def _server_rows(arm: ArmSpec, requests: list[tuple[float, float, int]], scrape_times: list[float]):
    """Scrapes interpolated between the real before/after captures by the share of tokens produced; the
    running gauge is the number of requests in flight at the scrape, and the running-time counter grows by
    the time they have spent in flight (as vLLM's does), so the two agree."""
    stem = "metrics_ngram" if arm.speculative else "metrics_spec_off"
    if arm.metrics_texts is not None:
        before, after = (parse_exposition(text) for text in arm.metrics_texts)
    else:
        before, after = _capture(f"{stem}_before.txt"), _capture(f"{stem}_after.txt")
    final = {(s.metric, s.labels): s.value for s in after
             if not (arm.rejects_all and "accepted" in s.metric)}
    total = sum(tokens for _, _, tokens in requests)
    for t in scrape_times:
        done = sum(tokens * min(1.0, max(0.0, (t - s) / (e - s))) for s, e, tokens in requests) / total
        running = float(sum(1 for s, e, _ in requests if s <= t < e))
        busy_s = sum(min(t, e) - s for s, e, _ in requests if s < t)
        samples = tuple(_sample_at(s, final, done, running, busy_s) for s in before)
        yield from rows_from_snapshot(Snapshot(t, "http://127.0.0.1:8000/metrics", samples))


def _busy_s(spans: list[tuple[float, float, int]], t: float) -> float:
    """Seconds up to `t` during which any request was in flight."""
    busy, reach = 0.0, -float("inf")
    for s, e, _ in sorted(spans):
        s, e = max(s, reach), min(e, t)
        if e > s:
            busy += e - s
        reach = max(reach, e)
    return busy


def _power_rows(arm: ArmSpec, spans: list[tuple[float, float, int]], end: float):
    """The DCGM exporter's scrapes, one a second from T0 to `end`."""
    for k in range(int(end - T0) + 2):
        t = T0 + k
        busy = _busy_s(spans, t)
        loaded = any(s <= t < e for s, e, _ in spans)
        samples = []
        for gpu, watts in enumerate(arm.gpu_watts):
            labels = (("UUID", f"GPU-{gpu}"), ("gpu", str(gpu)))
            if ENERGY in arm.power_series:
                joules = IDLE_W * (t - T0) + (watts - IDLE_W) * busy
                samples.append(Sample(ENERGY, labels, 5e9 + joules * 1000.0))
            if POWER in arm.power_series:
                samples.append(Sample(POWER, labels, (watts if loaded else IDLE_W) * (1 + 0.1 * ((-1) ** k))))
        yield from rows_from_snapshot(Snapshot(t, POWER_URL, tuple(samples)))


def write_run(prefix: Path, arm: ArmSpec) -> Path:
    """Write PREFIX_requests.csv, _latency.json, _server_metrics.csv and _summary.json; return the prefix."""
    rng = random.Random(arm.seed)
    hists = LatencyHistograms()
    rows, spans, scrapes = [], [], [T0]
    now = T0 + 0.5
    for users in arm.levels:
        scrapes.append(now)
        level_end = now
        for user in range(users):
            t = now + user * 0.001
            for i in range(arm.requests_per_user[users]):
                cls = arm.classes[(user + i) % len(arm.classes)]
                row, measured = _request(rng, t, users, arm, cls, warmup=i == 0, index=i)
                rows.append(row)
                for metric, values in measured.items():
                    hists.record(metric, cls, users, values, warmup=i == 0)
                end = t + float(row["e2e_ms"]) / 1000.0
                spans.append((t, end, arm.output_tokens))
                t = end + 0.001
                level_end = max(level_end, end)
        if arm.scrape_every_s:
            scrapes += [now + k * arm.scrape_every_s
                        for k in range(1, int((level_end - now) / arm.scrape_every_s) + 1)]
        else:
            scrapes += [now + (level_end - now) * k / SCRAPES_PER_LEVEL
                        for k in range(1, SCRAPES_PER_LEVEL + 1)]
        now = level_end + 0.2
    scrapes.append(now)
    rows.sort(key=lambda r: float(r["start_unix_s"]))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}_requests.csv", "w", newline="") as fh:
        answer_columns = ("output_hash", "output_marks", "output_hash_ws")
        names = [c for c in COLUMNS if arm.answer_columns or c not in answer_columns]
        writer = csv.DictWriter(fh, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    Path(f"{prefix}_latency.json").write_bytes(orjson.dumps(hists.to_json()))
    if arm.server_metrics:
        with open(f"{prefix}_server_metrics.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(("timestamp_unix_s", "url", "metric", "labels", "value"))
            writer.writerows(_server_rows(arm, spans, sorted(scrapes)))
            if arm.gpu_watts:
                writer.writerows(_power_rows(arm, spans, now))
    checks = {f"check{i}": {"name": f"check{i}", "warning": w} for i, w in enumerate(arm.warnings)}
    client = {}
    if arm.client_late_share is not None:
        client["generators"] = {"by_level": {
            str(users): {"samples": 1000, "late_samples": round(share * 1000),
                         "late_share": share, "max_lag_ms": 20.0 if share else 0.5}
            for users, share in arm.client_late_share.items()}}
    summary = {"schema": 1, "warnings": list(arm.warnings), "client": client, "crosscheck": checks}
    Path(f"{prefix}_summary.json").write_bytes(orjson.dumps(summary))
    if arm.model_root is not None:
        Path(f"{prefix}_run.json").write_bytes(orjson.dumps(record(prefix, arm)))
    return prefix


def write_pair(folder: Path, **candidate_overrides) -> tuple[Path, Path]:
    """A baseline (speculation off) and a candidate (n-gram) run of the same load."""
    base = write_run(folder / "off" / "run", ArmSpec(speculative=False, seed=1))
    cand = write_run(folder / "ngram" / "run", ArmSpec(speculative=True, seed=2, **candidate_overrides))
    return base, cand
