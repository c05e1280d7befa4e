"""Plain dataclasses passed between the analysis stages (runs -> levels -> verdict -> reports)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from locust_spec.core.level import rate_key

from .answers import AnswerCheck
from .provenance import Provenance
from .rule import DecisionRule
from .stats import Interval


class Rate(float):
    """A rate level (open loop): requests per second, a float that knows its unit. Levels are numbers along
    one axis, users or req/s; this type says which wherever a level is labelled (`level_label`), keyed in
    a run's files (`str` is the files' key, `4/s`) or written to verdict.json, so the stages between need
    no axis of their own. A run's levels are all of one kind (runs.py), as are both arms' (api.py)."""

    def __str__(self) -> str:
        return rate_key(self)

    __repr__ = __str__


Level = int | Rate
"""A level's number: its users (an int), or its rate."""


def level_label(level: float, *, concurrent: bool = False) -> str:
    """`16 users` (`16 concurrent users`), or for a rate level `4 req/s`."""
    if isinstance(level, Rate):
        return f"{float(level):g} req/s"
    users = f"{level:g}" if isinstance(level, float) else str(level)
    return f"{users} {'concurrent ' if concurrent else ''}user" + ("" if level == 1 else "s")


MDE_LIMIT_PCT = 900.0
"""A smallest detectable change past this, a tenfold change either way, is no number to read: no
speculative config makes a latency or a throughput ten times better or worse, so a level that could see
nothing smaller sees nothing a config does. Such a figure comes of intervals with no usable spread (after
a 30 s server stall: +-2,386,748%)."""
NO_DETECTION = "cannot detect any change with this data"


def detectable(mde_pct: float) -> bool:
    """Whether a smallest detectable change (stats.Interval.mde_pct) is one to print as a number."""
    return math.isfinite(mde_pct) and mde_pct <= MDE_LIMIT_PCT


def same_kind(level: float, value: float | None) -> float | None:
    """`value` (an interpolated point, an interval's bound) on `level`'s axis: a Rate stays a Rate."""
    return Rate(value) if value is not None and isinstance(level, Rate) else value

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
class Arrivals:
    """How one arm's open-loop load kept its schedule at one rate level: how late its requests went out
    (measured requests, from the rows), TTFT and E2E from the intended start, and, from the run's summary
    (recording/ledger.py), the arrivals due, those never sent, and the rate achieved."""

    rate: float
    lateness_p50_ms: float | None = None
    lateness_p99_ms: float | None = None
    ttft_from_arrival_p50_ms: float | None = None
    e2e_from_arrival_p50_ms: float | None = None
    scheduled: int | None = None
    missed: int | None = None
    achieved_rate: float | None = None
    scheduled_rate: float | None = None
    """The schedule's own rate over the window: random arrivals come near the asked rate, not on it."""

    def as_dict(self) -> dict:
        return {"rate": self.rate, "achieved_rate": self.achieved_rate, "scheduled_rate": self.scheduled_rate,
                "scheduled": self.scheduled,
                "missed": self.missed, "lateness_p50_ms": self.lateness_p50_ms,
                "lateness_p99_ms": self.lateness_p99_ms,
                "ttft_from_arrival_p50_ms": self.ttft_from_arrival_p50_ms,
                "e2e_from_arrival_p50_ms": self.e2e_from_arrival_p50_ms}


def worst_arrivals(found: Sequence[Arrivals]) -> Arrivals | None:
    """Repeats of one arm at one rate: the latest lateness and the lowest achieved rate, misses added up."""
    if not found:
        return None

    def worst(values, pick):
        present = [v for v in values if v is not None]
        return pick(present) if present else None

    return Arrivals(
        rate=found[0].rate,
        lateness_p50_ms=worst([a.lateness_p50_ms for a in found], max),
        lateness_p99_ms=worst([a.lateness_p99_ms for a in found], max),
        ttft_from_arrival_p50_ms=worst([a.ttft_from_arrival_p50_ms for a in found], max),
        e2e_from_arrival_p50_ms=worst([a.e2e_from_arrival_p50_ms for a in found], max),
        scheduled=worst([a.scheduled for a in found], sum),
        missed=worst([a.missed for a in found], sum),
        achieved_rate=worst([a.achieved_rate for a in found], min),
        scheduled_rate=worst([a.scheduled_rate for a in found], min),
    )


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
    answers: AnswerCheck | None = None
    baseline_arrivals: Arrivals | None = None
    candidate_arrivals: Arrivals | None = None
    baseline_spec: SpecStats | None = None
    """The baseline server's speculation counters: moving ones mean the arms were given the wrong way
    round."""
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
class Pricing:
    """What a GPU-hour costs and how many GPUs each arm's server holds (a draft model may need more)."""

    usd_per_gpu_hour: float
    gpus_baseline: float = 1.0
    gpus_candidate: float = 1.0

    def as_dict(self) -> dict:
        return {"usd_per_gpu_hour": self.usd_per_gpu_hour,
                "gpus": {"baseline": self.gpus_baseline, "candidate": self.gpus_candidate}}


