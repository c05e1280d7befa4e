"""Server counters over a time window: increases across restarts, judged per series; acceptance (pure).

What a window counts, and why:
- **Per series, restarts by `_created`.** A series whose `_created` timestamp changed counts from zero (the
  process behind it started again); one whose `_created` stayed and whose value fell did not restart.
  Without `_created`, a fall is a restart only when the URL's process restarted
  (`process_start_time_seconds` changed) or most of its counters fell together, as a restart makes them.
  Before, one counter that fell by 1 made every counter at the URL count its lifetime total again.
- **Named anomalies, left out.** A fall that is no restart, a value that is not a finite number (NaN, +Inf)
  and a series exposed twice in one scrape are anomalies: the scrape is left out for that model's counters
  (the window bridges it from the scrape before to the next one) and each is named in the notes.
- **The model under test.** A /metrics shared by several models (`model_name`) is counted for the model
  under test only; the others are named as left out. Not knowing the model, a window counts a /metrics
  with one model, and none of several.
- **Another speculative config.** vLLM exposes one per-position acceptance series per draft position
  (`num_speculative_tokens`): when their number changes between two scrapes of a model at a URL, the
  server came back with another config (k=4 to k=1). The window's acceptance counters then count from
  the change on, so its per-position acceptance is one config's, and the change is named. Before, it read
  as "counters reset (server restarted?)" and the positions of both configs were divided by the drafts of
  both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
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
    "Anomaly", "Parsed", "Sample", "Snapshot", "SpecWindow", "WindowAccumulator",
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

SPEC_COUNTERS = frozenset(f"{p}:{name}" for p in V1_SCHEMA
                          for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS))
PER_POSITION = frozenset(f"{p}:{PER_POS}" for p in V1_SCHEMA)
COUNTERS = frozenset(
    SPEC_COUNTERS
    | {V0_EMITTED, GENERATION, SUCCESS}
    | {f"{h}_{part}" for h in HISTOGRAMS.values() for part in ("sum", "count")}
)
GAUGES = frozenset({V0_RATE, V0_EFFICIENCY, SGLANG_RATE, SGLANG_LENGTH})
_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count")
MODEL_LABEL = "model_name"
PROCESS_START = "process_start_time_seconds"
# Anomaly kinds: the scrape that shows one is left out for the model's counters.
DECREASE, NOT_FINITE, DUPLICATE = "counter_decrease", "not_finite", "duplicate_series"
_ANOMALY_TEXT = {
    DECREASE: "fell without a restart",
    NOT_FINITE: "is not a finite number",
    DUPLICATE: "is exposed twice in one scrape",
}
MAX_NAMED = 5  # models or series named in one note line
Counting = frozenset[str | None]
"""The `model_name` values a window counts; None stands for series without the label."""


def created_name(metric: str) -> str:
    """The `_created` series prometheus_client exposes beside a counter or histogram sample."""
    for suffix in ("_total", "_sum", "_count"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)] + "_created"
    return metric + "_created"


CREATED = frozenset(created_name(m) for m in COUNTERS)
READ = COUNTERS | CREATED | GAUGES | {RUNNING, WAITING, KV_USAGE}
"""Every sample a window reads: an anomaly in one of these leaves the scrape out."""


def family_name(metric: str) -> str:
    for suffix in _SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


@dataclass(frozen=True)
class Anomaly:
    """Samples a window could not use (see the module doc): `count` scrapes of `url` showed it, the first at
    `first_unix_s`; `detail` the first's values."""

    kind: str
    url: str
    series: str
    count: int
    first_unix_s: float
    detail: str

    def note(self) -> str:
        return (f"server counter anomaly ({self.kind}) at {self.url}: {self.series} "
                f"{_ANOMALY_TEXT[self.kind]} ({self.detail}) in {self.count} scrape(s): "
                "left out of the window")


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
    models: tuple[str, ...] = ()
    """The `model_name` values counted (none when the counters carry no such label)."""
    other_models: tuple[str, ...] = ()
    """The `model_name` values exposed at the same /metrics and left out."""
    anomalies: tuple[Anomaly, ...] = ()

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
    """Folds snapshots in time order into per-series increases (see the module doc for restarts, anomalies
    and models); memory depends on the series exposed, not on time."""

    def __init__(self) -> None:
        # per (url, model_name or None): the last usable scrape's series -> (value, _created)
        self._prev: dict[tuple[str, str | None], dict[tuple[str, Labels], tuple[float, float | None]]] = {}
        self._started: dict[str, float] = {}  # per URL: process_start_time_seconds at its last scrape
        self._increase: dict[tuple[str, Labels], float] = defaultdict(float)
        self._seen: set[str] = set()
        self._models: set[str] = set()
        self._gauge_max: dict[tuple[str, str, str | None], float] = {}
        self._kv_max: dict[str | None, float] = {}
        self._gauge_sum: dict[tuple[str, str | None], float] = defaultdict(float)
        self._gauge_n: dict[tuple[str, str | None], int] = defaultdict(int)
        self._resets: dict[str | None, int] = defaultdict(int)
        self._anomalies: dict[tuple[str, str, str, str | None], Anomaly] = {}
        # per (url, model): the draft positions before the first config change seen, after the last, count
        self._switches: dict[tuple[str, str | None], tuple[int, int, int]] = {}
        self.scrapes = 0
        self.start_unix_s: float | None = None
        self.end_unix_s: float | None = None

    def add(self, snapshot: Snapshot) -> None:
        self.scrapes += 1
        if self.start_unix_s is None:
            self.start_unix_s = snapshot.timestamp_unix_s
        self.end_unix_s = snapshot.timestamp_unix_s
        groups: dict[str | None, list[Sample]] = defaultdict(list)
        started = None
        for s in snapshot.samples:
            self._seen.add(family_name(s.metric))
            if s.metric in READ:
                model = _model(s.labels)
                groups[model].append(s)
            elif s.metric == PROCESS_START and math.isfinite(s.value):
                started = s.value
        before, self._started[snapshot.url] = self._started.get(snapshot.url), started
        process_restarted = before is not None and started is not None and before != started
        for model, samples in groups.items():
            if model is not None:
                self._models.add(model)
            if self._usable(snapshot, model, samples):
                self._add_group(snapshot, model, samples, process_restarted)

    def _usable(self, snapshot: Snapshot, model: str | None, samples: list[Sample]) -> bool:
        """False (and the anomaly named) when a read sample is NaN/Inf or a series appears twice."""
        seen: dict[tuple[str, Labels], float] = {}
        for s in samples:
            key = (s.metric, s.labels)
            if not math.isfinite(s.value):
                self._anomaly(NOT_FINITE, snapshot, model, key, f"{s.value!r}")
                return False
            if key in seen:
                self._anomaly(DUPLICATE, snapshot, model, key, f"{seen[key]!r} and {s.value!r}")
                return False
            seen[key] = s.value
        return True

    def _add_group(self, snapshot: Snapshot, model: str | None, samples: list[Sample],
                   process_restarted: bool) -> None:
        values: dict[tuple[str, Labels], float] = {}
        created: dict[tuple[str, Labels], float] = {}
        running: dict[str, float] = defaultdict(float)
        for s in samples:
            if s.metric in COUNTERS:
                values[(s.metric, s.labels)] = s.value
            elif s.metric in CREATED:
                created[(s.metric, s.labels)] = s.value
            elif s.metric in (RUNNING, WAITING):
                running[s.metric] += s.value
            elif s.metric == KV_USAGE:
                self._kv_max[model] = max(self._kv_max.get(model, s.value), s.value)
            else:
                self._gauge_sum[(s.metric, model)] += s.value
                self._gauge_n[(s.metric, model)] += 1
        for metric, total in running.items():
            key = (snapshot.url, metric, model)
            self._gauge_max[key] = max(self._gauge_max.get(key, total), total)
        now = {key: (v, created.get((created_name(key[0]), key[1]))) for key, v in values.items()}
        prev = self._prev.get((snapshot.url, model))
        if prev is None:
            self._prev[(snapshot.url, model)] = now
            return
        restarted, fell = _judge(prev, now, process_restarted)
        if fell:
            for key in fell:
                self._anomaly(DECREASE, snapshot, model, key, f"{prev[key][0]!r} to {now[key][0]!r}")
            return  # left out: the next scrape is counted from the one before this
        self._prev[(snapshot.url, model)] = now
        self._resets[model] += bool(restarted)
        if self._switched(snapshot.url, model, prev, now):
            restarted = restarted | {key for key in now if key not in prev}
        for key, (value, _) in now.items():
            if key in restarted:
                self._increase[key] += value
            elif key in prev:
                self._increase[key] += value - prev[key][0]

    def _switched(self, url: str, model: str | None, prev: Series, now: Series) -> bool:
        """True when the model's draft positions at `url` changed between two scrapes (another speculative
        config): its acceptance counted so far is dropped (every URL's: the increases are summed over URLs),
        so the window counts one config's."""
        before, after = _positions(prev), _positions(now)
        if not before or not after or before == after:
            return False
        for key in [key for key in self._increase if key[0] in SPEC_COUNTERS and _model(key[1]) == model]:
            del self._increase[key]
        first, _, count = self._switches.get((url, model), (before, after, 0))
        self._switches[(url, model)] = (first, after, count + 1)
        return True

    def _anomaly(self, kind: str, snapshot: Snapshot, model: str | None, key: tuple[str, Labels],
                 detail: str) -> None:
        where = (kind, snapshot.url, _series_text(key), model)
        found = self._anomalies.get(where)
        self._anomalies[where] = (
            Anomaly(*where[:3], found.count + 1, found.first_unix_s, found.detail) if found is not None
            else Anomaly(*where[:3], 1, snapshot.timestamp_unix_s, detail))

    def _counted(self, models: Collection[str] | None) -> tuple[Counting, list[str]]:
        """The model_name values a window counts (None: series without the label) and why, as notes."""
        exposed = sorted(self._models)
        wanted = frozenset(models) if models else None
        chosen = [m for m in exposed if wanted is None or m in wanted]
        notes = []
        if wanted is not None and not chosen and len(exposed) == 1:
            chosen = exposed
            notes.append(f"the model under test ({_names(sorted(wanted))}) names no series on /metrics; "
                         f"its only model, {exposed[0]}, is counted")
        elif wanted is None and len(exposed) > 1:
            chosen = []
            notes.append(f"/metrics holds the series of {len(exposed)} models ({_names(exposed)}) and the "
                         "model under test is not known: none is counted")
        elif wanted is not None and not chosen and exposed:
            notes.append(f"none of the {len(exposed)} models on /metrics ({_names(exposed)}) is the model "
                         f"under test ({_names(sorted(wanted))}): none is counted")
        left_out = [m for m in exposed if m not in chosen]
        if chosen and left_out:
            notes.append(f"series of other models on the same /metrics left out: {_names(left_out)}")
        return frozenset([None, *chosen]), notes

    def _sum(self, counting: Counting, metric: str,
             exclude: tuple[str, frozenset[str]] | None = None) -> float | None:
        """The increase of `metric` over the counted models' series; None when the server never exposed it."""
        if family_name(metric) not in self._seen:
            return None
        return sum(
            inc
            for (name, labels), inc in self._increase.items()
            if name == metric and _model(labels) in counting
            and not (exclude and dict(labels).get(exclude[0]) in exclude[1])
        )

    def _by_label(self, counting: Counting, metric: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (name, labels), inc in self._increase.items():
            if name == metric and label in dict(labels) and _model(labels) in counting:
                out[dict(labels)[label]] += inc
        return out

    def _mean_ms(self, counting: Counting, family: str) -> float | None:
        ratio = _ratio(self._sum(counting, family + "_sum"), self._sum(counting, family + "_count"))
        return ratio * 1000.0 if ratio is not None else None

    def _gauge_mean(self, counting: Counting, metric: str) -> float | None:
        n = sum(c for (m, model), c in self._gauge_n.items() if m == metric and model in counting)
        total = sum(v for (m, model), v in self._gauge_sum.items() if m == metric and model in counting)
        return total / n if n else None

    def _peak(self, counting: Counting, metric: str) -> float | None:
        peaks = [v for (_, m, model), v in self._gauge_max.items() if m == metric and model in counting]
        return sum(peaks) if peaks else None

    def window(self, models: Collection[str] | None = None) -> SpecWindow:
        """The window so far, counting `models` (the model under test; None: not known)."""
        counting, model_notes = self._counted(models)
        kind, prefix = self._kind()
        drafts = draft_tokens = accepted = rate = length = None
        per_position: tuple[float, ...] = ()
        notes: list[str] = []
        if prefix is not None:
            drafts = self._sum(counting, f"{prefix}:{DRAFTS}")
            draft_tokens = self._sum(counting, f"{prefix}:{DRAFT_TOKENS}")
            accepted = self._sum(counting, f"{prefix}:{ACCEPTED}")
            rate = _ratio(accepted, draft_tokens)
            mean_extra = _ratio(accepted, drafts)
            length = 1.0 + mean_extra if mean_extra is not None else None
            by_pos = self._by_label(counting, f"{prefix}:{PER_POS}", "position")
            if drafts:
                per_position = tuple(by_pos[p] / drafts for p in sorted(by_pos, key=int))
            if not drafts:
                notes.append("speculative decoding counters present but no drafts in the window")
        elif kind == "vllm-v0":
            rate = self._gauge_mean(counting, V0_RATE)
            notes.append(
                "vLLM V0 server: its spec-decode counters are known to be inflated (incremented by running"
                " totals), so acceptance is the mean of the draft_acceptance_rate gauge over the scrapes"
            )
        elif kind == "sglang":
            rate, length = self._gauge_mean(counting, SGLANG_RATE), self._gauge_mean(counting, SGLANG_LENGTH)
            notes.append("SGLang server: acceptance is the mean of its spec_accept_* gauges over the scrapes")
        resets = sum(n for model, n in self._resets.items() if model in counting)
        if resets:
            notes.append(f"server counters reset {resets} time(s) in the window (server restarted?)")
        notes += [f"speculative config changed in the window at {url}: {before} draft positions, then {after}"
                  + (f" ({count} changes)" if count > 1 else "") + " (the server came back with another "
                  "num_speculative_tokens); acceptance counts the last config only, from its change on"
                  for (url, model), (before, after, count) in self._switches.items() if model in counting]
        anomalies = tuple(a for (_, _, _, model), a in self._anomalies.items() if model in counting)
        notes += model_notes + [a.note() for a in anomalies]
        if self.scrapes < 2:
            notes.append(f"{self.scrapes} scrape(s) in the window: no counter increase can be computed")
        by_reason = self._by_label(counting, SUCCESS, "finished_reason")
        success = self._sum(counting, SUCCESS, ("finished_reason", UNSUCCESSFUL))
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
            generation_tokens=self._sum(counting, GENERATION),
            requests_success=success,
            requests_aborted=by_reason.get("abort", 0.0) if success is not None else None,
            mean_ttft_ms=self._mean_ms(counting, HISTOGRAMS["ttft"]),
            mean_itl_ms=self._mean_ms(counting, HISTOGRAMS["itl"]),
            mean_tpot_ms=self._mean_ms(counting, HISTOGRAMS["tpot"]),
            mean_e2e_ms=self._mean_ms(counting, HISTOGRAMS["e2e"]),
            max_requests_running=self._peak(counting, RUNNING),
            max_requests_waiting=self._peak(counting, WAITING),
            max_kv_cache_usage=max((v for m, v in self._kv_max.items() if m in counting), default=None),
            resets=resets,
            families_seen=tuple(sorted(self._seen)),
            notes=tuple(notes),
            models=tuple(m for m in sorted(self._models) if m in counting),
            other_models=tuple(m for m in sorted(self._models) if m not in counting),
            anomalies=anomalies,
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


def spec_window(snapshots: Sequence[Snapshot], start_unix_s: float, end_unix_s: float,
                models: Collection[str] | None = None) -> SpecWindow:
    """The counters' increases between the first and last snapshot with start <= timestamp <= end, of
    `models` (the model under test; None: not known, see the module doc).

    Snapshots may be in any order and from several URLs (replicas); each URL's series are followed
    separately, then summed. Nothing is extrapolated to the window's edges.
    """
    acc = WindowAccumulator()
    for snap in sorted(_within(snapshots, start_unix_s, end_unix_s), key=lambda s: s.timestamp_unix_s):
        acc.add(snap)
    return acc.window(models)


def _prefix_counts(families: Iterable[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for name in families:
        counts[name.split(":", 1)[0] if ":" in name else name.split("_", 1)[0]] += 1
    return ", ".join(f"{p} ({n})" for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


Series = dict[tuple[str, Labels], tuple[float, float | None]]


def _judge(prev: Series, now: Series, process_restarted: bool) -> tuple[set, set]:
    """(series that restarted, series that fell without a restart) between two scrapes of one model at one
    URL. A series with `_created` on both sides restarted iff it changed; one without restarted when the
    process did (its start time changed, a `_created` moved, or most of its counters fell together)."""
    common = [key for key in now if key in prev]
    fell = {key for key in common if now[key][0] < prev[key][0]}
    dated = {key for key in common if prev[key][1] is not None and now[key][1] is not None}
    moved = {key for key in dated if prev[key][1] != now[key][1]}
    positive = [key for key in common if key not in dated and prev[key][0] > 0]
    process = process_restarted or bool(moved) or (
        not dated and 2 * len(fell & set(positive)) > len(positive))
    undated = {key for key in common if key not in dated}
    restarted = moved | (undated if process else set())
    return restarted, fell - restarted


def _positions(series: Series) -> int:
    """The draft positions the per-position acceptance series name (0 without them)."""
    return len({dict(labels).get("position") for metric, labels in series if metric in PER_POSITION})


def _model(labels: Labels) -> str | None:
    for key, value in labels:
        if key == MODEL_LABEL:
            return value
    return None


def _series_text(key: tuple[str, Labels]) -> str:
    metric, labels = key
    text = metric + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")
    return text if len(text) <= 200 else text[:200] + "..."


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(n[:80] for n in names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _within(snapshots: Iterable[Snapshot], start: float, end: float) -> Iterable[Snapshot]:
    return (s for s in snapshots if start <= s.timestamp_unix_s <= end)
