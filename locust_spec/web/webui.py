"""The Speculation tab of Locust's web UI: live acceptance, exact latency per class, cross-check, our files.

Locust's UI draws `extended_tabs`, each a table (`extended_tables`) whose rows arrive with every poll of
`/stats/requests` (`extended_stats`); it stops polling once the test has stopped, so the last poll shows
the final picture. Two tabs: "Speculation" (server counters over the run, per-level acceptance, tokens/s,
concurrency, the load generators' lag, the live cross-check) and "Exact latency" (TTFT / ITL / TPOT p50
and p99 per prompt class from the HDR histograms: the master's merged ones in a distributed run).
`/spec/stats` serves the same as JSON; `/spec/files/<name>` the run's files, linked from the UI's Download
Data tab. Nothing here reads or shows the API key or the metrics token.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

import orjson
from flask import Blueprint, Response, abort, request, send_file
from locust.runners import STATE_RUNNING, STATE_SPAWNING, STATE_STOPPED

from locust_spec.core import runfiles
from locust_spec.core.level import LevelKey, describe
from locust_spec.core.runfiles import ErrorKind
from locust_spec.metrics import crosscheck, level_window
from locust_spec.metrics.counters import SpecWindow
from locust_spec.recording import summary
from locust_spec.recording.histograms import LatencyHistograms, new_histogram, percentiles_us
from locust_spec.recording.processor import E2E, INTERRUPTED, TPOT
from locust_spec.recording.records import FileSink
from locust_spec.web import live
from locust_spec.wiring.lag import LATE_MS, LATE_SHARE
from locust_spec.wiring.run import SpecRun

TAB = "speculation"
LATENCY_TAB = "spec-latency"
REFRESH_S = 2.0  # the UI polls every 2 s; percentiles over many histograms should not run more often
RATE_WINDOW_S = 15.0  # workers report every 3 s: a shorter window would show their reporting rhythm
FILES = {  # name in the URL -> (suffix after PREFIX, link title)
    "requests": (runfiles.REQUESTS, "Download locust-spec request rows CSV"),
    "latency": (runfiles.LATENCY, "Download locust-spec exact latency JSON (HDR histograms)"),
    "server_metrics": (runfiles.SERVER_METRICS, "Download locust-spec server metrics CSV"),
    "summary": (runfiles.SUMMARY, "Download locust-spec run summary JSON"),
    "run": (runfiles.RUN, "Download what locust-spec recorded of the run (model, server, load) JSON"),
}


def _ms(value_us: int | None) -> str:
    return "" if value_us is None else f"{value_us / 1000.0:.3f}"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "" if value is None else format(value, fmt)


def latency_rows(hists: LatencyHistograms) -> list[dict]:
    """One row per prompt class, then `all`: count and p50/p99 of TTFT, ITL and TPOT in ms (all requests)."""
    rows = []
    classes = hists.classes()
    for cls in [*classes, "all"]:
        row: dict = {"cls": cls}
        for metric in ("ttft", "itl", "tpot"):
            if cls == "all":
                hist = new_histogram()
                for c in classes:
                    part = hists.get(metric, c)
                    if part is not None:
                        hist.add(part)
            else:
                hist = hists.get(metric, cls)
            p50 = p99 = None
            if hist is not None and hist.total_count:
                p50, p99 = percentiles_us(hist, (50.0, 99.0))
            if metric == "ttft":
                row["n"] = hist.total_count if hist is not None else 0
            row[f"{metric}50"], row[f"{metric}99"] = _ms(p50), _ms(p99)
        rows.append(row)
    return rows


def token_rate(samples: Sequence[tuple[float, float]]) -> float | None:
    """Tokens per second between the oldest and newest (time, cumulative tokens) sample; None if undefined."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    return max(n1 - n0, 0.0) / (t1 - t0)


def run_token_rate(entries: Iterable, total) -> float | None:
    """Output tokens per second over the whole test from Locust's stats (E2E rows carry the tokens), from
    the test's start to its last request: the span the server's own rate is taken over. `total` is the
    stats' Aggregated entry, made afresh at the test's start (each row's entry only at its first request)."""
    tokens = sum(entry.total_content_length for entry in entries if entry.method == E2E)
    span = (total.last_request_timestamp or 0.0) - total.start_time
    return tokens / span if span > 0 else None


