"""The HTML report opens in headless Chromium with every plot loaded (screenshot kept in test-artifacts/)."""

from __future__ import annotations

import pytest
from locust_spec.analysis.cli import run
from locust_spec.analysis.report.plots import FIGURES

from tests.data.run_builder import write_pair
from tests.support import CHROMIUM, REPO

pytestmark = pytest.mark.browser


def test_report_opens_with_all_plots_loaded(tmp_path):
    from playwright.sync_api import sync_playwright

    report = tmp_path / "report.html"
    assert run([*map(str, write_pair(tmp_path)), "-o", str(report), "--serving-concurrency", "64"]) == 0
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            loaded = "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
            widths = page.eval_on_selector_all("img", loaded)
            page.screenshot(path=str(artifacts / "spec-verdict-report.png"), full_page=True)
            heading = page.inner_text("h1")
        finally:
            browser.close()
    assert len(widths) == len(FIGURES) and all(w > 0 for w in widths), widths
    assert heading.startswith("Speculative decoding:")
