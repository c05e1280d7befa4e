"""SpecRun: everything locust-spec keeps for one Locust environment, in one object on that environment.

Created by the plugin's `init` listener (plugin.py) and found again with `run_of(environment)`; nothing of
a run lives at module level. What it holds depends on the runner:

    local    sampler, processor, FileSink (with --csv), lag monitor, scraper
    worker   sampler, processor, WorkerSink (rows to the master), lag monitor
    master   FileSink (with --csv) fed by the Collector, scraper
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass, field

import gevent
import gevent.lock
from locust.runners import STATE_RUNNING, MasterRunner, WorkerRunner

from locust_spec.client import context, server_api
from locust_spec.client.client import ChatClient, FastChatClient, OpenAIChatClient, Server, openai_sdk
from locust_spec.client.settings import RequestSettings
from locust_spec.core.design import parse_blocks
from locust_spec.core.level import MESSAGE as LEVEL_MESSAGE
from locust_spec.core.level import LevelBoard, runner_users
from locust_spec.core.prompts import Prompt, PromptError, PromptSampler, prompt_specs, stream_seed
from locust_spec.core.runfiles import RunFiles
from locust_spec.metrics import crosscheck
from locust_spec.recording import summary
from locust_spec.recording.budget import ClientBudget
from locust_spec.recording.memtrace import MemTrace
from locust_spec.recording.processor import Processor
from locust_spec.recording.records import FileSink, RecordSink
from locust_spec.recording.scraper import Scraper, scraper_from_options
from locust_spec.recording.timeline import Timeline
from locust_spec.recording.trace import Trace
from locust_spec.wiring.distributed import BATCH, Collector, WorkerSink
from locust_spec.wiring.lag import LagMonitor
from locust_spec.wiring.options import settings_from
from locust_spec.wiring.turns import Turns

log = logging.getLogger(__name__)

_ATTRIBUTE = "locust_spec_run"


@dataclass(eq=False)
class SpecRun:
    """One environment's locust-spec state. Parts a runner does not need are None (see the module doc)."""

    environment: object
    levels: LevelBoard
    measuring: bool = False
    api_key: str = ""
    files: RunFiles | None = None
    sampler: PromptSampler | None = None
    processor: Processor | None = None
    sink: RecordSink | None = None
    lag: LagMonitor | None = None
    budget: ClientBudget | None = None
    collector: Collector | None = None
    scraper: Scraper | None = None
    timeline: Timeline | None = None
    """The live page's (a local or master runner with the web UI)."""
    memtrace: MemTrace | None = None
    turns: Turns | None = None
    """Under spec-ab's interleaved or simultaneous design: when this arm may send (wiring/turns.py)."""
    gave_up: bool = False
    servers: dict[str, Server] = field(default_factory=dict)
    _servers_lock: gevent.lock.Semaphore = field(default_factory=gevent.lock.Semaphore)
    _fitted: set[str] = field(default_factory=set)
    _fit_lock: gevent.lock.Semaphore = field(default_factory=gevent.lock.Semaphore)

    @classmethod
    def for_environment(cls, environment, measuring: bool = True) -> SpecRun:
        """The run the options ask for, on this environment's runner; raises PromptError/ValueError.

        Not `measuring` (no user class of the environment sends through locust-spec), it only scrapes."""
        options = environment.parsed_options
        runner = environment.runner
        prefix = getattr(options, "csv_prefix", None)
        master = isinstance(runner, MasterRunner)
        worker = isinstance(runner, WorkerRunner)
        send_level = (lambda data: runner.send_message(LEVEL_MESSAGE, data)) if master else None
        run = cls(environment, LevelBoard(runner_users(environment), send_level), measuring,
                  api_key=getattr(options, "api_key", "") or "", files=RunFiles(prefix) if prefix else None)
        if not measuring:
            return run
        if not master:
            # Built here so a bad --prompts fails at start; each test builds its own (use_run_options).
            run.sampler = PromptSampler(prompt_specs(options.prompts), options.seed)
            run.lag = LagMonitor(active=run.running, level=lambda: run.levels.current().users)
            run.budget = ClientBudget(active=run.running, level=lambda: run.levels.current().users)
            run.processor = Processor(environment.events.request.fire, lambda: run.sink, Trace.from_env(),
                                      run.budget)
            run.memtrace = MemTrace.from_env()
        if worker:
            # The master's --csv does not reach workers, so a worker always ships; a master without files
            # drops.
            run.sink = WorkerSink(lambda batch: runner.send_message(BATCH, batch), run.client_summary)
        elif prefix:
            run.sink = FileSink(prefix)
        if master:
            run.collector = Collector()
        return run

    def use_run_options(self, worker_index: int) -> None:
        """At test start, take the run's options: on a worker they are the master's, which Locust sends
        with the spawn message (this process was built from its own command line), and the web UI may
        have changed them. The prompt stream is seeded per worker (prompts.stream_seed)."""
        options = self.environment.parsed_options
        self.sampler = PromptSampler(prompt_specs(options.prompts), stream_seed(options.seed, worker_index))
        design = parse_blocks(getattr(options, "blocks", "") or "")
        sampler = self.sampler
        self.turns = None if design is None or not design.blocked else Turns(
            design, options.seed, lambda seed: sampler.reseed(stream_seed(seed, worker_index)))
        self.api_key = getattr(options, "api_key", "") or self.api_key  # else this process's own
        with self._servers_lock:
            self.servers.clear()
        self._fitted.clear()  # the new sampler has every prompt again

    def running(self) -> bool:
        return getattr(self.environment.runner, "state", None) == STATE_RUNNING

    # -- what users ask for -------------------------------------------------------------------------

    def server(self, host: str) -> Server:
        """Resolved once per host; the model defaults to the first id of GET /v1/models (RuntimeError
        with one line when it cannot be read)."""
        with self._servers_lock:
            if host not in self.servers:
                options = self.environment.parsed_options
                model = options.model or server_api.first_model(host, self.api_key, options.connect_timeout)
                settings = settings_from(options, model)
                sdk = openai_sdk(host, self.api_key, settings) if settings.client == "openai" else None
                self.servers[host] = Server(host, settings, self.api_key, sdk=sdk)
            return self.servers[host]

    def wait_turn(self) -> bool:
        """Under a blocked design, until this arm's block is open (False once the design is over); at
        once otherwise."""
        return self.turns is None or self.turns.wait()

    def next_prompt(self, server: Server) -> Prompt:
        """The next of the run's prompts for `server`. The first time for a host, the prompts that cannot
        fit its context are left out (RuntimeError when none fits): only users that send the run's prompts
        pay for asking."""
        if server.host not in self._fitted:
            with self._fit_lock:
                if server.host not in self._fitted:
                    self._leave_out_too_long(server.host, server.settings)
                    self._fitted.add(server.host)
        return self.sampler.next()

    def _leave_out_too_long(self, host: str, settings: RequestSettings) -> None:
        """Prompts that cannot fit the server's context are never sent (context.py); RuntimeError when
        none is left."""
        timeout = self.environment.parsed_options.connect_timeout
        limit = context.server_max_model_len(host, self.api_key, settings.model, timeout)
        if limit is None:
            return
        counter = context.server_counter(host, self.api_key, settings.model, timeout)
        prompts = self.sampler.prompts
        try:
            found = context.too_long(prompts, limit, settings.max_tokens_for, counter or context.lower_bound)
        except (OSError, ValueError) as e:
            log.warning("locust-spec: could not count prompt tokens at %s (%s); every prompt is sent",
                        host, e)
            return
        if not found:
            return
        log.warning("locust-spec: %s", context.warning(found, len(prompts), limit, counter is not None))
        try:
            self.sampler.leave_out([f.prompt for f in found])
        except PromptError as e:
            raise RuntimeError(f"every prompt exceeds the server's context ({e})") from None

    def settings(self, host: str) -> RequestSettings:
        return self.server(host).settings

    def client(self, host: str) -> ChatClient:
        """A new user's client for `host`: the fast reader, or the SDK with `--client openai`."""
        server = self.server(host)
        kind = OpenAIChatClient if server.sdk is not None else FastChatClient
        return kind(server, self.levels, self.processor.submit)

    def give_up(self, message: str) -> None:
        """The run cannot measure anything (no model to ask for): one error line, exit code 2, quit now."""
        if self.gave_up:
            return
        self.gave_up = True
        log.error("locust-spec: %s", message)
        self.environment.process_exit_code = 2
        if self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)

    # -- the test's life ----------------------------------------------------------------------------

    def start(self) -> None:
        """The test starts on a load-generating runner: the processor and the lag monitor."""
        # Everything imported and built so far lives for the run: moved out of the collector's reach,
        # a full collection no longer walks it (tens of ms, every chunk arriving meanwhile stamped late).
        gc.freeze()
        self.processor.start()
        self.lag.start()
        self.budget.start()
        if self.memtrace is not None:
            self.memtrace.start()

    def stop(self) -> None:
        if self.memtrace is not None:
            self.memtrace.stop()
        if self.lag is not None:
            self.lag.stop()  # first: the drain below blocks the loop by design
        if self.budget is not None:
            self.budget.stop()
        if self.processor is not None:
            self.processor.stop()

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()
        if self.processor is not None and self.processor.trace is not None:
            self.processor.trace.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        if self.processor is not None and self.processor.trace is not None:
            self.processor.trace.close()
            self.processor.trace = None

    def start_scraper(self) -> None:
        """A master or local runner scrapes the server's /metrics from the first test start on."""
        if self.scraper is None:
            self.scraper = scraper_from_options(self.environment.parsed_options, self.environment.host,
                                                self.files, os.environ)
        if self.scraper is not None:
            self.scraper.start()

    def client_summary(self) -> dict:
        """This process's part of PREFIX_summary.json's "client": requests measured, event-loop lag."""
        processor, lag = self.processor, self.lag
        counts = {"requests": processor.requests, "failures": processor.failures} if processor else {}
        budget = {"budget_by_level": self.budget.summary()} if self.budget is not None else {}
        return {**counts, **(lag.summary() if lag is not None else {}), **budget}

    def client_summaries(self) -> dict[str, dict]:
        """Each load-generating process's client summary: the workers' on a master, else this process's."""
        if self.collector is not None:
            return dict(self.collector.clients)
        return {"local": self.client_summary()}

    def summary(self) -> dict | None:
        """PREFIX_summary.json as it stands now, from this process's files and scraper; None without
        `--csv`."""
        if self.files is None:
            return None
        notes: list[str] = []
        totals = None
        requests_path = self.files.requests
        if requests_path.exists():
            try:
                # in a native thread: the file grows with the run, and the web UI asks for this mid-run
                totals = gevent.get_hub().threadpool.apply(crosscheck.read_client_totals, (requests_path,))
            except ValueError as e:
                notes.append(f"cannot read {requests_path}: {e}")
        found = self.scraper
        window = found.run_window() if found is not None else None
        levels = found.level_windows() if found is not None else []
        notes += found.warnings() if found is not None else []
        notes += self.collector.warnings() if self.collector is not None else []
        return summary.build_summary(totals, window, levels, self.client_summaries(), notes)

    def write_summary(self) -> dict | None:
        """Build, write and log the summary at the end of the run; None without `--csv`."""
        built = self.summary()
        if built is None:
            return None
        summary.write(self.files.summary, built)
        for line in built["warnings"]:
            log.warning("locust-spec: %s", line)
        return built


def attach(environment, run: SpecRun) -> SpecRun:
    setattr(environment, _ATTRIBUTE, run)
    return run


def run_of(environment) -> SpecRun | None:
    """The environment's run; None when locust-spec does not run there (its options were not parsed)."""
    return getattr(environment, _ATTRIBUTE, None)
