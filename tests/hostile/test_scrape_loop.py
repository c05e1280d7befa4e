"""A large /metrics answer is parsed beside the event loop, not in it. Before: a 6 MB answer held the
loop for seconds (every chunk arriving meanwhile stamped late, every user stalled)."""

from __future__ import annotations

import time

import gevent

from locust_spec.metrics.counters import parse_exposition_checked
from locust_spec.recording.scraper import Scraper, http_fetcher
from tests.hostile.server import huge_metrics


def test_parsing_a_large_answer_leaves_the_event_loop_free(hostile):
    server = hostile({"/metrics": huge_metrics(3 << 20)})
    url = server.url + "/metrics"
    fetch = http_fetcher(None, timeout_s=60)
    # what the same parse costs when it does hold the loop (this machine, now)
    text = fetch(url)
    started = time.perf_counter()
    assert len(parse_exposition_checked(text).samples) > 30000
    held = time.perf_counter() - started

    gaps = []

    def ticker() -> None:
        last = time.perf_counter()
        while True:
            gevent.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    scraper = Scraper([url], 60.0, fetch)
    tick = gevent.spawn(ticker)
    try:
        taken = scraper.scrape()
        gevent.sleep(0.05)  # the ticker's wake-up after the scrape: a gap the scrape held is counted
    finally:
        tick.kill()
    assert len(taken) == 1 and len(taken[0].samples) > 30000
    assert max(gaps) < held / 3, (max(gaps), held)
