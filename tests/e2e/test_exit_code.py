"""Headless runs in CI: a run where nothing failed exits 0, though requests were cut off by its end (they
keep their `interrupted` rows and are counted apart); a real failure still sets Locust's exit code."""

from __future__ import annotations

from tests.e2e.chat_runs import assert_reconciles, chat, error_kind


def test_a_clean_run_exits_0_with_its_cut_off_requests_kept_as_rows(spec_sim, tmp_path):
    sim = spec_sim()
    # users never wait between requests: at the end of the run each is in the middle of one
    run = chat(tmp_path, sim.url, "--max-tokens", "256", "--metrics-url", "off", users=4, seconds=3)
    rows = assert_reconciles(run)
    assert {error_kind(r) for r in rows if r["error"]} == {"interrupted"}
    assert run.proc.returncode == 0, run.output[-3000:]


def test_a_real_failure_still_fails_the_run(spec_sim, tmp_path):
    sim = spec_sim("--fault-500", "0.5", "--seed", "1")
    run = chat(tmp_path, sim.url, "--metrics-url", "off", users=2, seconds=2)
    assert any(error_kind(r) == "http_500" for r in assert_reconciles(run))
    assert run.proc.returncode == 1
