"""Plain dataclasses passed between the analysis stages (runs -> levels -> verdict -> reports)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .stats import Interval

METRIC_KEYS = (
    "requests",
    "failures",
    "ttft_p50_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "chunk_gap_p50_ms",
    "chunk_gap_p99_ms",
    "output_tok_s",
    "tokens_per_chunk",
    "slo_share",
    "goodput_tok_s",
)


@dataclass(frozen=True)
class ArmMetrics:
    """One arm's measurements at one concurrency level (design.md's M, plus the evidence size)."""

    requests: int
    failures: int
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    tpot_p50_ms: float | None
    chunk_gap_p50_ms: float | None
    output_tok_s: float | None
    tokens_per_chunk: float | None
    tpot_p90_ms: float | None = None
    chunk_gap_p99_ms: float | None = None
    slo_share: float | None = None
    goodput_tok_s: float | None = None
    output_tokens: int = 0
    runs: int = 1
    itl_source: str = "hdr"
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)

    def as_m(self) -> dict:
        return {k: getattr(self, k) for k in METRIC_KEYS}


@dataclass(frozen=True)
class SpecStats:
    """The candidate server's speculative-decoding counters over one level's window."""

    acceptance: float | None
    mean_acceptance_length: float | None
    per_position: tuple[float, ...]
    drafts: float
    draft_tokens: float
    accepted: float
    generation_tokens: float
    server_kind: str = "unknown"
    families_seen: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClientLag:
    """One arm's load-generator event-loop lag at one level (summary.json's client.generators.by_level)."""

    samples: int
    late_samples: int
    late_share: float
    max_lag_ms: float


def worst_lag(lags: Sequence[ClientLag]) -> ClientLag | None:
    """Repeats of one arm at one level: samples add up, the late share and lag are the worst run's."""
    if not lags:
        return None
    return ClientLag(samples=sum(lag.samples for lag in lags),
                     late_samples=sum(lag.late_samples for lag in lags),
                     late_share=max(lag.late_share for lag in lags),
                     max_lag_ms=max(lag.max_lag_ms for lag in lags))


@dataclass(frozen=True)
class Batch:
    """The batch the server really ran over a level: its running and waiting gauges, time-weighted, and the
    mean number running (`locust_spec.metrics.batch.mean_running`, as spec-tune measures it)."""

    running_p50: float
    running_max: float
    waiting_p50: float
    waiting_max: float
    samples: int
    running_mean: float | None = None

    @property
    def size(self) -> float:
        """The level's batch as one number: the mean where measured (Little's law on vLLM's running-time
        counter; a scrape of the gauge can land in the gap when synchronized requests finish together),
        else the gauge's time-weighted median."""
        return self.running_mean if self.running_mean is not None else self.running_p50

    def as_dict(self) -> dict:
        return {"running_mean": self.running_mean, "running_p50": self.running_p50,
                "running_max": self.running_max, "waiting_p50": self.waiting_p50,
                "waiting_max": self.waiting_max, "samples": self.samples}


@dataclass(frozen=True)
class Slo:
    """A latency objective a request must meet to count as good (None: not part of it)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def as_dict(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms}


@dataclass(frozen=True)
class ClassStats:
    """Per prompt class: acceptance from per-request stats, and latency for both arms."""

    cls: str
    acceptance: float | None
    draft_tokens: float
    requests: int
    baseline_tpot_p50_ms: float | None
    candidate_tpot_p50_ms: float | None


@dataclass(frozen=True)
class LevelInput:
    """Everything the rules need about one concurrency level common to both arms."""

    users: int
    baseline: ArmMetrics
    candidate: ArmMetrics
    spec: SpecStats | None
    rows_show_speculation: bool = False
    baseline_lag: ClientLag | None = None
    candidate_lag: ClientLag | None = None
    changes: dict[str, Interval] = field(default_factory=dict)
    acceptance_ci: Interval | None = None
    baseline_batch: Batch | None = None
    candidate_batch: Batch | None = None
    baseline_spec: SpecStats | None = None
    """The baseline's own speculative-decoding counters at this level (it should have none)."""
    design: str = "sequential"
    """How the arms shared time here: sequential, interleaved, simultaneous, or mixed (runs differ)."""
    spill: dict[str, float] = field(default_factory=dict)
    """Interleaved: per arm, the largest share of its request time at this level outside its own blocks."""
    block_s: float | None = None


@dataclass(frozen=True)
class Diagnosis:
    kind: str
    message: str
    evidence: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "evidence": self.evidence}


@dataclass(frozen=True)
class LevelVerdict:
    users: int
    verdict: str
    acceptance: float | None
    mean_acceptance_length: float | None
    per_position: tuple[float, ...]
    baseline: ArmMetrics
    candidate: ArmMetrics
    changes: dict[str, Interval]
    reasons: tuple[str, ...]
    diagnoses: tuple[Diagnosis, ...]
    brief: str = ""
    acceptance_ci: Interval | None = None
    baseline_batch: Batch | None = None
    candidate_batch: Batch | None = None
    directions: dict[str, str] = field(default_factory=dict)
    """Per judged metric: better / worse / same / inconclusive / unknown (its interval against the band)."""
    mde_pct: dict[str, float | None] = field(default_factory=dict)
    """Per deciding metric: the smallest change this level could have detected (stats.Interval.mde_pct)."""
    power_note: str | None = None
    """Why the level is under-powered, when it is."""
    design: str = "sequential"

    @property
    def change_pct(self) -> dict[str, float | None]:
        return {k: i.estimate for k, i in self.changes.items()}


@dataclass(frozen=True)
class PlotData:
    """Series only the HTML report draws: per-token latency CDFs per level and arm, per-class acceptance."""

    itl_cdf: dict[int, dict[str, tuple[tuple[float, float], ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class CrossPoint:
    """Where one gain (TPOT or throughput, candidate vs baseline) stops paying along the ladder."""

    metric: str
    users: float | None
    users_ci95: tuple[float | None, float | None]
    between_users: tuple[float, float] | None
    batch: float | None
    note: str

    def as_dict(self) -> dict:
        return {"metric": self.metric, "users": self.users, "users_ci95": list(self.users_ci95),
                "between_users": list(self.between_users) if self.between_users else None,
                "batch": self.batch, "note": self.note}


@dataclass(frozen=True)
class DesignInfo:
    """How the verdict's runs shared time (core/design.py), as verdict.json reports it."""

    kind: str
    block_s: float | None = None
    blocks_per_level: int | None = None
    arms: int | None = None
    repeats: int = 1
    warmup_s: float | None = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "block_s": self.block_s, "blocks_per_level": self.blocks_per_level,
                "arms": self.arms, "repeats": self.repeats, "warmup_s": self.warmup_s}


@dataclass(frozen=True)
class Verdict:
    verdict: str
    summary: str
    levels: tuple[LevelVerdict, ...]
    diagnoses: tuple[Diagnosis, ...]
    warnings: tuple[str, ...]
    serving_concurrency: int | None = None
    plots: PlotData = field(default_factory=PlotData)
    crossover: tuple[CrossPoint, ...] = ()
    slo: Slo | None = None
    design: DesignInfo = field(default_factory=lambda: DesignInfo("sequential"))
