"""Server counters over a time window: Prometheus-style increases across restarts, acceptance (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from locust_spec.metrics.exposition import (
    Labels,
    Parsed,
    Sample,
    Snapshot,
    parse_exposition,
    parse_exposition_checked,
    snapshots_from_rows,
)

__all__ = [
    "Parsed", "Sample", "Snapshot", "SpecWindow", "WindowAccumulator",
    "parse_exposition", "parse_exposition_checked", "snapshots_from_rows", "spec_window",
]

# vLLM V1 and llama.cpp expose the same counter schema under their own prefix.
V1_SCHEMA = {"vllm": "vllm-v1", "llamacpp": "llamacpp"}
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total",
)
V0_EMITTED = "vllm:spec_decode_num_emitted_tokens_total"
V0_RATE = "vllm:spec_decode_draft_acceptance_rate"
V0_EFFICIENCY = "vllm:spec_decode_efficiency"
# A diffusion LM (vLLM's dLLM models) reuses the spec-decode machinery and counts denoising steps, canvas
# positions and committed tokens instead: it does not speculate at all.
DIFFUSION_PREFIX = "vllm:diffusion_"
DIFFUSION_KIND = "diffusion"
SGLANG_RATE = "sglang:spec_accept_rate"
SGLANG_LENGTH = "sglang:spec_accept_length"
GENERATION = "vllm:generation_tokens_total"
SUCCESS = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}
# finished_reason values that are not a request served to its end.
UNSUCCESSFUL = frozenset({"abort", "error"})

COUNTERS = frozenset(
    {f"{p}:{name}" for p in V1_SCHEMA for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)}
    | {V0_EMITTED, GENERATION, SUCCESS}
    | {f"{h}_{part}" for h in HISTOGRAMS.values() for part in ("sum", "count")}
)
GAUGES = frozenset({V0_RATE, V0_EFFICIENCY, SGLANG_RATE, SGLANG_LENGTH})
_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count")


def created_name(metric: str) -> str:
    """The `_created` series prometheus_client exposes beside a counter or histogram sample."""
    for suffix in ("_total", "_sum", "_count"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)] + "_created"
    return metric + "_created"


def family_name(metric: str) -> str:
    for suffix in _SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


@dataclass(frozen=True)
class SpecWindow:
    """What the server's counters say about one time window, summed over engines and URLs.

    Counts are None when the server does not expose them; ratios are None when undefined.
    """

    start_unix_s: float
    end_unix_s: float
    scrapes: int
    server_kind: str
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    per_position: tuple[float, ...]
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    generation_tokens: float | None
    requests_success: float | None
    requests_aborted: float | None
    mean_ttft_ms: float | None
    mean_itl_ms: float | None
    mean_tpot_ms: float | None
    mean_e2e_ms: float | None
    max_requests_running: float | None
    max_requests_waiting: float | None
    max_kv_cache_usage: float | None
    resets: int
    families_seen: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def absence_note(self) -> str | None:
        """Why there is no acceptance: expected of a server without speculation, so not among `notes`."""
        if self.server_kind != "unknown" or not self.scrapes:
            return None
        return ("no speculative-decoding acceptance counters found; metric families seen by prefix: "
                + _prefix_counts(self.families_seen))


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


class WindowAccumulator:
    """Folds snapshots in time order into increases; memory depends on the series exposed, not on time.

    A URL's counters restarted when one of them fell or a `_created` timestamp changed; then every
    counter of that URL counts from zero again, as Prometheus `increase()` does.
    """

    def __init__(self) -> None:
        self._prev: dict[str, dict[tuple[str, Labels], tuple[float, float | None]]] = {}
        self._increase: dict[tuple[str, Labels], float] = defaultdict(float)
        self._seen: set[str] = set()
        self._gauge_max: dict[tuple[str, str], float] = {}
        self._kv_max: float | None = None
        self._gauge_sum: dict[str, float] = defaultdict(float)
        self._gauge_n: dict[str, int] = defaultdict(int)
        self.resets = 0
        self.scrapes = 0
        self.start_unix_s: float | None = None
        self.end_unix_s: float | None = None

    def add(self, snapshot: Snapshot) -> None:
        self.scrapes += 1
        if self.start_unix_s is None:
            self.start_unix_s = snapshot.timestamp_unix_s
        self.end_unix_s = snapshot.timestamp_unix_s
        values: dict[tuple[str, Labels], float] = {}
        created: dict[tuple[str, Labels], float] = {}
        per_url: dict[str, float] = defaultdict(float)
        for s in snapshot.samples:
            self._seen.add(family_name(s.metric))
            if s.metric in COUNTERS:
                values[(s.metric, s.labels)] = s.value
            elif s.metric.endswith("_created"):
                created[(s.metric, s.labels)] = s.value
            elif s.metric in (RUNNING, WAITING):
                per_url[s.metric] += s.value
            elif s.metric == KV_USAGE:
                self._kv_max = s.value if self._kv_max is None else max(self._kv_max, s.value)
            elif s.metric in GAUGES:
                self._gauge_sum[s.metric] += s.value
                self._gauge_n[s.metric] += 1
        for metric, total in per_url.items():
            key = (snapshot.url, metric)
            self._gauge_max[key] = max(self._gauge_max.get(key, total), total)
        series = {key: (v, created.get((created_name(key[0]), key[1]))) for key, v in values.items()}
        self._step(snapshot.url, series)

    def _step(self, url: str, now: dict[tuple[str, Labels], tuple[float, float | None]]) -> None:
        prev = self._prev.get(url)
        self._prev[url] = now
        if prev is None:
            return
        restarted = any(_restarted(prev[key], state) for key, state in now.items() if key in prev)
        self.resets += restarted
        for key, (value, _) in now.items():
            if restarted:
                self._increase[key] += value
            elif key in prev:
                self._increase[key] += value - prev[key][0]

    def _sum(self, metric: str, exclude: tuple[str, frozenset[str]] | None = None) -> float | None:
        """The increase of `metric` over all its series; None when the server never exposed it."""
        if family_name(metric) not in self._seen:
            return None
        return sum(
            inc
            for (name, labels), inc in self._increase.items()
            if name == metric and not (exclude and dict(labels).get(exclude[0]) in exclude[1])
        )

    def _by_label(self, metric: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (name, labels), inc in self._increase.items():
            if name == metric and label in dict(labels):
                out[dict(labels)[label]] += inc
        return out

    def _mean_ms(self, family: str) -> float | None:
        total, count = self._sum(family + "_sum"), self._sum(family + "_count")
        ratio = _ratio(total, count)
        return ratio * 1000.0 if ratio is not None else None

    def _gauge_mean(self, metric: str) -> float | None:
        return self._gauge_sum[metric] / self._gauge_n[metric] if self._gauge_n.get(metric) else None

    def _peak(self, metric: str) -> float | None:
        peaks = [v for (_, m), v in self._gauge_max.items() if m == metric]
        return sum(peaks) if peaks else None

    def window(self) -> SpecWindow:
        kind, prefix = self._kind()
        drafts = draft_tokens = accepted = rate = length = None
        per_position: tuple[float, ...] = ()
        notes: list[str] = []
        if prefix is not None:
            drafts = self._sum(f"{prefix}:{DRAFTS}")
            draft_tokens = self._sum(f"{prefix}:{DRAFT_TOKENS}")
            accepted = self._sum(f"{prefix}:{ACCEPTED}")
            rate = _ratio(accepted, draft_tokens)
            mean_extra = _ratio(accepted, drafts)
            length = 1.0 + mean_extra if mean_extra is not None else None
            by_pos = self._by_label(f"{prefix}:{PER_POS}", "position")
            if drafts:
                per_position = tuple(by_pos[p] / drafts for p in sorted(by_pos, key=int))
            if not drafts:
                notes.append("speculative decoding counters present but no drafts in the window")
        elif kind == "vllm-v0":
            rate = self._gauge_mean(V0_RATE)
            notes.append(
                "vLLM V0 server: its spec-decode counters are known to be inflated (incremented by running"
                " totals), so acceptance is the mean of the draft_acceptance_rate gauge over the scrapes"
            )
        elif kind == "sglang":
            rate, length = self._gauge_mean(SGLANG_RATE), self._gauge_mean(SGLANG_LENGTH)
            notes.append("SGLang server: acceptance is the mean of its spec_accept_* gauges over the scrapes")
        if self.resets:
            notes.append(f"server counters reset {self.resets} time(s) in the window (server restarted?)")
        if self.scrapes < 2:
            notes.append(f"{self.scrapes} scrape(s) in the window: no counter increase can be computed")
        by_reason = self._by_label(SUCCESS, "finished_reason")
        success = self._sum(SUCCESS, ("finished_reason", UNSUCCESSFUL))
        return SpecWindow(
            start_unix_s=self.start_unix_s or 0.0,
            end_unix_s=self.end_unix_s or 0.0,
            scrapes=self.scrapes,
            server_kind=kind,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted=accepted,
            per_position=per_position,
            acceptance_rate=rate,
            mean_acceptance_length=length,
            generation_tokens=self._sum(GENERATION),
            requests_success=success,
            requests_aborted=by_reason.get("abort", 0.0) if success is not None else None,
            mean_ttft_ms=self._mean_ms(HISTOGRAMS["ttft"]),
            mean_itl_ms=self._mean_ms(HISTOGRAMS["itl"]),
            mean_tpot_ms=self._mean_ms(HISTOGRAMS["tpot"]),
            mean_e2e_ms=self._mean_ms(HISTOGRAMS["e2e"]),
            max_requests_running=self._peak(RUNNING),
            max_requests_waiting=self._peak(WAITING),
            max_kv_cache_usage=self._kv_max,
            resets=self.resets,
            families_seen=tuple(sorted(self._seen)),
            notes=tuple(notes),
        )

    def _kind(self) -> tuple[str, str | None]:
        for prefix, kind in V1_SCHEMA.items():
            if f"{prefix}:{family_name(DRAFTS)}" in self._seen:
                return kind, prefix
        if {V0_RATE, V0_EFFICIENCY, family_name(V0_EMITTED)} & self._seen:
            return "vllm-v0", None
        if {SGLANG_RATE, SGLANG_LENGTH} & self._seen:
            return "sglang", None
        if any(f.startswith(DIFFUSION_PREFIX) for f in self._seen):
            return DIFFUSION_KIND, None
        return "unknown", None


def spec_window(snapshots: Sequence[Snapshot], start_unix_s: float, end_unix_s: float) -> SpecWindow:
    """The counters' increases between the first and last snapshot with start <= timestamp <= end.

    Snapshots may be in any order and from several URLs (replicas); each URL's series are followed
    separately, then summed. Nothing is extrapolated to the window's edges.
    """
    acc = WindowAccumulator()
    for snap in sorted(_within(snapshots, start_unix_s, end_unix_s), key=lambda s: s.timestamp_unix_s):
        acc.add(snap)
    return acc.window()


def _prefix_counts(families: Iterable[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for name in families:
        counts[name.split(":", 1)[0] if ":" in name else name.split("_", 1)[0]] += 1
    return ", ".join(f"{p} ({n})" for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _restarted(before: tuple[float, float | None], after: tuple[float, float | None]) -> bool:
    """A counter fell, or its `_created` timestamp changed: the process behind it started again."""
    (v0, c0), (v1, c1) = before, after
    return v1 < v0 or (c0 is not None and c1 is not None and c0 != c1)


def _within(snapshots: Iterable[Snapshot], start: float, end: float) -> Iterable[Snapshot]:
    return (s for s in snapshots if start <= s.timestamp_unix_s <= end)
