"""Cross-check: client totals from PREFIX_requests.csv vs the server counters of the real n-gram capture."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from locust_spec.metrics.counters import spec_window
from locust_spec.metrics.crosscheck import (
    ClientTotals,
    cross_check,
    read_client_totals,
    summary,
    totals_from_rows,
    warnings,
)
from locust_spec.recording.records import COLUMNS
from tests.support import ngram_capture_window


@pytest.fixture(scope="module")
def window():
    """The capture's load: 24 requests finished by length, 4608 tokens, server mean TPOT 0.998 ms."""
    return ngram_capture_window()


def row(tokens=192, tpot="1.000", error="", accepted="", drafted="", estimated="0") -> dict:
    r = dict.fromkeys(COLUMNS, "")
    r.update(start_unix_s="1.0", level_users="4", prompt_class="code", prompt_id="c1",
             output_tokens=str(tokens),
             tokens_estimated=estimated, tpot_ms=tpot, error=error, spec_accepted_tokens=accepted,
             spec_draft_tokens=drafted, warmup="0")
    return r


def write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


def test_matching_client_and_server_give_no_warning(tmp_path, window):
    # 24 requests x 192 tokens = 4608 generation tokens, as the server counted.
    totals = read_client_totals(write(tmp_path / "r.csv", [row() for _ in range(24)]))
    assert (totals.requests, totals.ok, totals.output_tokens) == (24, 24, 4608)
    assert totals.mean_tpot_ms == pytest.approx(1.0)
    checks = cross_check(totals, window)
    assert [c.name for c in checks] == ["output tokens", "finished requests", "mean TPOT"]
    assert warnings(checks) == []


def test_tokens_off_by_more_than_two_percent_warn(window):
    totals = totals_from_rows([row(tokens=180) for _ in range(24)])  # 4320 vs 4608: -6.3%
    (line,) = warnings(cross_check(totals, window))
    assert line.startswith("cross-check output tokens: client 4320 vs server 4608")
    within = totals_from_rows([row(tokens=190) for _ in range(24)])  # 4560: -1.0%
    assert warnings(cross_check(within, window)) == []


def test_requests_allow_one_per_request_whose_end_the_client_did_not_see(window):
    ok = [row() for _ in range(22)]
    unseen = [row(tokens=192, tpot="", error="interrupted: test stopped"),
              row(tokens=192, tpot="", error="no_done: stream ended without [DONE]")]
    assert warnings(cross_check(totals_from_rows(ok + unseen), window)) == []
    http_failed = [row(tokens=0, tpot="", error="http_500: boom")] * 2
    lines = warnings(cross_check(totals_from_rows(ok + [row(), row()] + http_failed), window))
    assert lines == []
    extra = [row(tokens=0) for _ in range(2)]
    (line,) = warnings(cross_check(totals_from_rows(ok + [row(), row()] + extra), window))
    assert line.startswith("cross-check finished requests: client 26 vs server 24")


def test_tpot_beyond_fifteen_percent_warns(window):
    assert window.mean_tpot_ms == pytest.approx(0.9978, abs=1e-4)
    slow = totals_from_rows([row(tpot="1.200") for _ in range(24)])
    (line,) = warnings(cross_check(slow, window))
    assert "mean TPOT: client 1.2 ms vs server 0.998 ms" in line
    assert warnings(cross_check(totals_from_rows([row(tpot="1.100") for _ in range(24)]), window)) == []


def test_per_request_acceptance_is_checked_against_the_counters(window):
    # Server: 2619/4128 = 0.634. Per-request stats summing to 0.64 agree, to 0.50 do not.
    agree = totals_from_rows([row(accepted="64", drafted="100")] * 24)
    assert [c.name for c in cross_check(agree, window)][-1] == "acceptance"
    assert warnings(cross_check(agree, window)) == []
    disagree = totals_from_rows([row(accepted="50", drafted="100")] * 24)
    (line,) = warnings(cross_check(disagree, window))
    assert line.startswith("cross-check acceptance: client 0.5 vs server 0.6344")


def test_missing_server_families_are_skipped_not_warned(window):
    off = spec_window([], 0, 1)
    assert cross_check(totals_from_rows([row()]), off) == []


def test_summary_has_both_sides(window):
    totals = totals_from_rows([row() for _ in range(24)])
    doc = summary(totals, cross_check(totals, window))
    assert doc["client"]["ok"] == 24 and doc["client"]["mean_tpot_ms"] == pytest.approx(1.0)
    assert doc["crosscheck"]["output tokens"]["server"] == 4608
    assert doc["crosscheck"]["output tokens"]["warning"] is None


def test_a_bad_cell_is_one_clear_error():
    with pytest.raises(ValueError, match="requests row 3"):
        totals_from_rows([row(), row(tokens="lots")])


def test_totals_start_empty():
    assert ClientTotals().mean_tpot_ms is None and ClientTotals().acceptance_rate is None


def test_a_row_still_being_written_is_left_out_of_the_totals(tmp_path):
    # the web UI's summary reads the file in a thread while the run appends to it
    path = write(tmp_path / "r.csv", [row() for _ in range(3)])
    with path.open("a", newline="") as f:
        f.write("2.0,4,code,c2,,19")
    totals = read_client_totals(path)
    assert (totals.requests, totals.output_tokens) == (3, 576)