def lag_row(clients: Mapping[str, Mapping], level: LevelKey) -> dict:
    """The load generators' event-loop lag from their client summaries, worst process first, at the current
    level and over the run: the share of wake-ups late (the live charts' lag) and the share of the time
    behind (what the run summary and spec-verdict judge)."""

    def worst(share: Callable[[Mapping], float | None]) -> float | None:
        return max((v for v in map(share, clients.values()) if v is not None), default=None)

    def wakeups(counts: Mapping, samples: str, late: str) -> float | None:
        return int(counts[late]) / int(counts[samples]) if counts.get(samples) else None

    def at_level(summary: Mapping) -> Mapping:
        return (summary.get("by_level") or {}).get(str(level)) or {}

    parts = []
    for what, here, overall in (
            ("of wake-ups late", worst(lambda c: wakeups(at_level(c), "samples", "late_samples")),
             worst(lambda c: wakeups(c, "loop_lag_samples", "loop_lag_late_samples"))),
            ("of the time behind", worst(lambda c: at_level(c).get("late_share") if at_level(c) else None),
             worst(lambda c: c.get("loop_late_share")))):
        if here is not None:
            parts.append(f"{float(here):.1%} {what} at {describe(level)}"
                         + (f" ({float(overall):.1%} over the run)" if overall is not None else ""))
        elif overall is not None:
            parts.append(f"{float(overall):.1%} {what} over the run")
    return {"measure": "load generator lag", "value": "; ".join(parts),
            "source": f"event loop late by >= {LATE_MS:g} ms, worst process; wake-ups: the live charts' lag; "
                      f"time behind: what the run summary and spec-verdict judge (above {LATE_SHARE:.0%} its "
                      "timestamps are late: add --processes or workers)"}


def live_totals(entries: Iterable, errors: Iterable) -> crosscheck.ClientTotals:
    """Client totals from Locust's stats (its E2E rows carry output tokens as response length; requests
    cut off at stop are its Interrupted rows).

    Locust's stats are at hand on the master and cost nothing to read; reading the request rows instead
    would grow with the run. Per-request acceptance is not in them, so the live check skips it.
    """
    t = crosscheck.ClientTotals()
    for entry in entries:
        if entry.method == E2E:
            t.requests += entry.num_requests
            t.ok += entry.num_requests - entry.num_failures
            t.output_tokens += entry.total_content_length
        elif entry.method == INTERRUPTED:
            t.requests += entry.num_requests
            t.interrupted += entry.num_requests
        elif entry.method == TPOT:
            t.tpot_sum_ms += entry.total_response_time
            t.tpot_count += entry.num_requests
    for error in errors:
        if error.method == E2E and f"{ErrorKind.HTTP.value}_" not in str(error.error):
            t.unknown_outcome += error.occurrences
    return t


