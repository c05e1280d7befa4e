"""The table a headless run prints at its end: one line per level from the request rows, acceptance from the
server's counters over the level, "-" for what was not measured."""

from __future__ import annotations

from locust_spec.core.runfiles import RequestRow
from locust_spec.recording import level_table
from locust_spec.recording.level_table import LevelTally, table
from tests.support import ngram_capture_window


def row(users: int, start: float, ttft: float = 10.0, tpot: float = 2.0, tokens: int = 50,
        error: str | None = None, warmup: bool = False, drafts: tuple[int, int] | None = None) -> RequestRow:
    accepted, drafted = drafts or (None, None)
    return RequestRow(start, users, "code", "p", output_tokens=None if error else tokens,
                      ttft_ms=None if error else ttft, tpot_ms=None if error else tpot,
                      e2e_ms=None if error else ttft + tpot * (tokens - 1), spec_accepted_tokens=accepted,
                      spec_draft_tokens=drafted, error=error, warmup=int(warmup))


def test_each_level_counts_its_measured_requests_with_exact_percentiles_and_its_tokens_per_second():
    tally = LevelTally()
    for i in range(100):
        tally.add(row(1, 100.0 + i, ttft=1.0 + i / 1000, tpot=2.0))  # µs below 2048: held as they are
    tally.add(row(1, 99.0, ttft=9000.0, warmup=True))  # warm-up: left out
    tally.add(row(1, 300.0, error="interrupted: the run ended"))  # cut off at stop: neither
    tally.add(row(4, 400.0, error="http_500: boom"))
    tally.add(row(4, 400.0, ttft=30.0, tpot=3.0, drafts=(30, 40)))
    one, four = tally.lines([(1, ngram_capture_window())], {"1": {"late_share": 0.25}})
    assert (one.users, one.requests, one.failures) == (1, 100, 0)
    assert (one.ttft_p50_ms, one.ttft_p99_ms, one.tpot_p50_ms) == (1.049, 1.098, 2.0)
    # 100 x 50 tokens from the first start to the last one's end
    assert one.tok_s == 5000 / (199.0 + (1.099 + 2.0 * 49) / 1000 - 100.0)
    assert one.acceptance == 2619 / 4128 and one.behind == 0.25
    assert (four.requests, four.failures, four.acceptance, four.behind) == (2, 1, 0.75, None)


def test_the_table_shows_a_dash_for_what_was_not_measured_and_says_what_it_left_out(monkeypatch):
    monkeypatch.setattr(level_table, "MAX_LEVELS", 1)
    tally = LevelTally()
    tally.add(row(2, 1.0, error="connect: refused"))
    tally.add(row(8, 2.0))
    text = table(tally.lines([], {}), tally.left_out)
    title, header, line, *rest = text.splitlines()
    assert header.split() == ["level", "requests", "failed", "acceptance", "TTFT", "p50", "TTFT", "p99",
                              "TPOT", "p50", "TPOT", "p99", "tok/s", "behind"]
    assert line.split() == ["2", "1", "1", "-", "-", "-", "-", "-", "-", "-"]
    assert rest[-1] == "1 requests at levels past the first 1 are not in this table"
    assert table([], 0).splitlines()[2] == "  no request was measured outside warm-up"


def test_a_rate_level_is_its_own_row_named_by_its_rate():
    tally = LevelTally()
    for i in range(10):
        tally.add(RequestRow(100.0 + i, None, "code", "p", output_tokens=50, ttft_ms=10.0, tpot_ms=2.0,
                             e2e_ms=110.0,
                             level_rate=4.0))
    (line,) = tally.lines([], {})
    assert (line.users, line.requests) == ("4/s", 10)
    assert table([line]).splitlines()[2].split()[0] == "4/s"
