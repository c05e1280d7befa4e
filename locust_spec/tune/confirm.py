"""The confirmation pass, judged (pure): does the served schedule deliver what each level's winner
promised, and does it hold up when concurrency swings across a threshold?"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from locust_spec.tune import choose, intervals
from locust_spec.tune.choose import Decision, Sample
from locust_spec.tune.intervals import Interval

ARMS = ("schedule", "static", "off")


_iv = intervals.as_dict


def static_text(static_k: int) -> str:
    """What the confirmation's fixed-k arm is, said where it prints: a user who saw k=2 chosen and a static
    k=4 beside it could not tell why (it is the ladder's best single k, not any level's choice)."""
    return (f"static k={static_k}: the one fixed k best over the whole ladder (its objective relative to "
            "each level's best, averaged), which need not be any level's choice")


def against(value: float, promised: Interval, objective: str) -> str:
    """Where a delivered value falls against a promised interval: as predicted, better, or short."""
    if intervals.contains(promised, value):
        return "as predicted"
    above = value > promised.hi
    return "better than predicted" if above == choose.higher_is_better(objective) else "short of prediction"


@dataclass(frozen=True)
class LevelCheck:
    users: int
    predicted_k: int | None
    predicted: Interval | None
    measured: Mapping[str, Interval | None]
    """The confirmation pass's estimate per arm (schedule, static, off)."""
    schedule_vs: Mapping[str, Interval | None]
    """The schedule's % change from each fixed arm, with its interval."""
    status: str

    def as_dict(self) -> dict:
        return {"users": self.users, "predicted_k": self.predicted_k, "predicted": _iv(self.predicted),
                "measured": {a: _iv(v) for a, v in self.measured.items()},
                "schedule_vs_pct": {a: _iv(v) for a, v in self.schedule_vs.items()}, "status": self.status}


@dataclass(frozen=True)
class SwingCheck:
    threshold: int
    users: tuple[int, int]
    predicted: float | None
    """The mean of the two levels' winners' estimates: what switching between them should deliver."""
    measured: Mapping[str, Interval | None]
    schedule_vs: Mapping[str, Interval | None]
    collapse: bool
    status: str

    def as_dict(self) -> dict:
        return {"threshold_batch": self.threshold, "users": list(self.users), "predicted": self.predicted,
                "measured": {a: _iv(v) for a, v in self.measured.items()},
                "schedule_vs_pct": {a: _iv(v) for a, v in self.schedule_vs.items()},
                "collapse": self.collapse, "status": self.status}


@dataclass(frozen=True)
class Confirmation:
    static_k: int
    levels: tuple[LevelCheck, ...]
    swings: tuple[SwingCheck, ...]
    summary: str

    def as_dict(self) -> dict:
        return {"static_k": self.static_k, "levels": [c.as_dict() for c in self.levels],
                "swings": [s.as_dict() for s in self.swings], "summary": self.summary}


def _measure(samples: Mapping[str, Sample | None], objective: str
             ) -> tuple[dict[str, Interval | None], dict[str, Interval | None]]:
    measured = {arm: choose.estimate(s, objective) if s is not None else None
                for arm, s in samples.items()}
    sched = samples.get("schedule")
    vs = {arm: (choose.compare(sched, s, objective)
                if sched is not None and s is not None and measured["schedule"] and measured[arm] else None)
          for arm, s in samples.items() if arm != "schedule"}
    return measured, vs


BEHIND = "worse than one fixed k across this threshold"
BEATEN = "beaten beyond noise by "
DRIFTED = "short of prediction, but not significantly worse than the same k served alongside (noise or drift)"


def check_level(decision: Decision, samples: Mapping[str, Sample | None], objective: str,
                same: str | None = None) -> LevelCheck:
    """`same`: the fixed arm of the confirmation pass serving the k this level chose, if any. When the
    schedule misses the prediction but is not significantly worse than that arm measured in the same
    pass, the shortfall is run-to-run noise or the machine's drift, not the schedule."""
    winner = decision.arm(decision.k) if decision.k is not None else None
    promised = winner.interval if winner else None
    measured, vs = _measure(samples, objective)
    got = measured.get("schedule")
    status = "not measured" if promised is None or got is None else against(got.estimate, promised, objective)
    if (status == "short of prediction" and same and vs.get(same) is not None and vs[same].measured
            and not choose.significantly_worse(vs[same], objective)):
        status = DRIFTED
    beaten = [(arm, iv) for arm, iv in vs.items()
              if iv is not None and iv.measured and choose.significantly_worse(iv, objective)]
    if got is not None and beaten:
        # "as predicted" while a fixed k served alongside did better beyond noise is no confirmation
        status = BEATEN + "; ".join(f"the {arm} arm ({iv.estimate:+.1f}% [{iv.lo:+.1f}, {iv.hi:+.1f}] for "
                                    "the schedule): serve its k here" for arm, iv in beaten)
    return LevelCheck(decision.users, decision.k, promised, measured, vs, status)


def check_swing(threshold: int, users: tuple[int, int], decisions: Sequence[Decision],
                samples: Mapping[str, Sample | None], objective: str) -> SwingCheck:
    """A collapse: the schedule does significantly worse than each fixed arm while the load crosses its
    threshold, i.e. switching costs more than either side's k ever does."""
    promised = [d.arm(d.k).interval.estimate for d in decisions
                if d.users in users and d.k is not None and d.arm(d.k) and d.arm(d.k).interval]
    predicted = sum(promised) / len(promised) if len(promised) == 2 else None
    measured, vs = _measure(samples, objective)
    fixed = [iv for iv in vs.values() if iv is not None]
    collapse = bool(fixed) and all(choose.significantly_worse(iv, objective) for iv in fixed)
    got = measured.get("schedule")
    if got is None:
        status = "not measured"
    elif collapse:
        status = "COLLAPSE: worse than every fixed k across this threshold"
    elif any(choose.significantly_worse(iv, objective) for iv in fixed):
        status = BEHIND
    else:
        status = "holds: not worse than a fixed k across this threshold"
    return SwingCheck(threshold, users, predicted, measured, vs, collapse, status)


def summarize(levels: Sequence[LevelCheck], swings: Sequence[SwingCheck]) -> str:
    short = [c.users for c in levels if c.status == "short of prediction"]
    drifted = [c.users for c in levels if c.status == DRIFTED]
    missing = [c.users for c in levels if c.status == "not measured"]
    beaten = [c.users for c in levels if c.status.startswith(BEATEN)]
    collapsed = [s.threshold for s in swings if s.collapse]
    behind = [s.threshold for s in swings if s.status == BEHIND]
    parts = []
    if collapsed:
        parts.append(f"COLLAPSE at batch threshold(s) {', '.join(map(str, collapsed))}")
    if behind:
        parts.append(f"worse than one fixed k across batch threshold(s) {', '.join(map(str, behind))}")
    if beaten:
        parts.append(f"beaten beyond noise by a fixed k served alongside at {', '.join(map(str, beaten))} "
                     "users: serve that k there")
    if short:
        parts.append(f"short of the winners' intervals at {', '.join(map(str, short))} users")
    if drifted:
        parts.append(f"short of the tuning phase's numbers at {', '.join(map(str, drifted))} users, but not "
                     "significantly worse than the same k served alongside: noise or drift, not the schedule")
    if missing:
        parts.append(f"not measured at {', '.join(map(str, missing))} users")
    if not parts:
        return "the schedule delivers what the per-level winners predicted, within their intervals"
    return "; ".join(parts)