@dataclass(frozen=True)
class PowerSource:
    """Where one arm's energy was read: the DCGM series (`locust_spec.metrics.power`), the GPUs counted
    (per run, the most) and the label that selected them."""

    source: str
    gpus: int
    selection: str | None = None

    def as_dict(self) -> dict:
        return {"source": self.source, "gpus": self.gpus, "selection": self.selection}


@dataclass(frozen=True)
class ArmsValue:
    """One quantity in a team's units (cost, energy: analysis/cost.py) per arm at a level, with its change
    (candidate vs baseline, %) and that change's interval."""

    key: str
    baseline: float | None
    candidate: float | None
    change: Interval

    def as_dict(self) -> dict:
        return {"baseline": self.baseline, "candidate": self.candidate, "change_pct": self.change.estimate,
                "ci95_pct": self.change.as_list() if self.change.method != "point" else None}


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
    answers: AnswerCheck | None = None
    baseline_arrivals: Arrivals | None = None
    candidate_arrivals: Arrivals | None = None
    directions: dict[str, str] = field(default_factory=dict)
    """Per judged metric: better / worse / same / inconclusive / unknown (its interval against the band)."""
    mde_pct: dict[str, float | None] = field(default_factory=dict)
    """Per deciding metric: the smallest change this level could have detected (stats.Interval.mde_pct)."""
    power_note: str | None = None
    """Why the level is under-powered, when it is."""
    design: str = "sequential"
    tests: dict[str, dict] = field(default_factory=dict)
    """Per question of the decision rule (rule.py): its role (primary or guard), raw and adjusted p-value,
    whether it is exploratory."""
    exploratory: bool = False
    """A per-task breakdown: its words are controlled for the false discovery rate, not family-wise."""
    economy: tuple[ArmsValue, ...] = ()
    """Cost per million output tokens, power and energy per token, when priced or measured (cost.py)."""

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
    method: str = ""
    """How the crossing and its range were found, with the assumption that holds them (schema 6)."""

    def as_dict(self, rate_axis: bool = False) -> dict:
        """On the rate axis the same numbers go under `rate`, `rate_ci95`, `between_rates`, the users
        fields null (verdict.json schema 4)."""
        out = {"metric": self.metric, "users": self.users, "users_ci95": list(self.users_ci95),
               "between_users": list(self.between_users) if self.between_users else None,
               "batch": self.batch, "note": self.note, "method": self.method or None}
        if rate_axis:
            between = [_number(x) for x in self.between_users] if self.between_users else None
            out.update({"rate": _number(self.users), "rate_ci95": [_number(x) for x in self.users_ci95],
                        "between_rates": between, "users": None, "users_ci95": [None, None],
                        "between_users": None})
        return out


def _number(x: float | None) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class TaskVerdict:
    """One task's (prompt class's) verdict at every level both arms measured it (analysis/tasks.py)."""

    task: str
    levels: tuple[LevelVerdict, ...]
    acceptance_measured: bool
    """The candidate sent per-request speculative stats for this task's requests."""


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
    tasks: tuple[TaskVerdict, ...] = ()
    """Per prompt class (analysis/tasks.py), when the runs hold several."""
    provenance: tuple[tuple[Provenance, ...], tuple[Provenance, ...]] = ((), ())
    """What each arm's runs measured (baseline, candidate)."""
    differences: tuple[str, ...] = ()
    """What differs between runs that should share it, compared anyway (--force; analysis/comparable.py):
    the report's first screen names each."""
    configurations: bool = False
    """The baseline speculated too: the verdict compares the candidate's configuration with the baseline's,
    not speculation with none."""
    what_ran: tuple = ()
    """Each arm's speculation as given and as its counters show it (analysis/what_ran.WhatRan)."""

    @property
    def axis(self) -> str:
        """What the levels are: "users" (a concurrency ladder) or "rate" (open-loop arrivals, req/s)."""
        return "rate" if self.levels and isinstance(self.levels[0].users, Rate) else "users"
    design: DesignInfo = field(default_factory=lambda: DesignInfo("sequential"))
    rule: DecisionRule | None = None
    """The decision rule every level was judged by (rule.py), as declared at the start."""
    pricing: Pricing | None = None
    """`--gpu-cost-per-hour`, `--gpus`: the cost per million output tokens is in each level's economy."""
    power: dict[str, PowerSource] = field(default_factory=dict)
    """Per arm whose runs held GPU power series: where its energy came from."""
