"""The plugin's wiring: the only module that listens to Locust's events.

`init` builds the environment's SpecRun (run.py) and attaches it; every other listener finds it with
`run_of(environment)` and calls it. Importing `locust_spec` (or anything in it) imports this module, so the
same listeners exist however a locustfile reaches the user class. The listeners are registered at import,
before Locust creates its runner: `quitting` fires in reverse, so ours run after the runner's own (a master
has stopped its test and taken its workers' final batches by then).
"""

from __future__ import annotations

import functools
import os
import signal
import time

import gevent
from locust import argument_parser, events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, LocalRunner, MasterRunner, WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC, StatsCSV, StatsCSVFileWriter
from locust.stats import console_logger as STATS_LOG

from locust_spec.core.level import MESSAGE as LEVEL_MESSAGE
from locust_spec.core.level import Level
from locust_spec.core.prompts import PromptError
from locust_spec.recording import scraper
from locust_spec.recording.records import spreadsheet_safe
from locust_spec.recording.writes import WriteFailed
from locust_spec.web import live, webui
from locust_spec.wiring import distributed, guard, openloop, options, replay, shared_clock
from locust_spec.wiring.distributed import BATCH, FINISH, WorkerSink
from locust_spec.wiring.run import SpecRun, attach, run_of
from locust_spec.wiring.user import ChatClientUser


def _csv_writer_ends_before_its_files_close() -> None:
    """Locust's SIGTERM shutdown (a Kubernetes pod's stop) closes its stats CSV files while the greenlet that
    rewrites them every second lives on: waking between the close and the exit, it died with a traceback
    ('I/O operation on closed file') in the log of a run that was fine. Closing now ends that greenlet
    first. Locust internals: pinned below 3 in pyproject.toml."""
    write, close = StatsCSVFileWriter.stats_writer, StatsCSVFileWriter.close_files

    def stats_writer(self) -> None:
        self._locust_spec_writer = gevent.getcurrent()
        write(self)

    def close_files(self) -> None:
        writer = getattr(self, "_locust_spec_writer", None)
        if writer is not None and writer is not gevent.getcurrent():
            writer.kill(block=True, timeout=2)
        close(self)

    StatsCSVFileWriter.stats_writer, StatsCSVFileWriter.close_files = stats_writer, close_files


_csv_writer_ends_before_its_files_close()


class _TextCells:
    """A csv writer whose text cells a spreadsheet shows as text (records.spreadsheet_safe); numbers as
    they are."""

    def __init__(self, writer) -> None:
        self._writer = writer

    def writerow(self, row) -> None:
        self._writer.writerow([spreadsheet_safe(c) if isinstance(c, str) else c for c in row])


def _locusts_csv_cells_as_text() -> None:
    """Locust's own PREFIX_stats.csv, _stats_history.csv, _failures.csv and _exceptions.csv (and the web
    UI's CSV downloads) name each request by its prompt class and carry the server's error texts, both
    from outside: `=HYPERLINK(...)` or `@SUM(1)` went in raw while the plugin's files escape them
    (docs/contracts.md, text cells). Every data row goes through the same escaping; the header rows are
    Locust's. Locust internals: pinned below 3 in pyproject.toml."""

    def escaped(rows):
        @functools.wraps(rows)
        def write(self, csv_writer, *args) -> None:
            rows(self, _TextCells(csv_writer), *args)
        return write

    for cls, name in ((StatsCSV, "_requests_data_rows"), (StatsCSV, "_failures_data_rows"),
                      (StatsCSV, "_exceptions_data_rows"), (StatsCSVFileWriter, "_stats_history_data_rows")):
        setattr(cls, name, escaped(getattr(cls, name)))


_locusts_csv_cells_as_text()


