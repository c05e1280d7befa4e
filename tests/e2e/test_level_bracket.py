"""A short 1-user ladder level whose server counters move only in its first seconds: real headless Locust
(the sweep locustfile) against the replay server's captured vLLM stream, with /metrics served from the real
vLLM n-gram captures. The scraper brackets the level (level change, warm-up end, stop) and the analysis
reads the level's acceptance from that bracket."""

from __future__ import annotations

import subprocess

import pytest
from locust_spec.analysis import levels
from locust_spec.analysis.runs import read_run

from tests.e2e.test_scraper import AFTER, BEFORE, MetricsServer
from tests.support import PY, REPO, SERVER_CPU, free_port, pinned, run_locust, wait_http

# Scrapes: 0 test start, 1 level change, 2 warm-up end; every later one sees the counters moved.
MOVED_FROM_SCRAPE = 3


@pytest.fixture
def replay_url():
    port = free_port()
    proc = subprocess.Popen(pinned([PY, "-m", "tests.replay", "--port", str(port), "--time-scale", "0.1"],
                                   SERVER_CPU), cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc=proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_counters_moving_early_in_a_short_level_are_measured(replay_url, tmp_path):
    metrics = MetricsServer(lambda n: (200, BEFORE if n < MOVED_FROM_SCRAPE else AFTER))
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text('{"id": "a", "class": "code", "prompt": "x"}\n')
        proc = run_locust(["-f", str(REPO / "locustfiles" / "sweep.py"), "--headless", "--levels", "1",
                           "--stage-time", "8s", "--warmup", "3s", "--host", replay_url,
                           "--metrics-url", metrics.url + "/metrics", "--metrics-interval", "5",
                           "--csv", "out/run", "--prompts", str(prompts), "--only-summary"], cwd=tmp_path)
        # exit 1 when the ladder's stop interrupted the request in flight (a Locust failure, by design)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        scrapes = metrics.scrapes()
    finally:
        metrics.stop()
    # start, level change, warm-up end, one interval, stop (more only if the machine stalled a while)
    assert len(scrapes) >= 5 and set(scrapes) == {200}
    run = read_run(tmp_path / "out" / "run")
    errors = set(run.requests["error"].dropna().astype(str))
    assert all(e.startswith("interrupted") for e in errors), errors
    level = levels.run_levels(run)[1]
    assert level.metrics.requests >= 2
    spec = levels.spec_stats(run, level)
    assert spec is not None, "the level's counters were not bracketed"
    assert spec.draft_tokens == 4128 and spec.acceptance == pytest.approx(2619 / 4128)  # the capture's
