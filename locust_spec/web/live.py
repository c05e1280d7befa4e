"""The live Speculation page (`/spec/live`): feeds a `timeline.Timeline` from the run and serves it.

Only where charts can be looked at: a local or master runner with the web UI. Requests come from the
processor (local) or the workers' batches (master), scrapes from the scraper, the level from the run's
level board, the event-loop lag from the load generators' client summaries (all of them parts of the
SpecRun; plugin.py calls in here). A greenlet closes a point every tick while
the test runs; after stop the last picture stays until the next test starts. The page and its script are
package data (`locust_spec/web/`): no CDN, nothing fetched from outside the Locust process.
"""

from __future__ import annotations

import time
from importlib import resources

import gevent
import orjson
from flask import Blueprint, Response, request
from locust.runners import STATE_STOPPED

from locust_spec.recording.records import RequestRow
from locust_spec.recording.timeline import TICK_S, Timeline
from locust_spec.wiring.run import SpecRun

PATH = "/spec/live"
LEVEL_POLL_S = 0.5  # level marks land within this of the change; points are still one per tick
WEB = resources.files("locust_spec") / "web"
# Turns the Speculation tab's "live charts" cell into a link without touching Locust's React tree:
# one delegated click handler and a data attribute for the look.
LINK_SCRIPT = """<script>(function(){var m=%s;
new MutationObserver(function(){document.querySelectorAll('td').forEach(function(td){
if(td.textContent===m&&!td.dataset.specLive){td.dataset.specLive='1';td.title='Open the live charts';}});})
.observe(document.body,{childList:true,subtree:true,characterData:true});
document.addEventListener('click',function(e){var td=e.target.closest&&e.target.closest('td[data-spec-live]');
if(td)window.open(m,'_blank');});
var s=document.createElement('style');s.textContent='td[data-spec-live]{color:#1976d2;'+
'text-decoration:underline;cursor:pointer}';document.head.appendChild(s);})();</script>"""

def link(environment) -> str:
    """The page's path as the browser sees it (with Locust's --web-base-path)."""
    return (getattr(environment.parsed_options, "web_base_path", "") or "") + PATH


def _row_listener(timeline: Timeline):
    def on_row(row: RequestRow) -> None:
        timeline.request(row.ttft_ms, row.tpot_ms, row.output_tokens, row.error is None, row.lateness_ms,
                         (row.itl_p50_ms, row.itl_p99_ms))
        if timeline.running:
            timeline.tasks.request(row)
    return on_row


def _state(run: SpecRun, timeline: Timeline) -> dict:
    runner = run.environment.runner
    current = run.levels.current()
    # Locust says stopped before its test_stop listeners ran; the last point comes from the last of them.
    state = "stopping" if runner.state == STATE_STOPPED and timeline.running else runner.state
    return {**timeline.to_json(), "now": time.time(), "state": state,
            "users": int(runner.user_count or 0), "level": current.key, "rate": current.rate,
            "warmup_until": current.warmup_until_unix_s or None}


def install(run: SpecRun, web_ui) -> Timeline:
    """The page, its script and its data on Locust's web app (same authentication as Locust's own pages);
    the timeline is fed with every request row and ticked by a greenlet of its own."""
    environment = run.environment
    timeline = Timeline()
    base = getattr(environment.parsed_options, "web_base_path", "") or ""
    blueprint = Blueprint("locust_spec_live", __name__, url_prefix=base)

    @blueprint.route(PATH)
    @web_ui.auth_required_if_enabled
    def live_page() -> Response:
        return Response((WEB / "live.html").read_bytes(), mimetype="text/html")

    @blueprint.route(PATH + ".js")
    @web_ui.auth_required_if_enabled
    def live_script() -> Response:
        return Response((WEB / "live.js").read_bytes(), mimetype="text/javascript")

    @blueprint.route(PATH + ".json")
    @web_ui.auth_required_if_enabled
    def live_data() -> Response:
        return Response(orjson.dumps(_state(run, timeline)), mimetype="application/json",
                        headers={"Cache-Control": "no-store"})

    web_ui.app.register_blueprint(blueprint)
    on_row = _row_listener(timeline)
    if run.processor is not None:
        run.processor.row_listeners.append(on_row)
    if run.collector is not None:
        run.collector.row_listeners.append(on_row)
    gevent.spawn(_tick_forever, run, timeline)

    @web_ui.app.after_request
    def add_link_script(response: Response) -> Response:
        if request.path not in (base + "/", base) or response.mimetype != "text/html":
            return response
        html = response.get_data(as_text=True)
        script = LINK_SCRIPT % orjson.dumps(link(environment)).decode()
        response.set_data(html.replace("</body>", script + "</body>", 1))
        return response

    return timeline


def _tick_forever(run: SpecRun, timeline: Timeline) -> None:
    next_tick = time.monotonic() + TICK_S
    while True:
        gevent.sleep(LEVEL_POLL_S)
        if not timeline.running:
            continue
        timeline.level(time.time(), run.levels.current().key)
        if time.monotonic() >= next_tick:
            next_tick += TICK_S
            users = int(run.environment.runner.user_count or 0)
            timeline.tick(time.time(), users, run.client_summaries(), run.levels.current().rate)


def test_started(run: SpecRun, timeline: Timeline) -> None:
    """After the scraper started: the first point, the level, and the scrape taken at start."""
    timeline.start(time.time(), run.client_summaries())
    timeline.level(time.time(), run.levels.current().key)
    found = run.scraper
    if found is not None:
        if timeline.scrape not in found.listeners:
            found.listeners.append(timeline.scrape)
        timeline.scrape(list(found.last.values()))  # the scrape at start, taken before this listener ran


def test_stopped(run: SpecRun, timeline: Timeline) -> None:
    """After the requests were drained and the scraper took its last scrape: the last point."""
    timeline.stop(time.time(), int(run.environment.runner.user_count or 0), run.client_summaries(),
                  run.levels.current().rate)
