"""Per-process plugin state and Locust listeners: settings, prompt sampler, the off-hot-path processor
that turns finished streams into Locust events, rows and histograms, the record sink, the lag monitor."""

from __future__ import annotations

import gc
import logging
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import gevent
import gevent.event
import gevent.lock
from locust import events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, LocalRunner, MasterRunner, WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from locust_spec import level as level_mod
from locust_spec import server_api
from locust_spec.budget import ClientBudget
from locust_spec.lag import LagMonitor
from locust_spec.options import RequestSettings, settings_from
from locust_spec.prompts import Prompt, PromptError, PromptSampler, prompt_specs, stream_seed
from locust_spec.records import FileSink, RecordSink, RequestRow, make_row
from locust_spec.sse import DONE, parse_object
from locust_spec.timing import RequestTiming, request_timing
from locust_spec.trace import Trace
from locust_spec.transport import Arrivals

log = logging.getLogger(__name__)
YIELD_S = 0.0005
INLINE_BACKLOG = 5000  # past this many waiting streams, process inline so memory stays bounded


@dataclass(eq=False)
class Started:
    """One request from start to end, as the user hands it over: raw, unparsed arrivals."""

    prompt: Prompt
    level_users: int
    warmup: bool
    start_unix: float = 0.0
    start: float = 0.0
    end: float = 0.0
    arrivals: Arrivals = field(default_factory=Arrivals)
    objects: list | None = None
    sdk_done: bool = False
    error: str | None = None


class StreamError(Exception):
    """What Locust shows for a failed request: the row's short error text."""