def _locusts_own_options_read_once() -> None:
    """A worker taking a spawn message (at start and at every level change) keeps the master's options that
    are not Locust's own, asking `default_args_dict()` once per option: each call builds Locust's whole
    argument parser (4-15 ms on a 2-core VM) for each of 84 options with ours, so every worker held its event
    loop 0.7-1.3 s at every level change (gevent's monitor named it; spec-ab --processes 2 warned of the lag).
    Locust's own options do not change while it runs: build them once, hand out copies. Locust internals:
    pinned below 3 in pyproject.toml."""
    build = argument_parser.default_args_dict
    once = functools.cache(build)

    @functools.wraps(build)
    def default_args_dict() -> dict:
        return dict(once())

    argument_parser.default_args_dict = default_args_dict


_locusts_own_options_read_once()


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    options.add_options(parser)
    openloop.add_options(parser)
    replay.add_options(parser)
    scraper.add_options(parser)
    guard.add_options(parser)


def _measures(environment) -> bool:
    """Whether this environment sends chat completions through locust-spec (else only the scraper)."""
    return any(issubclass(cls, ChatClientUser) for cls in environment.user_classes)


@events.init.add_listener
def _on_init(environment, web_ui=None, **_kw) -> None:
    ours = environment.parsed_options is not None and hasattr(environment.parsed_options, "prompts")
    if ours:  # an arm of spec-ab waits here for the others (its imports are done), before the refresh below
        shared_clock.take(environment.parsed_options, os.environ)
    # gevent's loop has not turned since Locust started importing; its clock still reads that moment, and
    # Locust's --run-time timer, started right after this event, counts from it. On a busy machine the
    # imports took seconds, and `-t 2s` ended the run before a request went out: refresh the clock.
    gevent.get_hub().loop.update_now()
    if not ours:
        return
    try:
        # An unusable --metrics-url stops every process at start (a worker would otherwise wait for a
        # master that has gone), in one line that holds none of its secrets.
        scraper.check_url_options(environment.parsed_options, os.environ)
        if getattr(environment.parsed_options, "trace", None) and environment.shape_class is not None:
            raise ValueError("--trace replays one trace from its start: not on the ladder (a shape class)")
        replay.TraceSettings.from_options(environment.parsed_options)  # --trace beside --rate: refused
        # Options that cannot run together (a level of too many arrivals) stop it at start too.
        openloop.check_run(environment.parsed_options)
        openloop.check_processes(environment.parsed_options, isinstance(environment.runner, MasterRunner))
        check_ladder = getattr(environment.shape_class, "check_options", None)
        if check_ladder is not None:
            check_ladder(environment.parsed_options)
    except ValueError as e:
        raise SystemExit(f"locust-spec: {e}") from None
    guard.guard_environment(environment, web_ui)
    try:
        run = attach(environment, SpecRun.for_environment(environment, measuring=_measures(environment)))
    except (PromptError, ValueError, WriteFailed) as e:
        raise SystemExit(f"locust-spec: {e}") from None
    runner = environment.runner
    environment.events.spawning_complete.add_listener(lambda user_count, **_: _on_spawned(run, user_count))
    if not run.measuring:
        return
    gevent.signal_handler(signal.SIGINT, _interrupt_main)
    if isinstance(runner, WorkerRunner):
        runner.register_message(LEVEL_MESSAGE, lambda msg, **_: run.levels.received(msg.data))
        runner.register_message(FINISH, lambda environment, **_: distributed.on_finish(runner, run.sink),
                                concurrent=True)
        # Registered after the runner's own listener, so it runs first (quitting fires in reverse): the
        # last batch leaves before the worker tells the master it quits.
        environment.events.quitting.add_listener(
            lambda **_: distributed.on_worker_quitting(runner, run.sink))
    elif isinstance(runner, MasterRunner):
        runner.register_message(
            BATCH, lambda msg, **_: run.collector.receive(msg.node_id, msg.data, run.sink))
        _watch_workers(environment, run)
        runner.register_message(openloop.READY, lambda msg, **_: run.readiness.workers.add(msg.node_id))
    if not isinstance(runner, MasterRunner):
        gevent.spawn(_flush_periodically, run)
    if not isinstance(runner, WorkerRunner):
        run.levels.listeners.append(lambda level: _rate_level_started(run, level))
        # `quit` comes after every `quitting` listener: the rows are closed, the workers' last batches are in.
        environment.events.quit.add_listener(lambda **_: _at_quit(run))
        if web_ui is not None:
            run.timeline = live.install(run, web_ui)
            view = webui.install(run, web_ui)
            environment.events.test_start.add_listener(lambda **_: view.test_started())


