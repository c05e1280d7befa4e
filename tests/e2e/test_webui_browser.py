"""The Speculation tab in a real browser: headless Chromium drives Locust's web UI against spec-sim."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request

import pytest

from tests.support import ARTIFACTS, BIN, CLIENT_CPU, REPO, chromium, free_port, pinned, wait_http

pytestmark = pytest.mark.browser

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
API_KEY = "sk-ui-never-shown-4b1e"
METRICS_TOKEN = "metrics-ui-never-shown-93a"


@pytest.fixture
def web_locust(tmp_path, spec_sim):
    """A non-headless Locust (web UI on loopback) against spec-sim with n-gram speculation; yields its URL."""
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    port = free_port()
    log = (tmp_path / "locust.log").open("w")
    proc = subprocess.Popen(
        pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"), "--web-host", "127.0.0.1",
                "--web-port", str(port), "--csv", "out/ui", "--host", sim.url, "--prompts", "code",
                "--max-tokens", "48", "--metrics-interval", "0.5", "--api-key", API_KEY,
                "--metrics-token", METRICS_TOKEN], CLIENT_CPU),
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc=proc)
        yield url, proc, tmp_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def test_speculation_tab_shows_live_acceptance_after_starting_load_from_the_ui(web_locust):
    from playwright.sync_api import expect, sync_playwright

    url, proc, tmp_path = web_locust
    with sync_playwright() as p:
        browser = chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "/")
        page.get_by_label("Number of users").fill("4")
        page.get_by_label("Ramp up").fill("4")
        page.get_by_role("button", name="Start").click()
        page.get_by_role("tab", name="Speculation").click()
        rate_cell = page.get_by_role("cell", name="acceptance rate", exact=True)
        acceptance = page.get_by_role("row").filter(has=rate_cell)
        expect(acceptance).to_contain_text(re.compile(r"0\.\d*[1-9]"), timeout=20_000)
        rate = float(re.search(r"\d\.\d{4}", acceptance.inner_text()).group())
        # the load generator's lag as the live charts show it, and as the verdict judges it
        lag = page.get_by_role("row").filter(has=page.get_by_role("cell", name="load generator lag"))
        expect(lag).to_contain_text(re.compile(r"\d+\.\d% of wake-ups late at 4 users .*\d+\.\d% of the "
                                               r"time behind at 4 users"))
        page.screenshot(path=str(ARTIFACTS / "webui_speculation_tab.png"), full_page=True)
        page.get_by_role("tab", name="Exact latency").click()
        expect(page.get_by_role("row").filter(has=page.get_by_role("cell", name="code", exact=True))
               ).to_contain_text(re.compile(r"\d+\.\d{3}"))
        page.screenshot(path=str(ARTIFACTS / "webui_exact_latency_tab.png"), full_page=True)
        page.get_by_role("tab", name="Download Data").click()
        expect(page.get_by_role("link", name="Download locust-spec request rows CSV")).to_be_visible()
        html = page.content()
        # after stop the client's rate is over the run, as the server's beside it: no emptying window
        page.get_by_role("button", name="Stop").click()
        page.get_by_role("tab", name="Speculation").click()

        def rate_row(name: str):
            return page.get_by_role("row").filter(has=page.get_by_role("cell", name=name, exact=True))

        client = rate_row("output tokens/s (client)")
        expect(client).to_contain_text("over the run, as the server's", timeout=20_000)
        client_tok_s = float(client.get_by_role("cell").nth(1).inner_text())
        server_tok_s = float(rate_row("output tokens/s (server)").get_by_role("cell").nth(1).inner_text())
        page.screenshot(path=str(ARTIFACTS / "webui_speculation_tab_stopped.png"), full_page=True)
        browser.close()
    assert 0.8 < client_tok_s / server_tok_s < 1.25, (client_tok_s, server_tok_s)
    assert 0.0 < rate <= 1.0

    stats = fetch(url + "/spec/stats")
    by_measure = {r["measure"]: r["value"] for r in json.loads(stats)["speculation"]}
    assert float(by_measure["acceptance rate"]) > 0
    rows = fetch(url + "/spec/files/requests").decode()
    assert rows.startswith("start_unix_s,level_users,")
    for text in (html, stats.decode(), fetch(url + "/").decode(), fetch(url + "/stats/requests").decode()):
        assert API_KEY not in text and METRICS_TOKEN not in text

    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    summary = json.loads((tmp_path / "out" / "ui_summary.json").read_text())
    assert summary["schema"] == 2 and summary["server"]["acceptance_rate"] > 0
    for path in (tmp_path / "out").iterdir():
        assert API_KEY not in path.read_text() and METRICS_TOKEN not in path.read_text(), path