class Plugin:
    def __init__(self, environment) -> None:
        self.environment = environment
        options = environment.parsed_options
        self.api_key: str = getattr(options, "api_key", "") or ""
        # Built here so a bad --prompts fails at start; each run builds its own (use_run_options).
        self.sampler = PromptSampler(prompt_specs(options.prompts), options.seed)
        self.sink: RecordSink | None = None
        self.row_listeners: list[Callable[[RequestRow], None]] = []  # e.g. the live page's timeline
        self.lag = LagMonitor(active=self._running, level=lambda: self.level().users)
        self.budget = ClientBudget(active=self._running, level=lambda: self.level().users)
        self.trace = Trace.from_env()
        self._queue: deque[Started] = deque()
        self._wake = gevent.event.Event()
        self._worker: gevent.Greenlet | None = None
        self._stopping = False
        self._settings: dict[str, RequestSettings] = {}
        self._settings_lock = gevent.lock.Semaphore()
        self._no_continuous: set[str] = set()
        self._sdk_clients: dict[str, object] = {}
        self.requests = 0
        self.failures = 0
        self.gave_up = False

    def use_run_options(self, worker_index: int) -> None:
        """At test start, take the run's options: on a worker they are the master's, which Locust sends
        with the spawn message (this process was built from its own command line), and the web UI may
        have changed them. The prompt stream is seeded per worker (prompts.stream_seed)."""
        options = self.environment.parsed_options
        self.sampler = PromptSampler(prompt_specs(options.prompts), stream_seed(options.seed, worker_index))
        self.api_key = getattr(options, "api_key", "") or self.api_key  # else this process's own
        with self._settings_lock:
            self._settings.clear()
        self._sdk_clients.clear()

    def _running(self) -> bool:
        return getattr(self.environment.runner, "state", None) == STATE_RUNNING

    def level(self) -> level_mod.Level:
        return level_mod.current(self.environment)

    def settings(self, host: str) -> RequestSettings:
        """Resolved once per host; the model defaults to the first id of GET /v1/models."""
        with self._settings_lock:
            if host not in self._settings:
                model = self.environment.parsed_options.model or self._first_model(host)
                self._settings[host] = settings_from(self.environment.parsed_options, model)
            return self._settings[host]

    def _first_model(self, host: str) -> str:
        return server_api.first_model(host, self.api_key, self.environment.parsed_options.connect_timeout)

    def give_up(self, message: str) -> None:
        """The run cannot measure anything (no model to ask for): one error line, exit code 2, quit now."""
        if self.gave_up:
            return
        self.gave_up = True
        log.error("locust-spec: %s", message)
        self.environment.process_exit_code = 2
        if self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)

    def continuous_usage(self, host: str) -> bool:
        return host not in self._no_continuous

    def reject_continuous_usage(self, host: str) -> None:
        if host not in self._no_continuous:
            self._no_continuous.add(host)
            log.warning("locust-spec: %s rejects continuous_usage_stats; tokens per chunk are estimated",
                        host)

    def openai_client(self, host: str):
        """One shared SDK client per host; no retries (a retry would hide a failure and skew timing)."""
        if host not in self._sdk_clients:
            import openai

            for name in ("openai", "httpx", "httpcore"):
                logging.getLogger(name).setLevel(logging.WARNING)
            from locust_spec.transport import Endpoint, sdk_client_options

            endpoint = Endpoint(host)
            opts = self.environment.parsed_options
            scheme = "https" if endpoint.ssl else "http"
            self._sdk_clients[host] = openai.OpenAI(
                base_url=f"{scheme}://{endpoint.host_header}{endpoint.api_base}",
                api_key=self.api_key or "none", max_retries=0,
                timeout=openai.Timeout(opts.request_timeout, connect=opts.connect_timeout,
                                       read=opts.idle_timeout),
                **sdk_client_options(opts.max_line_bytes, opts.max_response_bytes),
            )
        return self._sdk_clients[host]

    def submit(self, started: Started) -> None:
        """Queue a finished stream; the processor greenlet handles it when readers are idle."""
        if len(self._queue) >= INLINE_BACKLOG:
            self.process(started)
            return
        self._queue.append(started)
        self._wake.set()

    def start(self) -> None:
        # Everything imported and built so far lives for the run: moved out of the collector's reach,
        # a full collection no longer walks it (tens of ms, every chunk arriving meanwhile stamped late).
        gc.freeze()
        if self._worker is None:
            self._stopping = False
            self._worker = gevent.spawn(self._run)
        self.lag.start()
        self.budget.start()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait()
            self._wake.clear()
            while self._queue and not self._stopping:
                # Two slices per request, each followed by a timed sleep (it polls the sockets; sleep(0)
                # did not): a reader waits for at most one slice before it stamps its chunk.
                started = self._queue.popleft()
                timing = _measure(started)
                gevent.sleep(YIELD_S)
                self._report(started, timing)
                gevent.sleep(YIELD_S)

    def drain(self) -> None:
        while self._queue:
            self.process(self._queue.popleft())

    def stop(self) -> None:
        self.lag.stop()  # first: the drain below blocks the loop by design
        self.budget.stop()
        if self._worker is not None:
            # Never kill the processor mid-request: the one in its hands (between its slices) would be
            # lost. It finishes that one and exits; the drain takes the rest.
            self._stopping = True
            self._wake.set()
            self._worker.join()
            self._worker = None
        self.drain()

    def process(self, started: Started) -> None:
        """Parse, time, and report one request: Locust events, a row, histograms."""
        self._report(started, _measure(started))

    def _report(self, started: Started, timing: RequestTiming | None) -> None:
        error = started.error or (timing.error if timing is not None else None)
        prompt = started.prompt
        row = make_row(started.start_unix, started.level_users, prompt.cls, prompt.id, started.warmup,
                       timing, error)
        if self.sink is not None:
            self.sink.add(row, timing)
        for listener in self.row_listeners:
            listener(row)
        if self.trace is not None and timing is not None:
            self.trace.write(started.arrivals.body, started.objects, started.start_unix, started.start,
                             timing)
        self.requests += 1
        if timing is not None:
            self.budget.add_chunks(started.level_users, timing.chunks)
        fire = self.environment.events.request.fire
        if error is None and timing is not None and timing.ttft_ms is not None:
            fire(request_type="TTFT", name=prompt.cls, response_time=timing.ttft_ms, response_length=0,
                 exception=None, context={})
            if timing.tpot_ms is not None:
                fire(request_type="TPOT", name=prompt.cls, response_time=timing.tpot_ms, response_length=0,
                     exception=None, context={})
            fire(request_type="E2E", name=prompt.cls, response_time=timing.e2e_ms,
                 response_length=timing.output_tokens, exception=None, context={})
        else:
            self.failures += 1
            elapsed = (started.end - started.start) * 1000.0 if started.start else 0.0
            fire(request_type="E2E", name=prompt.cls, response_time=elapsed, response_length=0,
                 exception=StreamError(error or "no_token: stream carried no token"), context={})

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()
        if self.trace is not None:
            self.trace.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        if self.trace is not None:
            self.trace.close()
            self.trace = None

    def client_summary(self) -> dict:
        """For PREFIX_summary.json's "client" part."""
        return {"requests": self.requests, "failures": self.failures, **self.lag.summary(),
                "budget_by_level": self.budget.summary()}


