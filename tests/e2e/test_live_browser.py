"""The live Speculation page in a real browser: a ladder run started from Locust's UI, locally and with a
worker; the charts fill and move, the level change is marked, and after stop the final picture stays."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from tests.support import ARTIFACTS, BIN, CLIENT_CPU, REPO, chromium, free_port, pinned, wait_http

pytestmark = pytest.mark.browser

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
LEVELS = (1, 6)
CHARTS = ("acceptance", "tpot", "itl", "ttft", "throughput", "queue", "lag")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


@pytest.fixture(params=["local", "distributed"])
def sweep_ui(request, tmp_path, spec_sim):
    """Locust with its web UI running locustfiles/sweep.py against spec-sim (n-gram speculation); with
    `distributed`, a master and one worker. Yields (mode, web UI URL)."""
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    port, master_port = free_port(), free_port()
    common = [str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "sweep.py")]
    run = ["--web-host", "127.0.0.1", "--web-port", str(port), "--host", sim.url,
           "--prompts", "quote", "--prompts", "code", "--max-tokens", "48", "--metrics-interval", "0.5",
           "--levels", ",".join(map(str, LEVELS)), "--stage-time", "12s", "--warmup", "2s"]
    procs = []
    if request.param == "distributed":
        run += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port)]
    procs.append(subprocess.Popen(pinned(common + run, CLIENT_CPU), cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("w")))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc=procs[0])
        if request.param == "distributed":
            procs.append(subprocess.Popen(
                pinned(common + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
                       CLIENT_CPU),
                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "worker.log").open("w")))
        yield request.param, url
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_live_page_draws_the_run_as_it_goes_and_keeps_the_final_picture(sweep_ui):
    from playwright.sync_api import expect, sync_playwright

    mode, url = sweep_ui
    with sync_playwright() as p:
        browser = chromium(p)
        ui = browser.new_page(viewport={"width": 1400, "height": 900})
        ui.goto(url + "/")
        if mode == "distributed":
            for _ in range(60):
                if json.loads(fetch(url + "/worker-count"))["worker_count"] == 1:
                    break
                ui.wait_for_timeout(500)
        ui.get_by_role("button", name="Start").click()
        ui.get_by_role("tab", name="Speculation").click()
        with ui.expect_popup() as popup:
            ui.get_by_role("cell", name="/spec/live", exact=True).click()
        live = popup.value
        requested: list[str] = []
        live.on("request", lambda r: requested.append(r.url))
        live.set_viewport_size({"width": 1400, "height": 1000})
        expect(live.locator("#state")).to_have_text("running", timeout=30_000)

        def points(chart: str) -> int:
            return int(live.locator(f"[data-chart={chart}]").get_attribute("data-points") or 0)

        def line(chart: str, name: str) -> str:
            return live.locator(f"[data-chart={chart}] path[data-line='{name}']").get_attribute("d")

        live.wait_for_function("document.querySelector('[data-chart=tpot]')?.dataset.points >= 4",
                               timeout=60_000)
        early = {"acceptance": line("acceptance", "acceptance rate"), "tpot": line("tpot", "p50")}
        # the ladder moves to its second level: marked on every chart, and the curves go on moving
        for chart in CHARTS:
            expect(live.locator(f"[data-chart={chart}]")).to_have_attribute("data-levels", "2",
                                                                            timeout=60_000)
        expect(live.locator("[data-chart=acceptance] .levellabel").last).to_have_text(f"{LEVELS[1]} users")
        live.wait_for_timeout(4_500)
        assert line("acceptance", "acceptance rate") != early["acceptance"]
        assert line("tpot", "p50") != early["tpot"]
        assert live.locator("[data-chart=acceptance] path[data-line='position 4']").count() == 1
        # one colour per position, none of them the overall line's
        strokes = [live.locator(f"[data-chart=acceptance] path[data-line='{name}']").get_attribute("stroke")
                   for name in ("acceptance rate", "position 1", "position 2", "position 3", "position 4")]
        assert len(set(strokes)) == 5, strokes

        ui.get_by_role("button", name="Stop").click()
        expect(live.locator("#state")).to_have_text("stopped", timeout=60_000)
        final = {chart: points(chart) for chart in CHARTS}
        before = live.locator("body").get_attribute("data-updated")
        live.wait_for_function(f"document.body.dataset.updated !== '{before}'", timeout=15_000)
        assert {chart: points(chart) for chart in CHARTS} == final  # the final picture stays
        assert all(final[c] > 0 for c in ("acceptance", "tpot", "itl", "ttft", "throughput", "queue"))
        # the acceptance chart's "pays above / off below" labels are painted after (over) every data line
        last_line, labels = live.evaluate("""() => {
            const kids = [...document.querySelector('[data-chart=acceptance] svg').children];
            const at = (sel) => kids.map((k, i) => k.matches(sel) ? i : -1).filter((i) => i >= 0);
            return [Math.max(...at('path[data-line]')), at('text.rulelabel')]; }""")
        assert len(labels) == 2 and min(labels) > last_line
        live.screenshot(path=str(ARTIFACTS / f"live_speculation_{mode}.png"), full_page=True)
        browser.close()

    assert requested and all(r.startswith(url + "/") for r in requested)  # nothing from outside Locust
    data = json.loads(fetch(url + "/spec/live.json"))
    assert data["state"] == "stopped" and data["stopped"] is not None
    assert [users for _, users in data["levels"]] == list(LEVELS)
    fields = data["server"]["fields"]
    acceptance = [p[fields.index("acceptance")] for p in data["server"]["points"]]
    assert any(a is not None and 0 < a <= 1 for a in acceptance)
    running = [p[fields.index("running")] for p in data["server"]["points"]]
    assert max(r for r in running if r is not None) > LEVELS[0]  # the server saw the second level
