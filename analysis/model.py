"""Plain dataclasses passed between the analysis stages (runs -> levels -> verdict -> reports)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

METRIC_KEYS = (
    "requests",
    "failures",
    "ttft_p50_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "tpot_p50_ms",
    "chunk_gap_p50_ms",
    "output_tok_s",
    "tokens_per_chunk",
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
    change_pct: dict[str, float | None]
    reasons: tuple[str, ...]
    diagnoses: tuple[Diagnosis, ...]


@dataclass(frozen=True)
class PlotData:
    """Series only the HTML report draws: per-token latency CDFs per level and arm, per-class acceptance."""

    itl_cdf: dict[int, dict[str, tuple[tuple[float, float], ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    summary: str
    levels: tuple[LevelVerdict, ...]
    diagnoses: tuple[Diagnosis, ...]
    warnings: tuple[str, ...]
    serving_concurrency: int | None = None
    plots: PlotData = field(default_factory=PlotData)