def _measure(started: Started) -> RequestTiming | None:
    if not started.start:
        return None
    if started.objects is not None:
        timed = [(t, parse_object(chunk.to_dict())) for t, chunk in started.objects]
        if started.sdk_done:
            timed.append((started.end, DONE))
    else:
        timed = started.arrivals.events()
    return request_timing(started.start, timed, started.end)


_plugins: dict[int, Plugin] = {}


def get(environment) -> Plugin:
    return _plugins[id(environment)]


# A flush rewrites PREFIX_latency.json (HDR encoding of every histogram: ~50 ms measured), which blocks
# the event loop and stamps every chunk arriving meanwhile late; at 2 s that was 2.5 % of the run's
# time, above the p99. Rows reach the file by themselves as their buffer fills; at stop all is flushed.
@events.init.add_listener
def _on_init(environment, **_kw) -> None:
    if environment.parsed_options is None or not hasattr(environment.parsed_options, "prompts"):
        return
    try:
        plugin = Plugin(environment)
    except (PromptError, ValueError) as e:
        raise SystemExit(f"locust-spec: {e}") from None
    _plugins[id(environment)] = plugin
    gevent.signal_handler(signal.SIGINT, _interrupt_main)
    prefix = getattr(environment.parsed_options, "csv_prefix", None)
    if prefix and not isinstance(environment.runner, WorkerRunner):
        plugin.sink = FileSink(prefix)
    if not isinstance(environment.runner, MasterRunner):
        gevent.spawn(_flush_periodically, plugin)


def _interrupt_main() -> None:
    """SIGINT as a KeyboardInterrupt in Locust's main greenlet, which stops the run in order; Python would
    raise it in whichever greenlet runs, often a user mid-request (no row, a traceback, a dead greenlet)."""
    gevent.get_hub().parent.throw(KeyboardInterrupt)


def _flush_periodically(plugin: Plugin) -> None:
    """Flush at the sink's own pace (a worker's batches often, a local run's latency.json rarely)."""
    while True:
        gevent.sleep(plugin.sink.flush_interval_s if plugin.sink is not None else 1.0)
        if plugin.sink is not None:
            plugin.sink.flush()


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    plugin = _plugins.get(id(environment))
    if plugin is not None and not isinstance(environment.runner, MasterRunner):
        try:
            plugin.use_run_options(getattr(environment.runner, "worker_index", 0))
        except (PromptError, ValueError) as e:  # e.g. the master's prompt file is missing here
            plugin.give_up(str(e))
            return
        plugin.start()


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    plugin = _plugins.get(id(environment))
    if plugin is not None:
        plugin.stop()
        plugin.flush()
        local = isinstance(environment.runner, LocalRunner)
        if local and getattr(environment.parsed_options, "csv_prefix", None):
            # Locust rewrites PREFIX_stats.csv only every CSV_STATS_INTERVAL_SEC and not at exit: let it
            # take the requests reported at stop (interrupted, drained), so its counts equal our rows.
            gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.2)


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    plugin = _plugins.get(id(environment))
    if plugin is not None:
        runner = environment.runner
        if isinstance(runner, LocalRunner) and runner.state in (STATE_SPAWNING, STATE_RUNNING):
            # SIGINT/SIGTERM quit before Locust stops the users: stop them now, so that each request
            # in flight gets its `interrupted` row before the files close.
            runner.stop()
        plugin.stop()
        plugin.close()