def speculation_rows(run: SpecWindow | None, levels: Sequence[tuple[LevelKey, SpecWindow]], users: int,
                     client_tok_s: float | None, checks: Sequence[crosscheck.Check], running: bool,
                     warnings: Sequence[str], arrivals: Mapping[str, dict] | None = None,
                     over_run: bool = False, lag: dict | None = None) -> list[dict]:
    """The Speculation tab's rows: (measure, value, source), in this order. `client_tok_s` is over the
    last seconds of Locust's stats, or `over_run`, once the users stop, over the whole test; `lag` is
    `lag_row`'s; open loop, per rate level the rate asked, scheduled and sent, and how late requests went
    out (the arrival ledger's account).

    While the test runs, the server has counted the requests in flight and the client not yet (or the other
    way round, between scrapes), so the cross-check shows both sides without judging them."""
    rows: list[dict] = []

    def add(name: str, value: object, source: str) -> None:
        rows.append({"measure": name, "value": value, "source": source})

    if run is None:
        add("server counters", "not scraped (--metrics-url off, or no host)", "")
    else:
        counters = f"server /metrics, {run.scrapes} scrapes over the run"
        add("server", run.server_kind, counters)
        add("acceptance rate", _num(run.acceptance_rate, ".4f"), counters)
        add("mean acceptance length", _num(run.mean_acceptance_length, ".3f"), counters)
        add("acceptance per position", " ".join(f"{p:.3f}" for p in run.per_position), counters)
        span = run.end_unix_s - run.start_unix_s
        tokens = run.generation_tokens
        server_tok_s = tokens / span if tokens is not None and span > 0 else None
        add("output tokens/s (server)", _num(server_tok_s, ".1f"), counters)
        add("peak requests running / users", f"{_num(run.max_requests_running, 'g')} / {users}", counters)
        for level_users, window in levels:
            add(f"acceptance at {describe(level_users)}", _num(window.acceptance_rate, ".4f"),
                f"server /metrics, {window.scrapes} scrapes {level_window.LABEL}")
    # After stop the last seconds hold no requests: the client's rate over the run is the one to set beside
    # the server's (its window emptying looked like a disagreement).
    add("output tokens/s (client)", _num(client_tok_s, ".1f"),
        "over the run, as the server's (Locust's stats)" if over_run else
        f"last {RATE_WINDOW_S:g} s of Locust's stats")
    if lag is not None:
        rows.append(lag)
    for key, entry in (arrivals or {}).items():
        late = entry.get("lateness_ms") or {}
        add(f"arrivals at {describe(key)}",
            f"sent {_num(entry.get('achieved_rate'), '.2f')} req/s of "
            f"{_num(entry.get('scheduled_rate'), '.2f')} scheduled; lateness p50 "
            f"{_num(late.get('p50'), '.1f')} / p99 {_num(late.get('p99'), '.1f')} ms; "
            f"{entry.get('missed', 0)} of {entry.get('scheduled', 0)} never sent"
            + ("; NOT KEPT: " + "; ".join(entry["why"]) if entry.get("flagged") else ""),
            "open loop: the schedule's arrivals after warm-up against the rows that came back")
    for check in checks:
        verdict = "running" if running else "disagree" if check.warning else "agree"
        add(f"cross-check {check.name}", f"{verdict}: client {check.client:g}, server {check.server:g}",
            f"allowed +-{check.allowed:g} after the test; the final check is in the run summary")
    for line in warnings:
        add("warning", line, "")
    return rows


class SpecView:
    """What the tabs show for one run, recomputed at most every REFRESH_S."""

    def __init__(self, run: SpecRun) -> None:
        self.run = run
        self.environment = run.environment
        self._tokens: deque[tuple[float, float]] = deque()
        self._cached: dict | None = None
        self._at = 0.0
        self._state: str | None = None

    def test_started(self) -> None:
        """Locust's stats start from zero: so does the token rate."""
        self._tokens.clear()
        self._tokens.append((time.monotonic(), 0.0))
        self._cached = None

    def sink(self) -> FileSink | None:
        """The master's or local runner's FileSink, whose histograms hold every request so far."""
        sink = self.run.sink
        return sink if isinstance(sink, FileSink) else None

    def _arrivals(self) -> dict[str, dict]:
        ledger = self.run.ledger
        return ledger.summary()[0] if ledger is not None else {}

    def stats(self) -> dict:
        now = time.monotonic()
        # Locust's page stops polling once the test has stopped: its last poll must see the new state
        state = self.environment.runner.state
        if self._cached is None or now - self._at >= REFRESH_S or state != self._state:
            self._cached, self._at, self._state = self._compute(now), now, state
        return self._cached

    def _compute(self, now: float) -> dict:
        runner = self.environment.runner
        entries = list(runner.stats.entries.values())
        totals = live_totals(entries, runner.stats.errors.values())
        stopped = runner.state == STATE_STOPPED
        self._tokens.append((now, float(totals.output_tokens)))
        while len(self._tokens) > 2 and now - self._tokens[1][0] >= RATE_WINDOW_S:
            self._tokens.popleft()
        found = self.run.scraper
        models = summary.models_under_test(self.run.client_summaries())
        run = found.run_window(models) if found is not None and found.first else None
        levels = found.level_windows(models) if found is not None else []
        checks = crosscheck.cross_check(totals, run) if run is not None else []
        warnings = found.warnings(models) if found is not None else []
        found_collector = self.run.collector
        if self.run.workers is not None and found_collector is not None:
            warnings += [lw.warning() for lw in self.run.workers.found(found_collector)]
        if found_collector is not None and stopped:
            warnings += found_collector.warnings()
        sink = self.sink()
        users = int(getattr(runner, "target_user_count", None) or runner.user_count or 0)
        charts = {"measure": "live charts", "value": live.link(self.environment),
                  "source": "click: acceptance, TPOT, load and lag over time"}
        # from cleanup on, the users are stopping: the last seconds' rate falls to nothing
        ended = runner.state not in (STATE_SPAWNING, STATE_RUNNING)
        client_tok_s = run_token_rate(entries, runner.stats.total) if ended else token_rate(self._tokens)
        return {
            "speculation": [charts, *speculation_rows(
                run, levels, users, client_tok_s, checks, not stopped, warnings, self._arrivals(),
                over_run=ended, lag=lag_row(self.run.client_summaries(), self.run.levels.current().key))],
            "latency": latency_rows(sink.histograms) if sink is not None else [],
            "latency_source": "HDR histograms" if sink is not None else "none: run with --csv PREFIX",
        }


