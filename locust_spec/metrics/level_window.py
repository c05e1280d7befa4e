"""A level's counter window: the one rule for which of the server's scrapes measure a level, used by the
end-of-run level table and the Speculation tab (the scraper, scrape by scrape) and by spec-verdict (over a
run's saved scrapes) alike, so all of them give a level one acceptance.

The window runs, per URL, from the last scrape at or before the level's measured start (its warm-up end: the
scraper takes one there) to the first scrape at or after its measured end, but never past the last scrape
before the next level began (the scraper takes one at the level change). The warm-up's drafts stay out,
the level's first measured seconds stay in, and the next level's load stays out.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from locust_spec.metrics.counters import SpecWindow, WindowAccumulator
from locust_spec.metrics.exposition import Snapshot

BOUNDARY_SLACK_S = 0.25
"""A scrape the scraper takes at a boundary (warm-up end, level change) is stamped at the middle of its
fetch, up to this long after the boundary; it still counts as taken at it."""

LABEL = "from its warm-up end to the next level"
"""What a level's window is, in the words every display of a level's acceptance uses."""


def bracket(snapshots: Sequence[Snapshot], start_unix_s: float, end_unix_s: float,
            next_level_unix_s: float | None) -> list[Snapshot]:
    """The scrapes of a level's window (module doc), per URL in time order: `start_unix_s` its first
    measured request's start, `end_unix_s` its last request's end, `next_level_unix_s` the next level's
    first request (None: the last level)."""
    by_url: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        by_url.setdefault(snap.url, []).append(snap)
    out = []
    for snaps in by_url.values():
        snaps.sort(key=lambda s: s.timestamp_unix_s)
        times = np.array([s.timestamp_unix_s for s in snaps])
        first = max(int(np.searchsorted(times, start_unix_s + BOUNDARY_SLACK_S, side="right")) - 1, 0)
        last = min(int(np.searchsorted(times, end_unix_s, side="left")), len(snaps) - 1)
        if next_level_unix_s is not None:
            before_next = int(np.searchsorted(times, next_level_unix_s + BOUNDARY_SLACK_S, side="right")) - 1
            if before_next > first:
                last = min(last, before_next)
        out.extend(snaps[first:last + 1])
    return out


class LevelWindow:
    """The same window scrape by scrape, while the level runs (the scraper's): scrapes up to the measured
    start only move the window's opening; the level's end is where the scraper stops adding (the next
    level's change scrape, or the one at stop). Memory: one snapshot per URL and one accumulator."""

    def __init__(self, measured_start_unix_s: float) -> None:
        self.measured_start_unix_s = measured_start_unix_s
        self._opening: dict[str, Snapshot] = {}
        self._acc = WindowAccumulator()

    def add(self, snapshot: Snapshot) -> None:
        if snapshot.timestamp_unix_s <= self.measured_start_unix_s + BOUNDARY_SLACK_S:
            self._opening[snapshot.url] = snapshot
            return
        opening = self._opening.pop(snapshot.url, None)
        if opening is not None:
            self._acc.add(opening)
        self._acc.add(snapshot)

    def window(self, models: Collection[str] | None = None) -> SpecWindow:
        """The counters over the window so far (none yet during the warm-up)."""
        return self._acc.window(models)
