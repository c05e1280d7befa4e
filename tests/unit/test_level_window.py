"""A level's counter window (metrics/level_window.py) is one rule: the end-of-run table and the Speculation
tab (the scraper's level windows), the live page's header (the current level's) and spec-verdict (the run's
saved scrapes) give a level one acceptance, over the level's measured time, its warm-up left out."""

from __future__ import annotations

from dataclasses import replace

import pytest
from locust_spec.analysis import levels
from locust_spec.analysis.runs import read_run

from locust_spec.core.runfiles import RequestRow
from locust_spec.metrics.level_window import LevelWindow, bracket
from locust_spec.recording.level_table import LevelTally
from locust_spec.recording.scraper import Scraper
from locust_spec.web.webui import speculation_rows
from tests.unit.test_runs_levels import T0, _snap, row, write

# (time from T0, drafts, draft tokens, accepted): level 1 changes at 0 s, its warm-up ends at 3 s (the
# scraper's scrape there lands at 3.1 s), level 2 starts at 8 s (its warm-up ends at 11 s), the stop at 14 s.
# The warm-up's drafts are accepted far more often (90 of 100) than the measured ones (100 of 200).
SCRAPES = [(0.0, 0, 0, 0), (2.0, 25, 100, 90), (3.1, 30, 120, 100), (5.0, 55, 220, 150),
           (8.02, 80, 320, 200), (11.05, 105, 420, 300), (14.0, 130, 520, 330)]
LEVEL_ONE = 100 / 200
LEVEL_TWO = 30 / 100


def _scraper(monkeypatch) -> tuple[Scraper, list]:
    """A scraper whose rounds return SCRAPES in turn (its own level bookkeeping, no socket)."""
    scraper = Scraper(["http://s/metrics"], 5.0, fetch=None)
    queue = [_snap(*s) for s in SCRAPES]
    monkeypatch.setattr(scraper, "_fetch_one", lambda url: (0.0, 0.0, ""))
    monkeypatch.setattr(scraper, "_parse", lambda url, sent, received, text: queue.pop(0))
    return scraper, queue


def test_the_table_the_tab_the_live_header_and_the_verdict_give_a_level_one_acceptance(tmp_path, monkeypatch):
    scraper, _ = _scraper(monkeypatch)
    scraper.scrape(1, T0 + 3.0)
    scraper.scrape()
    scraper.scrape()  # the warm-up end's: the window opens here
    scraper.scrape()
    live_at_one = scraper.current_level_window().acceptance_rate
    scraper.scrape(2, T0 + 11.0)
    scraper.scrape()
    scraper.scrape()
    windows = scraper.level_windows()

    tally = LevelTally()
    for start in (1.0, 3.2, 5.0):
        tally.add(RequestRow(T0 + start, 1, "code", "p", output_tokens=5, ttft_ms=5.0, tpot_ms=1.0,
                             e2e_ms=2000.0, warmup=int(start < 3.0)))
    for start in (11.2, 12.0):
        tally.add(RequestRow(T0 + start, 2, "code", "p", output_tokens=5, ttft_ms=5.0, tpot_ms=1.0,
                             e2e_ms=1000.0))
    table = {line.users: line.acceptance for line in tally.lines(windows, {})}
    tab_rows = speculation_rows(scraper.run_window(), windows, 1, None, [], False, [])
    tab = {r["measure"]: r["value"] for r in tab_rows}

    rows = [row(1.0, 1, warmup=1), row(3.2, 1, e2e=2000), row(5.0, 1, e2e=2000),
            row(9.0, 2, warmup=1), row(11.2, 2), row(12.0, 2)]
    run = replace(read_run(write(tmp_path / "r", rows)), snapshots=[_snap(*s) for s in SCRAPES])
    verdict = {users: levels.spec_stats(run, level).acceptance
               for users, level in levels.run_levels(run).items()}

    assert live_at_one == table[1] == verdict[1] == pytest.approx(LEVEL_ONE)
    assert table[2] == verdict[2] == pytest.approx(LEVEL_TWO)
    assert scraper.current_level_window().acceptance_rate == pytest.approx(LEVEL_TWO)
    assert tab["acceptance at 1 user"] == f"{LEVEL_ONE:.4f}"
    assert tab["acceptance at 2 users"] == f"{LEVEL_TWO:.4f}"


def test_the_window_opens_at_the_last_scrape_by_the_measured_start_and_closes_by_the_next_level():
    snaps = [_snap(*s) for s in SCRAPES]
    times = [round(s.timestamp_unix_s - T0, 2) for s in bracket(snaps, T0 + 3.2, T0 + 7.0, T0 + 8.0)]
    assert times == [3.1, 5.0, 8.02]  # a boundary's own scrape lands just after it and still closes it
    times = [round(s.timestamp_unix_s - T0, 2) for s in bracket(snaps, T0 + 11.2, T0 + 13.0, None)]
    assert times == [11.05, 14.0]
    live = LevelWindow(T0 + 3.0)
    for snap in snaps[:3]:
        live.add(snap)
    assert live.window().acceptance_rate is None  # still in its warm-up: nothing measured yet
