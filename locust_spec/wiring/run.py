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
import sys
import time
from dataclasses import dataclass, field

import gevent
import gevent.lock
from locust.runners import STATE_RUNNING, MasterRunner, WorkerRunner

from locust_spec.client import context, server_api
from locust_spec.client.client import ChatClient, FastChatClient, OpenAIChatClient, Server, openai_sdk
from locust_spec.client.settings import RequestSettings
from locust_spec.core.design import parse_blocks
from locust_spec.core.level import MESSAGE as LEVEL_MESSAGE
from locust_spec.core.level import Arrival, LevelBoard, runner_users
from locust_spec.core.prompts import (
    Prompt,
    PromptError,
    PromptFiles,
    PromptSampler,
    prompt_specs,
    stream_seed,
)
from locust_spec.core.runfiles import RunFiles
from locust_spec.metrics import crosscheck
from locust_spec.recording import provenance, summary
from locust_spec.recording.budget import ClientBudget
from locust_spec.recording.ledger import ArrivalLedger
from locust_spec.recording.level_table import LevelTally, table
from locust_spec.recording.memtrace import MemTrace
from locust_spec.recording.processor import Processor
from locust_spec.recording.records import FileSink, RecordSink
from locust_spec.recording.scraper import Scraper, scraper_from_options, url_option
from locust_spec.recording.timeline import Timeline
from locust_spec.recording.trace import Trace
from locust_spec.recording.writes import WriteFailed
from locust_spec.wiring.distributed import BATCH, Collector, WorkerSink, WorkerWatch
from locust_spec.wiring.lag import LagMonitor
from locust_spec.wiring.openloop import READY, ArrivalQueue, Readiness, open_loop, slot_name
from locust_spec.wiring.options import selection_from, settings_from
from locust_spec.wiring.replay import TracePrompts, TraceSettings
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
    workers: WorkerWatch | None = None
    """The master's: which workers were lost mid-run."""
    scraper: Scraper | None = None
    timeline: Timeline | None = None
    """The live page's (a local or master runner with the web UI)."""
    memtrace: MemTrace | None = None
    record: dict | None = None
    """PREFIX_run.json as it stands (a local or master runner with --csv)."""
    arrivals: ArrivalQueue | None = None
    """This process's share of the open-loop arrivals (a load-generating runner)."""
    ledger: ArrivalLedger | None = None
    """The rate levels' plans against the rows that came back (a local or master runner)."""
    open_loop: bool = False
    """The run's options ask for arrivals at a rate (`--rate`, `--rates`) or a trace's times (`--trace`)."""
    trace_prompts: TracePrompts | None = None
    """`--trace`: the trace whose row j arrival j is sent as (a load-generating runner)."""
    readiness: Readiness = field(default_factory=Readiness)
    """Open loop: whether every process's users are ready for the first arrivals."""
    planning: bool = False
    """Open loop without the ladder: the first plan waits for every process to be ready."""
    tally: LevelTally | None = None
    """Every request row per level, for the table a headless run prints at its end (local or master)."""
    turns: Turns | None = None
    """Under spec-ab's interleaved or simultaneous design: when this arm may send (wiring/turns.py)."""
    gave_up: bool = False
    gave_up_reason: str = ""
    """Why (`give_up`): said again as a headless run's last line, below Locust's empty tables."""
    write_failure: str | None = None
    """Why the requests CSV stopped (a full disk), for the summary once the sink is closed."""
    prompt_files: PromptFiles = field(default_factory=PromptFiles)
    """The prompt files this process has read: each once, whatever reads it (samplers, PREFIX_run.json)."""
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
        if not worker:
            run.ledger = ArrivalLedger()
            run.levels.listeners.append(run.ledger.planned)
        if not master:
            run.arrivals = ArrivalQueue(slot_name(runner))
            run.levels.listeners.append(run.arrivals.level_changed)
            # Built here so a bad --prompts fails at start; each test builds its own (use_run_options).
            run.sampler = PromptSampler(prompt_specs(options.prompts), options.seed, selection_from(options),
                                        run.prompt_files)
            run.lag = LagMonitor(active=run.running, level=lambda: run.levels.current().key)
            run.budget = ClientBudget(active=run.running, level=lambda: run.levels.current().key,
                                      loaded=run.in_own_block)
            run.processor = Processor(environment.events.request.fire, lambda: run.sink, Trace.from_env(),
                                      run.budget)
            run.memtrace = MemTrace.from_env()
        if worker:
            # The master's --csv does not reach workers, so a worker always ships; a master without files
            # drops.
            run.sink = WorkerSink(lambda batch: runner.send_message(BATCH, batch), run.client_summary)
        elif prefix:
            run.sink = FileSink(prefix, on_failure=run.recording_failed)
        if master:
            run.collector = Collector()
            run.workers = WorkerWatch(level=lambda: run.levels.current().users)
        if run.ledger is not None:
            (run.collector or run.processor).row_listeners.append(run.ledger.add)
        if not worker:
            run.tally = LevelTally()
            (run.collector or run.processor).row_listeners.append(run.tally.add)
        return run

    def use_run_options(self, worker_index: int) -> None:
        """At test start, take the run's options: on a worker they are the master's, which Locust sends
        with the spawn message (this process was built from its own command line), and the web UI may
        have changed them. The prompt stream is seeded per worker (prompts.stream_seed)."""
        options = self.environment.parsed_options
        self.open_loop = open_loop(options)
        trace = TraceSettings.from_options(options)
        self.trace_prompts = None if trace is None else TracePrompts(trace, options.seed)
        self.sampler = PromptSampler(prompt_specs(options.prompts), stream_seed(options.seed, worker_index),
                                     selection_from(options), self.prompt_files)
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

    def in_own_block(self) -> bool:
        """Whether this arm may send now: always, but under a blocked design only in its own blocks (its
        users idle through the others', and the budget counts no chunk's cost there)."""
        if self.turns is None:
            return True
        now = self.turns.clock()
        start = self.turns.design.next_own_start(now)
        return start is not None and start <= now

    # -- what users ask for -------------------------------------------------------------------------

    def server(self, host: str) -> Server:
        """Resolved once per host; the model defaults to the first id of GET /v1/models (RuntimeError
        with one line when it cannot be read)."""
        with self._servers_lock:
            if host not in self.servers:
                options = self.environment.parsed_options
                model = options.model or server_api.first_model(host, self.api_key, options.connect_timeout)
                if options.model:
                    server_api.check_model(host, self.api_key, model, options.connect_timeout)
                settings = settings_from(options, model)
                sdk = openai_sdk(host, self.api_key, settings) if settings.client == "openai" else None
                self.servers[host] = Server(host, settings, self.api_key, sdk=sdk)
            return self.servers[host]

    def check_model(self, host: str | None) -> None:
        """On a master, which sends nothing itself: give up at start when the server does not list --model.
        Its workers find it too, each in its own process; without this the master would exit 0."""
        options = self.environment.parsed_options
        if host and options.model:
            try:
                server_api.check_model(host, self.api_key, options.model, options.connect_timeout)
            except RuntimeError as e:
                self.give_up(str(e))

    def wait_turn(self, arrival_unix_s: float | None = None) -> bool:
        """Under a blocked design, until this arm's block is open (False once the design is over); at
        once otherwise. Open loop (`arrival_unix_s`, when the request's arrival was due) it never waits:
        the schedule put the arrival in this arm's block, and one sent late is late, not held over to the
        arm's next block; the prompt order is that of the arrival's block."""
        if self.turns is None:
            return True
        if arrival_unix_s is not None:
            self.turns.enter(arrival_unix_s)
            return True
        return self.turns.wait()

    def prompt_for(self, arrival: Arrival | None, server: Server) -> Prompt:
        """What a task's first request sends: under `--trace` its arrival's row, else `next_prompt`."""
        if self.trace_prompts is not None and arrival is not None:
            return self.trace_prompts.prompt(arrival.index)
        return self.next_prompt(server)

    def next_prompt(self, server: Server) -> Prompt:
        """The next of the run's prompts for `server`. The first time for a host, the prompts that cannot
        fit its context are left out (RuntimeError when none fits): only users that send the run's prompts
        pay for asking."""
        self.fit_prompts(server)
        return self.sampler.next()

    def fit_prompts(self, server: Server) -> None:
        """Leave out the prompts that cannot fit `server`'s context, once per host (RuntimeError when none
        fits). An open loop's users ask before their first arrival, so the asking delays none."""
        if server.host not in self._fitted:
            with self._fit_lock:
                if server.host not in self._fitted:
                    self._leave_out_too_long(server.host, server.settings)
                    self._fitted.add(server.host)

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
        if self.gave_up:  # e.g. at test start, before the users were spawned: they send nothing
            raise RuntimeError("the run has given up")
        server = self.server(host)
        kind = OpenAIChatClient if server.sdk is not None else FastChatClient
        return kind(server, self.levels, self.processor.submit)

    def user_prepared(self) -> None:
        """Open loop: a user is ready for its first arrival; a worker whose users all are tells the master."""
        runner = self.environment.runner
        if self.readiness.user_prepared(runner) and isinstance(runner, WorkerRunner):
            runner.send_message(READY, {})

    def give_up(self, message: str) -> None:
        """The run cannot go on (no model to ask for, a model the server does not list, a /metrics URL that
        answers 404, its files cannot be written): one error line, exit code 2, quit now."""
        if self.gave_up:
            return
        self.gave_up = True
        self.gave_up_reason = message
        if self.scraper is not None:
            self.scraper.abandon()
        log.error("locust-spec: %s", message)
        self.environment.process_exit_code = 2
        if self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)

    def recording_failed(self, message: str) -> None:
        """A run file cannot be written (a full disk): the run stops rather than measure what no file
        keeps; what the files hold stays whole (recording/writes.py)."""
        self.give_up(f"{message}; the run stops")

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
        if self.processor is not None:
            self.processor.stop()
        if self.budget is not None:
            self.budget.stop()  # after the drain: its CPU is the cost of the chunks it handles

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()
        if self.processor is not None and self.processor.trace is not None:
            self.processor.trace.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            sink = self.sink
            if isinstance(sink, FileSink) and sink.failure is not None:
                self.write_failure = (f"{sink.failure}; {sink.unwritten} more requests measured have no row "
                                      "(the run stopped)")
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
                self.scraper.on_write_failure = self.recording_failed
        if self.scraper is not None:
            # A URL the user gave that answers 404 at start is a mistake: stop. The default HOST/metrics of a
            # server without one (not vLLM, or spec-ab's baseline) stays a gap and a warning.
            if url_option(self.environment.parsed_options, os.environ):
                self.scraper.on_refused = self.give_up
            self.scraper.start()

    def start_record(self) -> None:
        """PREFIX_run.json at test start (a measuring local or master runner with --csv); what the server
        serves is asked for in a greenlet of its own, so a slow server never holds the start."""
        if self.files is None or not self.measuring:
            return
        options, runner = self.environment.parsed_options, self.environment.runner
        if self.record is None:
            master = isinstance(runner, MasterRunner)
            self.record = provenance.started(options, sys.argv, self._host(), time.time(),
                                             "master" if master else "local",
                                             getattr(runner, "worker_count", 0) if master else 0,
                                             self._load_part())
        else:  # another test in this process (the web UI): its options may have changed
            self.record.update(tests=self.record["tests"] + 1, ended_unix_s=None, load=self._load_part())
        self._write_record()
        gevent.spawn(self._describe_server)

    def _load_part(self) -> dict:
        options = self.environment.parsed_options
        try:
            selection = selection_from(options)
        except PromptError:
            selection = None  # the run itself says why
        return provenance.load_part(options, selection, self.prompt_files)

    def _host(self) -> str | None:
        environment = self.environment
        return environment.host or next((cls.host for cls in environment.user_classes
                                         if getattr(cls, "host", None)), None)

    def _describe_server(self) -> None:
        host, options = self._host(), self.environment.parsed_options
        if host is None or self.record is None:
            return
        models = version = None
        errors = []
        try:
            models = server_api.served_models(host, self.api_key, options.connect_timeout)
        except (server_api.CallError, ValueError) as e:
            errors.append(f"GET /v1/models: {e}")
        try:
            version = server_api.server_version(host, self.api_key, options.connect_timeout)
        except (server_api.CallError, ValueError) as e:
            errors.append(f"GET /version: {e}")
        self.record["server"] = provenance.server_part(models, version, errors)
        if self.record["model"] is None and models:
            self.record["model"] = models[0]["id"]  # what requests name without --model
        self._write_record()

    def finish_record(self) -> None:
        if self.record is not None:
            self.record["ended_unix_s"] = time.time()
            self._write_record()

    def _write_record(self) -> None:
        try:
            provenance.write(self.files.run, self.record)
        except OSError as e:
            log.warning("locust-spec: cannot write %s: %s", self.files.run, e.strerror or e)

    def client_summary(self) -> dict:
        """This process's part of PREFIX_summary.json's "client": requests measured, event-loop lag."""
        processor, lag = self.processor, self.lag
        counts = {"requests": processor.requests, "failures": processor.failures} if processor else {}
        budget = {"budget_by_level": self.budget.summary()} if self.budget is not None else {}
        models = {"models": sorted({s.settings.model for s in self.servers.values()})} if processor else {}
        return {**counts, **(lag.summary() if lag is not None else {}), **budget, **models}

    def client_summaries(self) -> dict[str, dict]:
        """Each load-generating process's client summary: the workers' on a master, else this process's."""
        if self.collector is not None:
            found = dict(self.collector.clients)
            for lost in self.workers.lost if self.workers is not None else ():
                found[lost] = {**found.get(lost, {}), "lost": True}  # counted, even before its first batch
            return found
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
        clients = self.client_summaries()
        models = summary.models_under_test(clients)
        window = found.run_window(models) if found is not None else None
        levels = found.level_windows(models) if found is not None else []
        notes += found.warnings(models) if found is not None else []
        notes += self.collector.warnings() if self.collector is not None else []
        if self.write_failure is not None:
            notes.insert(0, self.write_failure)
        lost = self.workers.found(self.collector) if self.workers is not None else []
        notes = [lw.warning() for lw in lost] + notes
        workers = self.collector.clients if self.collector is not None else ()
        arrivals = self.ledger.summary(workers=workers) if self.ledger is not None else ({}, [])
        return summary.build_summary(totals, window, levels, clients, notes, models,
                                     [lw.as_dict() for lw in lost], arrivals)

    def write_summary(self) -> dict | None:
        """Build, write and log the summary at the end of the run; None without `--csv`."""
        built = self.summary()
        if built is None:
            return None
        for line in [] if self.gave_up else built["warnings"]:  # a run that gave up said why in one line
            log.warning("locust-spec: %s", line)
        try:
            summary.write(self.files.summary, built)
        except WriteFailed as e:
            log.log(logging.WARNING if self.gave_up else logging.ERROR, "locust-spec: no summary: %s", e)
        return built


    def level_table(self) -> str:
        """The table of the run so far, per level (level_table.py)."""
        windows = self.scraper.level_windows() if self.scraper is not None else []
        lag = summary.combine_levels([c.get("by_level") or {} for c in self.client_summaries().values()])
        return table(self.tally.lines(windows, lag), self.tally.left_out)


def attach(environment, run: SpecRun) -> SpecRun:
    setattr(environment, _ATTRIBUTE, run)
    return run


def run_of(environment) -> SpecRun | None:
    """The environment's run; None when locust-spec does not run there (its options were not parsed)."""
    return getattr(environment, _ATTRIBUTE, None)