def _watch_workers(environment, run: SpecRun) -> None:
    """Master: hear each worker's heartbeats and Locust stats reports, and check for lost workers."""
    watch = run.workers
    environment.events.heartbeat_sent.add_listener(lambda client_id, **_: watch.heard_from(client_id))
    environment.events.worker_report.add_listener(lambda client_id, data, **_: watch.report(client_id, data))
    gevent.spawn(distributed.watch_workers, environment, run.collector, watch)


def _at_quit(run: SpecRun) -> None:
    """The summary file; headless, the level table below Locust's own (where Locust prints its tables, and
    not when its stdout is JSON)."""
    run.write_summary()
    options = run.environment.parsed_options
    if options.headless and not getattr(options, "json", False) and not run.gave_up:
        STATS_LOG.info(run.level_table())
    elif options.headless and run.gave_up_reason:
        # The error line came before Locust's (empty) tables: the reason again where the eye lands, last.
        STATS_LOG.info(f"locust-spec: the run stopped early (exit code 2): {run.gave_up_reason}")


def _interrupt_main() -> None:
    """SIGINT as a KeyboardInterrupt in Locust's main greenlet, which stops the run in order; Python would
    raise it in whichever greenlet runs, often a user mid-request (no row, a traceback, a dead greenlet)."""
    gevent.get_hub().parent.throw(KeyboardInterrupt)


# A flush rewrites PREFIX_latency.json (HDR encoding of every histogram: ~50 ms measured), which blocks
# the event loop and stamps every chunk arriving meanwhile late; at 2 s that was 2.5 % of the run's
# time, above the p99. Rows reach the file by themselves as their buffer fills; at stop all is flushed.
def _flush_periodically(run: SpecRun) -> None:
    """Flush at the sink's own pace (a worker's batches often, a local run's latency.json rarely)."""
    while True:
        gevent.sleep(run.sink.flush_interval_s if run.sink is not None else 1.0)
        if run.sink is not None:
            run.sink.flush()


def _plain_rate(environment) -> bool:
    """An open loop without the ladder: `--rate` or `--trace` with a plain locustfile, whose users are
    `-u`."""
    options = environment.parsed_options
    return environment.shape_class is None and bool(getattr(options, "rate", None)
                                                    or getattr(options, "trace", None))


def _on_spawned(run: SpecRun, user_count: int) -> None:
    """Locust tells every runner, workers included, the total once spawning completes."""
    run.levels.spawned(user_count)
    environment = run.environment
    if (_plain_rate(environment) and run.levels.current().plan is None and not run.planning
            and not isinstance(environment.runner, WorkerRunner)):
        run.planning = True
        gevent.spawn(_plan_when_ready, run)
    # A new level: scrape at once, so acceptance is known per level (only the master or local scrapes). In an
    # open loop users are slots, not the load: a rate level is scraped as it starts (_rate_level_started).
    if (run.scraper is not None and run.scraper.running
            and not openloop.open_loop(environment.parsed_options)):
        run.scraper.level_changed(int(user_count), run.levels.current().warmup_until_unix_s)


