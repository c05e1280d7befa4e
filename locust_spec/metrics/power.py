"""GPU power from a DCGM exporter's /metrics (or any Prometheus text with its names): the energy the
selected GPUs used inside windows of time (pure; docs/cost.md).

Two series per GPU, told apart by their labels (`gpu`, `UUID`, `Hostname`, ...):
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, a counter of millijoules since the driver loaded, preferred when
present (it integrates every watt, however seldom it is scraped), and `DCGM_FI_DEV_POWER_USAGE`, a gauge of
watts (a sample now and then: the energy between scrapes is the trapezoid under them). Values that are not
finite or negative are left out. Either becomes one
cumulative energy curve per GPU, read at each window's edges by linear interpolation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .exposition import Labels, Snapshot

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""Millijoules since boot, per GPU (a counter, exposed without `_total`)."""
POWER = "DCGM_FI_DEV_POWER_USAGE"
"""Watts now, per GPU (a gauge)."""
NAMES = frozenset({ENERGY, POWER})
COUNTER, GAUGE, MIXED = "energy counter", "power gauge", "energy counter and power gauge"
EDGE_SLACK_S = 1.0
"""How far a window may reach past a GPU's first or last scrape (read as that scrape's value): the scrape at
a level's start or at the test's stop lands a moment after the load it brackets."""


@dataclass(frozen=True)
class GpuSelection:
    """The GPUs of one arm: those whose `label` is one of `values` (`gpu=0,1`); None selects every GPU."""

    label: str
    values: frozenset[str]

    def __str__(self) -> str:
        return f"{self.label}={','.join(sorted(self.values))}"

    def selects(self, labels: Labels) -> bool:
        return any(k == self.label and v in self.values for k, v in labels)


def parse_selection(text: str | None) -> GpuSelection | None:
    """`LABEL=V1,V2` (e.g. `gpu=0,1` or `UUID=GPU-3b...`) -> GpuSelection; ValueError naming what is wrong."""
    if text is None or not text.strip():
        return None
    label, sep, values = text.strip().partition("=")
    picked = frozenset(v.strip() for v in values.split(",") if v.strip())
    if not sep or not label.strip() or not picked:
        raise ValueError(f"{text[:60]!r} is not LABEL=VALUE[,VALUE...] (e.g. gpu=0,1)")
    return GpuSelection(label.strip(), picked)


@dataclass(frozen=True)
class Curve:
    """One GPU's energy used by each scrape time (joules, from its first scrape), and where it came from."""

    times: np.ndarray
    joules: np.ndarray
    source: str


def _counter_curve(times: np.ndarray, millijoules: np.ndarray) -> np.ndarray:
    """The counter's increases summed. A fall (the driver reloaded, or an exporter that misreports) counts
    nothing for its interval and the counter is read on from its new value: taking the new value as the
    increase would add a whole lifetime's joules if the fall was no reset to zero."""
    steps = np.diff(millijoules)
    return np.concatenate([[0.0], np.cumsum(np.where(steps >= 0, steps, 0.0))]) / 1000.0


def _gauge_curve(times: np.ndarray, watts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.diff(times) * (watts[1:] + watts[:-1]) / 2.0)])


def curves(snapshots: Iterable[Snapshot], selection: GpuSelection | None = None) -> list[Curve]:
    """Per selected GPU (URL and labels), its cumulative energy: from the energy counter when that GPU
    exposes it, else from the power gauge. Non-finite and negative values are left out."""
    series: dict[tuple[str, str, Labels], list[tuple[float, float]]] = {}
    for snap in snapshots:
        for s in snap.samples:
            if s.metric in NAMES and np.isfinite(s.value) and s.value >= 0 and (
                    selection is None or selection.selects(s.labels)):
                series.setdefault((s.metric, snap.url, s.labels), []).append((snap.timestamp_unix_s, s.value))
    out = []
    for (metric, url, labels), points in sorted(series.items()):
        if metric == POWER and (ENERGY, url, labels) in series:
            continue
        # One value per scrape (a series exposed twice in one answer: the last), in time order.
        by_time = dict(points)
        t = np.array(sorted(by_time))
        v = np.array([by_time[x] for x in t])
        if len(t) < 2:
            continue
        joules = _counter_curve(t, v) if metric == ENERGY else _gauge_curve(t, v)
        out.append(Curve(t, joules, COUNTER if metric == ENERGY else GAUGE))
    return out


def source_of(found: Sequence[Curve]) -> str | None:
    """What the energy was read from: the counter, the gauge, or both (GPUs that differ)."""
    kinds = {c.source for c in found}
    return None if not kinds else kinds.pop() if len(kinds) == 1 else MIXED


def window_joules(found: Sequence[Curve], starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Joules the GPUs used inside each window [start, end), summed over GPUs; None when no GPU was
    scraped, or a window lies outside some GPU's scrapes (by more than EDGE_SLACK_S): that energy was not
    measured."""
    if not found or not len(starts):
        return None
    starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    total = np.zeros(len(starts))
    for c in found:
        if starts.min() < c.times[0] - EDGE_SLACK_S or ends.max() > c.times[-1] + EDGE_SLACK_S:
            return None
        # Relative to the first scrape: unix seconds would eat the interpolation's precision.
        t = c.times - c.times[0]
        total += (np.interp(ends - c.times[0], t, c.joules) - np.interp(starts - c.times[0], t, c.joules))
    return total