def install(run: SpecRun, web_ui) -> SpecView:
    """Add the tabs, the JSON endpoint and the file downloads to Locust's web UI."""
    view = SpecView(run)
    base = getattr(run.environment.parsed_options, "web_base_path", "") or ""
    blueprint = Blueprint("locust_spec", __name__, url_prefix=base)

    @blueprint.route("/spec/stats")
    @web_ui.auth_required_if_enabled
    def spec_stats() -> Response:
        return Response(orjson.dumps(view.stats()), mimetype="application/json")

    @blueprint.route("/spec/files/<name>")
    @web_ui.auth_required_if_enabled
    def spec_file(name: str) -> Response:
        if name not in FILES or run.files is None:
            abort(404)
        path = run.files.path(FILES[name][0]).resolve()
        sink = view.sink()
        if name == "latency" and sink is not None:  # the file is rewritten only now and then
            body = orjson.dumps(sink.histograms.to_dict(), option=orjson.OPT_INDENT_2)
            return _download(body, path.name, "application/json")
        if name == "summary" and not path.exists():
            built = run.summary()
            return _download(orjson.dumps(built, option=orjson.OPT_INDENT_2), path.name, "application/json")
        if not path.exists():
            abort(404)
        return send_file(path, as_attachment=True, download_name=path.name)

    web_ui.app.register_blueprint(blueprint)

    @web_ui.app.after_request
    def add_spec_stats(response: Response) -> Response:
        if request.path != f"{base}/stats/requests" or not response.is_json:
            return response
        stats = view.stats()
        data = {**response.get_json(), "extended_stats": [
            {"key": TAB, "data": stats["speculation"]},
            {"key": LATENCY_TAB, "data": stats["latency"]},
        ]}
        response.set_data(orjson.dumps(data))
        return response

    web_ui.template_args.update({
        "extended_tabs": [{"title": "Speculation", "key": TAB},
                          {"title": "Exact latency", "key": LATENCY_TAB}],
        "extended_tables": [
            # not "name": Locust's table sorts by a column of that key, and this order is meant
            {"key": TAB, "structure": [{"key": "measure", "title": "Measure"},
                                       {"key": "value", "title": "Value"},
                                       {"key": "source", "title": "Source"}]},
            {"key": LATENCY_TAB, "structure": [
                {"key": "cls", "title": "Prompt class"}, {"key": "n", "title": "Requests"},
                {"key": "ttft50", "title": "TTFT p50 ms"}, {"key": "ttft99", "title": "TTFT p99 ms"},
                {"key": "itl50", "title": "ITL p50 ms"}, {"key": "itl99", "title": "ITL p99 ms"},
                {"key": "tpot50", "title": "TPOT p50 ms"}, {"key": "tpot99", "title": "TPOT p99 ms"},
            ]},
        ],
        "extended_csv_files": [{"href": f"./spec/files/{name}", "title": title}
                               for name, (_, title) in FILES.items()] if run.files is not None else [],
    })
    return view


def _download(body: bytes, name: str, mimetype: str) -> Response:
    return Response(body, mimetype=mimetype, headers={"Content-Disposition": f"attachment; filename={name}"})