def _plan_when_ready(run: SpecRun) -> None:
    """Without the ladder: the schedule starts once every process's users are ready (they wait for it), so
    a ramp or a slow context check is no arrival's fault."""
    environment = run.environment
    runner, options = environment.runner, environment.parsed_options
    while not run.readiness.ready(runner):
        gevent.sleep(0.1)
    run.planning = False
    if run.levels.current().plan is not None or runner.state not in (STATE_SPAWNING, STATE_RUNNING):
        return
    users = int(runner.target_user_count or 0)
    if not getattr(options, "trace", None):
        run.levels.publish(openloop.rate_level(runner, openloop.OpenLoopSettings.from_options(options),
                                               openloop.parse_rate(options.rate), 0, users,
                                               lead_s=openloop.LEAD_S))
        return
    try:  # the master reads the trace here (a load generator read it at test start, for its prompts)
        trace = replay.TraceSettings.from_options(options).read()
    except ValueError as e:
        run.give_up(str(e))
        return
    run.levels.publish(replay.trace_level(runner, trace, options.seed, users, lead_s=openloop.LEAD_S))


def _rate_level_started(run: SpecRun, level: Level) -> None:
    """A rate level starts when it is published (its users were spawned before): scrape at once."""
    if level.plan is not None and run.scraper is not None and run.scraper.running:
        run.scraper.level_changed(level.key, level.warmup_until_unix_s)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    run = run_of(environment)
    if run is None:
        return
    if run.processor is not None:
        try:
            run.use_run_options(getattr(environment.runner, "worker_index", 0))
        except (PromptError, ValueError) as e:  # e.g. the master's prompt file is missing here
            run.give_up(str(e))
        else:
            run.start()
    if run.tally is not None:
        run.tally.clear()  # a new test in the web UI
    if run.collector is not None:
        run.check_model(environment.host)
        run.collector.start_test()
        run.workers.start_test()
        run.readiness.reset()  # a worker says it is ready only after this test's spawn
    runner = environment.runner
    if run.collector is not None and _plain_rate(environment):  # a test started from the web UI, say
        why = openloop.users_refusal(int(runner.target_user_count or 0), runner.worker_count)
        if why is not None:
            run.give_up(why)
            return
    if run.collector is not None and environment.shape_class is None and not _plain_rate(environment):
        # A ladder publishes its own levels, with their warm-up. Workers hear the total from Locust only
        # once spawning completes, after their first requests started: tell them now, before the spawn
        # messages leave (same socket, so this arrives first).
        run.levels.publish(Level(int(runner.target_user_count or 0)))
    if not isinstance(runner, WorkerRunner):
        run.start_scraper()
        run.start_record()
        if run.levels.current().plan is not None:  # published before the scraper ran
            _rate_level_started(run, run.levels.current())
    if run.timeline is not None:
        live.test_started(run, run.timeline)


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    run = run_of(environment)
    if run is not None and run.ledger is not None:
        run.ledger.stopped(time.time())  # arrivals due later were never owed
    if run is not None and run.collector is not None:
        distributed.wait_for_final_batches(environment, run.collector, run.workers)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    run = run_of(environment)
    if run is None:
        return
    if run.arrivals is not None:
        run.arrivals.reset()
        run.readiness.reset()
    if _plain_rate(environment):
        run.levels.clear()  # the next test plans its own arrivals
    if run.measuring:
        run.stop()
        run.flush()
        if isinstance(environment.runner, LocalRunner) and run.files is not None and not run.gave_up:
            # Locust rewrites PREFIX_stats.csv only every CSV_STATS_INTERVAL_SEC and not at exit: let it
            # take the requests reported at stop (interrupted, drained), so its counts equal our rows.
            gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.2)
    if isinstance(run.sink, WorkerSink):
        run.sink.flush(final=True)
    if run.scraper is not None and not isinstance(environment.runner, WorkerRunner):
        run.scraper.stop()
    run.finish_record()
    if run.timeline is not None:
        live.test_stopped(run, run.timeline)


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    run = run_of(environment)
    if run is None:
        return
    if run.scraper is not None:
        run.scraper.close()
    if not run.measuring:
        return
    runner = environment.runner
    if isinstance(runner, LocalRunner) and runner.state in (STATE_SPAWNING, STATE_RUNNING):
        # SIGINT/SIGTERM quit before Locust stops the users: stop them now, so that each request
        # in flight gets its `interrupted` row before the files close.
        runner.stop()
    run.stop()
    run.close()
