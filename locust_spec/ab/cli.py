"""spec-ab: climb the concurrency ladder on both arms (by default taking turns in blocks on one clock),
then write and print the verdict."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from locust_spec.ab import (
    capacity,
    children,
    keep,
    outdir,
    preflight,
    progress,
    resume_check,
    self_check,
    sessions,
)
from locust_spec.ab.children import ARMS, CLIENT_CPU, ChildError
from locust_spec.ab.sessions import Run, SessionError, schedule
from locust_spec.analysis import aa, api
from locust_spec.analysis import rule as rules
from locust_spec.analysis.cli import (
    parse_slo,
    power_selection_options,
    power_selections,
    pricing_of,
    pricing_options,
)
from locust_spec.analysis.model import Pricing, Slo, Verdict, level_label
from locust_spec.analysis.runs import InputError, read_run
from locust_spec.analysis.verdict import CLIENT_BEHIND, Thresholds
from locust_spec.client import server_api
from locust_spec.client.headers import HeaderValueError, credential
from locust_spec.client.http_fetch import METRICS_URLS_ENV, UrlError, check_urls, display_url
from locust_spec.core import design as designs
from locust_spec.core.arrivals import ARRIVALS, POISSON
from locust_spec.core.design import Design
from locust_spec.core.formats import EVERYTHING, TURNS, Selection
from locust_spec.core.hosts import on_this_machine
from locust_spec.core.prompts import (
    Prompt,
    PromptError,
    PromptFiles,
    describe_sets,
    load_prompt_set,
    parse_weighted,
    prompt_specs,
)
from locust_spec.core.resources import locustfile
from locust_spec.core.runfiles import RunFiles
from locust_spec.metrics.power import GpuSelection
from locust_spec.recording.scraper import TOKEN_ENV, default_metrics_url
from locust_spec.recording.writes import write_whole
from locust_spec.sim import roofline
from locust_spec.wiring.openloop import parse_burstiness
from locust_spec.wiring.shape import (
    DEFAULT_MAX_CONCURRENCY,
    LadderSettings,
    parse_duration,
    parse_levels,
    parse_rates,
    parse_stage_time,
)

__all__ = ["Run", "schedule"]  # spec-tune and the tests take them from here

SWEEP_LOCUSTFILE = locustfile("sweep")

SIM_SPECULATIVE_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                          "prompt_lookup_min": 2}
VERDICT_FILES = ("verdict.json", "report.html", "report.md")
SIM_POWER_PATH = "/metrics/dcgm"
"""Where spec-sim serves its modelled GPU's DCGM-style power series (sim/power.py)."""


@dataclass(frozen=True)
class Ladder:
    """The ladder every run of the A/B climbs: user counts, or (open loop) arrival rates."""

    levels: str
    stage_time: str
    warmup: str
    rates: str = ""
    """Open loop: requests per second per level (`--rates`), instead of `levels`."""

    @property
    def seconds(self) -> float:
        return len(self.settings().steps) * parse_stage_time(self.stage_time)

    @property
    def metrics_interval_s(self) -> float:
        """Seconds between /metrics scrapes: several inside every level's measured window, since analysis
        reads acceptance from the counters' increase between scrapes within it; never above the
        scraper's default of 1 s."""
        measured_s = parse_stage_time(self.stage_time) - parse_duration(self.warmup)
        return min(1.0, max(0.5, math.floor(measured_s / 6 * 10) / 10))

    def check(self) -> None:
        """Raise ValueError, with the reason, if Locust would refuse these options."""
        self.settings()

    def settings(self) -> LadderSettings:
        return LadderSettings(parse_levels(self.levels), parse_stage_time(self.stage_time),
                              parse_duration(self.warmup), parse_rates(self.rates) if self.rates else ())

    def design(self, kind: str, arms: int, block_time: str) -> Design:
        """The design of `arms` runs on this ladder; ValueError when its blocks cannot be cut.

        `stage_time` is each arm's time per level, whatever the design, so a command line costs what it
        did sequentially: interleaved, a level lasts stage_time x arms, shared in blocks."""
        stage_s = parse_stage_time(self.stage_time)
        level_s = stage_s * arms if kind == designs.INTERLEAVED else stage_s
        return Design.planned(kind, parse_levels(self.levels), level_s, parse_duration(self.warmup), arms,
                              parse_stage_time(block_time), parse_rates(self.rates) if self.rates else ())


REAL_LADDER = Ladder("1,4,16,64", "60s", "5s")
REAL_BLOCK_TIME = "10s"
"""Real servers at 64 users stream for seconds per request: a block holds a few of them."""
DEMO_LADDER = Ladder("1,64", "30s", "3s")
"""On the built-in simulators: both arms interleaved in two minutes on two cores (60 s a level), six
block pairs per level (12 blocks of 5 s), each arm's first block at a level warming up for 3 s."""
DEMO_BLOCK_TIME = "5s"
DEMO_RATE_LADDER = Ladder(DEMO_LADDER.levels, "30s", "3s", "1,32")
"""`--rates` on the simulators: one request a second, where speculation pays, and 32, past what the
candidate serves well (its batch about 100 there, 50 without speculation; per-token latency doubles), in
about two minutes, interleaved as the users ladder is. (At 20 it still pays: its requests end sooner, so its
batch stays the smaller.) A middle level (`--rates 1,16,32`) places the crossover better, but needs a
load-generator core that is not shared: docs/open-loop.md."""
DEMO_RATES = DEMO_RATE_LADDER.rates
DEMO_PROMPTS = ("quote:2", "code:2", "boilerplate:2", "chat:1", "creative:1")
"""Mostly workloads that copy their input (n-gram acceptance around 0.6) with some open chat and creative
writing, whose proposals are rarely accepted but still verified: speculation pays alone and costs at 64."""
DEMO_TIME_SCALE = 1.0
SLOWER_SIMULATION = ("on the simulators, a slower simulated GPU leaves the load generator room at the same "
                     "verdict (every step and token takes longer alike): --time-scale 2, or "
                     "make ab AB_ARGS='--time-scale 2'")
"""Real time: a faster clock would make 64 streams outrun one load-generator core."""
DEMO_GPU = "a100"
"""The simulated GPU: its compute-to-bandwidth ratio makes verification compute-bound by 64 users."""


def base_url(url: str) -> str:
    """The server's root URL (Locust's host): OpenAI-style `.../v1` and trailing slashes removed."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass(frozen=True)
class Load:
    """What every run sends: the same prompts in the same order with the same limits, on both arms."""

    prompts: tuple[str, ...]
    max_tokens: int | None
    ignore_eos: bool
    seed: int
    model: str
    processes: int
    arrivals: tuple[str, ...] = ()
    """Open loop: `--arrival`, `--burstiness`, `--max-concurrency` as given, the same on both arms (with the
    same `--seed`, both arms' arrivals are the same schedule)."""
    selection: Selection = EVERYTHING
    """The prompt filters (--category, --prompt-limit, ...), passed on to every run as Locust options."""
    configs: tuple[tuple[str, str], ...] = ()
    """(arm, its server's --speculative-config as given): recorded by each run (Locust's option)."""


def selection_options(command):
    """The prompt filters, as Locust takes them, on spec-ab, spec-tune and spec-prime."""
    for option in reversed((
        click.option("--category", multiple=True,
                     help="Send only prompts of these classes or file categories (repeatable or comma-"
                          "separated; mt_bench: MT-Bench's eight)."),
        click.option("--prompt-limit", type=click.IntRange(min=1),
                     help="At most this many prompts of each set (the first, in file order, that pass the "
                          "other filters)."),
        click.option("--min-prompt-chars", type=click.IntRange(min=0),
                     help="Leave out prompts whose first request is shorter (characters)."),
        click.option("--max-prompt-chars", type=click.IntRange(min=0),
                     help="Leave out prompts whose first request is longer (characters)."),
        click.option("--turns", type=click.Choice(TURNS), default="all", show_default=True,
                     help="Multi-turn rows (SpecBench turns, ShareGPT conversations): every turn with the "
                          "model's own answers so far, or the first only."),
    )):
        command = option(command)
    return command


def locust_command(run: Run, host: str, ladder: Ladder, load: Load,
                   design: Design | None = None) -> list[str]:
    """The headless Locust command line of one run (the scraper reads HOST/metrics unless told by
    `child_env`); under a blocked design it gets the run's slot and the shared clock (`--blocks`)."""
    blocked = design is not None and design.blocked
    stage_time = f"{design.stage_s:g}s" if blocked else ladder.stage_time
    # Several scrapes inside every block too: the batch an arm ran at is read from its own blocks.
    interval = min(ladder.metrics_interval_s, max(0.5, round(design.block_s / 8, 1))) if blocked else \
        ladder.metrics_interval_s
    cmd = [sys.executable, "-m", "locust", "-f", str(SWEEP_LOCUSTFILE), "--headless",
           "--host", host, "--csv", str(run.prefix), "--metrics-interval", f"{interval:g}",
           "--stage-time", stage_time, "--warmup", ladder.warmup, "--seed", str(load.seed)]
    # An open-loop run climbs its rates: its recorded command names them, not a ladder of users it never ran.
    cmd += ["--rates", ladder.rates, *load.arrivals] if ladder.rates else ["--levels", ladder.levels]
    if blocked:
        cmd += ["--blocks", json.dumps(design.to_dict(), separators=(",", ":"))]
    if load.max_tokens:
        cmd += ["--max-tokens", str(load.max_tokens)]
    for prompts in load.prompts:
        cmd += ["--prompts", prompts]
    cmd += load.selection.args()
    config = dict(load.configs).get(run.arm)
    if config:
        cmd += ["--speculative-config", config]
    if load.ignore_eos:
        cmd.append("--ignore-eos")
    if load.model:
        cmd += ["--model", load.model]
    if load.processes != 1:
        # The master's port has no authentication: loopback, whatever $LOCUST_MASTER_BIND_HOST says. And a
        # free port, not Locust's 5557: two runs at once (a session's arms, another spec-ab or spec-tune on
        # the machine) would bind the same one and exchange workers. Locust's --processes forks its workers
        # with these options, so they connect to --master-host and --master-port.
        port = str(children.free_port())
        cmd += ["--processes", str(load.processes), "--master-bind-host", "127.0.0.1",
                "--master-bind-port", port, "--master-host", "127.0.0.1", "--master-port", port]
    return cmd


def scraped_urls(metrics_url: str | None, power_url: str | None, host: str) -> str | None:
    """What an arm's Locust scrapes: its server's /metrics (given, else HOST/metrics) and, when given, its
    GPUs' DCGM exporter, whose power series then sit beside the server's counters (docs/cost.md)."""
    if not power_url:
        return metrics_url
    return f"{metrics_url or default_metrics_url(host)} {power_url}"


def child_env(metrics_url: str | None) -> dict[str, str]:
    """The environment of one run's Locust: the arm's /metrics URL travels here, not in the command line,
    where its user:password or query token would be visible to every user of the machine (`ps`)."""
    env = {k: v for k, v in os.environ.items() if k != METRICS_URLS_ENV}
    if metrics_url:
        env[METRICS_URLS_ENV] = metrics_url
    return env


class AbError(Exception):
    """A failure the user sees as one line."""


PROMPT_FILES = PromptFiles()
"""The prompt files this command has read: the preflight and every arm's priming ask for the prompts, and a
700 MB ShareGPT dump is read once."""


def load_prompts(load: Load) -> list[Prompt]:
    """Every prompt of the run's sets that its filters keep, once each."""
    try:
        specs = load.prompts or ("all",)
        found = {p.id: p for spec in specs
                 for p in load_prompt_set(parse_weighted(spec)[0], load.selection, PROMPT_FILES)}
        if not found:
            raise PromptError(f"no prompt passes the filters ({load.selection.describe()})")
        return list(found.values())
    except PromptError as exc:
        raise AbError(str(exc)) from None


def run_preflight(urls: dict[str, str], metrics: dict[str, str | None], load: Load,
                  display: progress.Display, names: tuple[str, ...] = ARMS) -> None:
    """Check both arms (an A/A: the baseline alone) before the first sweep; AbError when any check
    failed (each said in one line)."""
    started = time.monotonic()
    arms = [preflight.Arm(arm, base_url(urls[arm]), metrics[arm], arm == "candidate", f"--{arm}",
                          f"--metrics-url-{arm}") for arm in names]
    try:
        key = credential(os.environ.get("OPENAI_API_KEY", ""), "$OPENAI_API_KEY")
        token = credential(os.environ.get(TOKEN_ENV, ""), f"${TOKEN_ENV}") or None
    except HeaderValueError as e:
        raise AbError(str(e)) from None
    credentials = preflight.Credentials(key, token)
    with progress.phase(display, lambda s: f"preflight: checking {' and '.join(names)} ({s:.0f}s)"):
        problems = preflight.check(arms, load.model, load_prompts(load), load.max_tokens, credentials)
    for problem in problems:
        display.say(problem.line())
    fatal = sum(p.fatal for p in problems)
    if fatal:
        raise AbError(f"preflight: {fatal} problem(s), no sweep started ({time.monotonic() - started:.1f}s); "
                      "--skip-preflight runs anyway")
    who = "both arms answer" if len(arms) > 1 else "the baseline answers"
    display.say(f"preflight: {who}, stream and expose their counters ({time.monotonic() - started:.1f}s)")


PRIME_CHUNK = 32
"""Prompts per priming call: the count shown while priming moves at least this often (8 at a time)."""


def prime_arm(arm: str, host: str, load: Load, display: progress.Display,
              stop: threading.Event | None = None) -> None:
    """Send every prompt once before the arm's first sweep (see server_api.prime: a fair prefix cache),
    saying how far it got every few seconds (against real vLLM it takes minutes); no more once `stop` is
    set."""
    api_key = os.environ.get("OPENAI_API_KEY", "")
    prompts = load_prompts(load)
    try:
        model = load.model or server_api.first_model(host, api_key, timeout=30)
    except RuntimeError as exc:
        raise AbError(str(exc)) from None
    started = time.monotonic()
    sent = failed = 0
    first_error = None
    with progress.phase(display, lambda s: f"{arm}: priming the prefix cache, {sent}/{len(prompts)} "
                                           f"prompts sent ({s:.0f}s)"):
        for i in range(0, len(prompts), PRIME_CHUNK):
            if stop is not None and stop.is_set():
                return
            result = server_api.prime(host, prompts[i:i + PRIME_CHUNK], model, api_key, stop=stop)
            sent, failed = sent + result.sent, failed + result.failed
            first_error = first_error or result.first_error
    if failed == sent:
        raise AbError(f"{arm}: every priming request failed, first: {first_error}; no sweep started")
    line = f"{arm}: primed the prefix cache with {sent} prompts in {time.monotonic() - started:.0f}s"
    if failed:
        line += f" ({failed} failed, first: {first_error})"
    display.say(line)


def prime_arms(hosts: dict[str, str], load: Load, display: progress.Display) -> None:
    """Prime every given arm's server ({arm: host}) at the same time: the arms of a session start together,
    and a server waiting for its turn to be primed is time lost."""
    stop = threading.Event()
    try:
        server_api.each_until(lambda pair: prime_arm(*pair, load, display, stop), list(hosts.items()),
                              len(hosts))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no prompt more, and no wait for those in flight
        stop.set()
        raise


def baseline_self_check(path: Path, host: str, load: Load, n: int, display: progress.Display) -> None:
    """Answer `n` of the prompts twice on the baseline (ab/self_check.py): its noise floor for the answer
    gate, written to `path` (self_check.json in the baseline's folder)."""
    prompts = self_check.sample(load_prompts(load), n, load.seed)
    try:
        model = load.model or server_api.first_model(host, os.environ.get("OPENAI_API_KEY", ""), timeout=30)
    except RuntimeError as exc:
        raise AbError(str(exc)) from None
    with progress.phase(display, lambda s: f"baseline: self-check, {len(prompts)} prompts answered twice "
                                           f"({s:.0f}s)"):
        answers, failed = self_check.measure(host, prompts, model, load.max_tokens, load.ignore_eos)
    self_check.write(path, answers, 0.0)
    same, twice = self_check.agreeing(answers)
    display.say(f"baseline: self-check: {same} of {twice} prompts answered the same twice"
                + (f" ({len(failed)} answers failed, first: {failed[0]})" if failed else ""))


OWN_DIRS = (*ARMS, keep.CALIBRATION, keep.STAGING)
OWN_FILES = (*VERDICT_FILES, aa.FILE, keep.SETTINGS_FILE, *sorted(keep.LOGS))
"""What spec-ab keeps at the top of its folder: anything else of these names is refused (outdir.py)."""


REFUSAL_OPTIONS = ("--overwrite replaces them (once the preflight has passed)",
                   "--resume keeps the repeats that finished with the same settings and measures the rest")


def servers_record(where: dict[str, str], metrics: dict[str, str | None], self_test: bool,
                   power: dict[str, str | None] | None = None) -> dict:
    """spec-ab.json: what the folder's runs were measured on (their own files hold the rest); the GPUs'
    power exporters only when given, so that a folder measured before them still resumes."""
    found = {"schema": keep.SETTINGS_SCHEMA, "servers": where, "self_test": self_test,
             "metrics_urls": {arm: display_url(url) if url else None for arm, url in metrics.items()}}
    if power and any(power.values()):
        found["power_metrics_urls"] = {arm: display_url(url) if url else None for arm, url in power.items()}
    return found


def read_recorded(run: Run) -> keep.Recorded:
    files = RunFiles(str(run.prefix))

    def json_of(path: Path) -> dict | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    unreadable = None
    if files.requests.is_file():
        try:  # as the verdict will read it: a run it cannot read is measured again, not kept
            read_run(run.prefix)
        except InputError as exc:
            unreadable = str(exc)
    return keep.Recorded(files.requests.is_file(), json_of(files.run), json_of(files.design), unreadable)


def facts_now(load: Load, urls: dict[str, str | None]) -> dict[str, resume_check.Now]:
    """Each arm's prompts and server as they are now, for --resume (ab/resume_check.py); `urls`: the
    arms' servers where they already run (None: simulators, started later)."""
    try:
        prompts = resume_check.prompt_files(describe_sets(prompt_specs(list(load.prompts)), load.selection))
    except (PromptError, OSError):
        prompts = None  # the run itself says why it cannot load them
    api_key = os.environ.get("OPENAI_API_KEY", "")
    out = {}
    for arm, url in urls.items():
        models = version = None
        if url:
            try:
                models = resume_check.model_names(server_api.served_models(base_url(url), api_key, 10))
                version = server_api.server_version(base_url(url), api_key, 10)
            except (server_api.CallError, OSError):
                pass  # unknown now: the preflight says why the server does not answer
        out[arm] = resume_check.Now(prompts, models, version)
    return out


def resume_plan(out: Path, plans: list[sessions.Session], record: dict,
                command: Callable[[Run, Design], list[str]],
                now: dict[str, resume_check.Now] | None = None) -> keep.Plan:
    """What --resume keeps of the folder's sessions (keep.plan), given this command's servers (`record`)
    and what its prompts and servers are `now`."""
    try:
        recorded = json.loads((out / keep.SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        return keep.Plan((), (), (), f"it has no readable {keep.SETTINGS_FILE} (not written by this spec-ab)")
    differs = keep.settings_difference(recorded, record)
    if differs is not None:
        return keep.Plan((), (), (), f"it was measured on other servers: {differs}")
    return keep.plan(expected_sessions(plans, command, read_recorded, now or {}))


def expected_sessions(plans: list[sessions.Session], command: Callable[[Run, Design], list[str]],
                      read: Callable[[Run], keep.Recorded],
                      now: dict[str, resume_check.Now] | None = None) -> list[list[keep.Expected]]:
    """Each session's runs as this command would measure them (their design without a clock), with what
    the folder holds of them (`read`)."""
    expected = []
    for session in plans:
        runs = []
        for slot, run in enumerate(session.runs):
            design = session.design.for_slot(slot, None) if session.design.blocked else session.design
            runs.append(keep.Expected(f"{run.arm} r{run.repeat}", read(run), tuple(command(run, design)),
                                      design, (now or {}).get(run.arm)))
        expected.append(runs)
    return expected


def raise_interrupt(_signum, _frame) -> None:
    """SIGTERM handler: stop like Ctrl-C, so children are stopped in order and kept files listed."""
    raise KeyboardInterrupt


def write_verdict(out: Path, runs: list[Run], display: progress.Display,
                  serving: int | None = None, pricing: Pricing | None = None,
                  power_gpus: dict[str, GpuSelection | None] | None = None,
                  question: Question | None = None) -> Verdict:
    """Judge both arms' runs and write the verdict files into `out` (`serving`: the overall verdict is that
    level's, as spec-verdict's --serving-concurrency; `pricing`, `power_gpus`: as its cost and power
    options; `question`: the declared rule's options)."""
    asked = question or Question()
    try:
        with progress.phase(display, lambda s: f"spec-ab: computing the verdict ({s:.0f}s)"):
            verdict = api.verdict_for([r.prefix for r in runs if r.arm == "baseline"],
                                      [r.prefix for r in runs if r.arm == "candidate"],
                                      serving_concurrency=serving, pricing=pricing, power_gpus=power_gpus,
                                      slo=asked.slo, objective=asked.objective, margin_pct=asked.margin_pct,
                                      ttft_margin_pct=asked.ttft_margin_pct)
            api.write_outputs(verdict, [out / name for name in VERDICT_FILES])
    except InputError as exc:
        raise AbError(f"no verdict: {exc}") from None
    return verdict


@dataclass(frozen=True)
class Question:
    """The decision rule's options as spec-verdict takes them (analysis/rule.py), declared at the start."""

    objective: str = rules.LATENCY
    margin_pct: float = rules.MARGIN_PCT
    ttft_margin_pct: float = rules.TTFT_MARGIN_PCT
    slo: Slo | None = None

    def rule(self, rates: bool) -> rules.DecisionRule:
        return rules.rule_for(self.objective, "goodput_tok_s" if self.slo else "output_tok_s",
                              offered=rates and self.slo is None, margin_pct=self.margin_pct,
                              noise_pct=Thresholds().noise_pct, ttft_margin_pct=self.ttft_margin_pct)


MOST = 0.5
"""A level where an arm failed more than this share of its requests measured a broken server, not speed."""


def failed_levels(verdict: Verdict) -> list[str]:
    """One line per level and arm that failed most of its requests (warm-up excluded)."""
    out = []
    for level in verdict.levels:
        for arm in ARMS:
            metrics = getattr(level, arm)
            if metrics.requests and metrics.failures > MOST * metrics.requests:
                out.append(f"{arm} failed {metrics.failures} of {metrics.requests} requests at "
                           f"{level_label(level.users)}")
    return out


@contextmanager
def _servers(simulated: bool, logs: Path, time_scale: float, gpu: str, sim_config: dict,
             baseline: str | None, candidate: str | None, self_test: bool,
             append: bool, display: progress.Display) -> Iterator[dict[str, str]]:
    """{arm: url}; an A/A self-test sends both arms to the baseline. The simulators log into `logs`, and
    while they start (seconds on a busy machine) a line says so."""
    if simulated:
        with ExitStack() as stack:
            with progress.phase(display, lambda s: f"spec-ab: starting the simulators ({s:.0f}s)"):
                urls = stack.enter_context(children.simulators(logs, time_scale, gpu, sim_config, self_test,
                                                               append))
            yield urls
    else:
        yield {"baseline": baseline, "candidate": baseline if self_test else candidate}


def check_processes(_ctx, _param, value: str) -> int | str:
    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count == 0 or count < -1:
        raise click.BadParameter("auto, a positive number of processes, or -1 for one per core")
    return count


def auto_processes(levels: str, simulated: bool, out: Path, say: Callable[[str], None],
                   streams: int | None = None, runs_at_once: int = 1, local: bool = False) -> tuple[int, str]:
    """--processes auto: from the top level's chunk rate, this machine's measured cost per chunk and the
    cores this client may use (ab/capacity.py; one on the simulators, where it is pinned beside them).
    Open loop: `streams`, the most requests in flight; `runs_at_once`: the arms a simultaneous design
    runs together, sharing the cores; `local`: the servers run on this machine (a core is left to them)."""
    def calibration(host: str, prefix: Path, users: int) -> list[str]:
        ladder = Ladder(str(users), capacity.CALIBRATION_STAGE, capacity.CALIBRATION_WARMUP)
        return locust_command(Run("calibration", 1, prefix), host, ladder,
                              Load(DEMO_PROMPTS, capacity.CALIBRATION_TOKENS, True, 1, "", 1))

    return capacity.plan(streams or max(parse_levels(levels)), simulated, out, calibration, say,
                         runs_at_once, local)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--baseline", metavar="URL", help="Server without speculation (e.g. http://host:8000). "
              "Give neither URL to run two built-in spec-sim servers.")
@click.option("--candidate", metavar="URL", help="Server with speculative decoding.")
@click.option("--levels", help=f"Users per ladder level (default {REAL_LADDER.levels}; "
              f"{DEMO_LADDER.levels} on the simulators).")
@click.option("--stage-time", help="Each arm's time per level, e.g. 60s, 2m; interleaved, a level lasts "
              f"twice this, shared in blocks (default {REAL_LADDER.stage_time}; {DEMO_LADDER.stage_time} on "
              "the simulators).")
@click.option("--warmup", help="Start of each arm's first block at a level (sequential: of each level) "
              f"left out of its statistics (default {REAL_LADDER.warmup}; {DEMO_LADDER.warmup} on the "
              "simulators).")
@click.option("--rates", help="Open loop: requests per second per level, e.g. 1,4,16, instead of --levels; "
              "both arms get the same arrival schedule (the same --seed; interleaved, each arm's blocks of a "
              "pair the same arrivals). On the simulators "
              f"(e.g. --rates {DEMO_RATES}) stages default to {DEMO_RATE_LADDER.stage_time}, warm-up to "
              f"{DEMO_RATE_LADDER.warmup}. See docs/open-loop.md.")
@click.option("--arrival", type=click.Choice(ARRIVALS), default=POISSON, show_default=True,
              help="Open loop: how arrivals are spaced (gamma: with --burstiness).")
@click.option("--burstiness", default="1", show_default=True,
              help="Open loop, --arrival gamma: the gaps' shape (below 1 burstier than Poisson).")
@click.option("--max-concurrency", type=click.IntRange(min=1),
              help=f"Open loop: requests in flight at most; later arrivals wait, sent late (default "
                   f"{DEFAULT_MAX_CONCURRENCY}).")
@click.option("--design", type=click.Choice(designs.KINDS), default=designs.INTERLEAVED, show_default=True,
              help="interleaved: within each level the arms take turns in blocks, ABBA..., on one clock "
                   "(drift hits both alike); simultaneous: both arms at once, each with the level's users "
                   "(arms on separate hardware); sequential: one arm's whole ladder, then the other's.")
@click.option("--block-time", help=f"Target length of a block (default {REAL_BLOCK_TIME}; "
              f"{DEMO_BLOCK_TIME} on the simulators); each level is cut into whole ABBA cycles.")
@click.option("--aa", "self_test", is_flag=True,
              help="A/A self-test: the baseline against itself with the same design; reports how many "
                   "compared quantities came out better or worse (false claims) and the smallest change "
                   "each level could detect, into aa.json.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sweeps per arm (sequential: arms alternating ABBA...; interleaved: the arm taking "
                   "the first block alternates); the intervals treat repeats as clusters.")
@click.option("--prompts", multiple=True, help="Prompt set (built-in name, specbench for its six tasks, or a "
              "file: JSONL, JSON, CSV, question.jsonl, ShareGPT; NAME:WEIGHT); repeatable. Default: every "
              "built-in set; " + ",".join(DEMO_PROMPTS) + " on the simulators.")
@selection_options
@click.option("--max-tokens", type=click.IntRange(min=1),
              help="Per request, unless a prompt sets its own (default: the plugin's, 256).")
@click.option("--ignore-eos", is_flag=True, help="Generate max_tokens on both arms (equal output lengths).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the prompt order, both arms.")
@click.option("--model", default="", help="Model name (default: the server's first model).")
@click.option("--processes", default="auto", show_default=True, callback=check_processes,
              help=capacity.PROCESSES_HELP)
@click.option("--metrics-url-baseline", metavar="URL", help="Baseline /metrics (default: URL/metrics).")
@click.option("--metrics-url-candidate", metavar="URL", help="Candidate /metrics (default: URL/metrics).")
@click.option("--power-metrics-url-baseline", metavar="URL",
              help="The baseline GPUs' DCGM exporter (/metrics with DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION or "
                   "DCGM_FI_DEV_POWER_USAGE), scraped beside the server: watts and joules per output token "
                   "per level (docs/cost.md). On the simulators, their modelled /metrics/dcgm.")
@click.option("--power-metrics-url-candidate", metavar="URL", help="The candidate GPUs' DCGM exporter.")
@power_selection_options
@pricing_options
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=DEMO_TIME_SCALE,
              show_default=True, help="Simulators only: spec-sim's --time-scale.")
@click.option("--sim-gpu", type=click.Choice(sorted(roofline.GPUS)), default=DEMO_GPU, show_default=True,
              help="Simulators only: spec-sim's --gpu.")
@click.option("--speculative-config", default=json.dumps(SIM_SPECULATIVE_CONFIG), show_default=True,
              help="Simulators only: the candidate spec-sim's --speculative-config.")
@click.option("--speculative-config-baseline", metavar="JSON",
              help="What the baseline server runs (its vLLM --speculative-config, or none), recorded in its "
                   "runs' _run.json and the reports: vLLM does not say it over HTTP (simulators: none).")
@click.option("--speculative-config-candidate", metavar="JSON",
              help="The same for the candidate (simulators: --speculative-config).")
@click.option("--prime/--no-prime", default=True, show_default=True,
              help="Before each arm's first sweep, send every prompt once (max_tokens 1) so both servers' "
                   "prefix caches start equally warm.")
@click.option("--self-check", "self_check_prompts", type=click.IntRange(min=0),
              default=self_check.DEFAULT_PROMPTS, show_default=True, metavar="N",
              help="Before the first sweep, answer N prompts twice on the baseline: its own noise floor for "
                   "the answer gate at every level (0: none; the levels' own repeats only).")
@click.option("--skip-preflight", is_flag=True,
              help="Start sweeping without first checking both arms (reachable, model served, a token "
                   "streamed, the right /metrics, prompts within the context).")
@click.option("--serving-concurrency", type=click.IntRange(min=1), metavar="N",
              help="The concurrency you serve at: the overall verdict is that level's (nearest measured; "
                   "between measured levels that disagree, inconclusive); without it, levels that disagree "
                   "make it 'depends', said with the level up to which "
                   "speculation pays (as spec-verdict's option of that name).")
@click.option("--objective", type=click.Choice(rules.OBJECTIVES), default=rules.LATENCY, show_default=True,
              help="Each level's one primary question, as spec-verdict's: latency (TPOT p50), throughput "
                   "(output tok/s) or goodput (needs --slo); the others are guards.")
@click.option("--margin", "margin_pct", type=click.FloatRange(min=0), default=rules.MARGIN_PCT,
              show_default=True, metavar="PCT",
              help="Non-inferiority margin (%) every guard must stay within to ship (as spec-verdict's).")
@click.option("--ttft-margin", "ttft_margin_pct", type=click.FloatRange(min=0), default=rules.TTFT_MARGIN_PCT,
              show_default=True, metavar="PCT", help="TTFT p50's own margin (%), as spec-verdict's.")
@click.option("--slo", "slo_text", metavar="ttft_ms=X,tpot_ms=Y",
              help="A latency objective for the verdict (as spec-verdict's): goodput, the tokens of requests "
                   "within it per second, becomes the throughput judged.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Run folder: both arms' files, verdict.json, report.html, report.md (aa.json with --aa). "
                   "A folder that holds results is refused unless --overwrite or --resume.")
@click.option("--overwrite", is_flag=True,
              help="Replace the results spec-ab wrote in --out (its record there lists them), once the "
                   "preflight has passed (a failing preflight leaves every file as it was); a folder holding "
                   "anything else is refused.")
@click.option("--resume", is_flag=True,
              help="Keep the repeats in --out that finished with the same settings (interleaved: a repeat is "
                   "both arms' session; sequential: one arm's sweep), measure the rest, then judge them all. "
                   "Refused when a finished one was measured otherwise.")
def main(baseline: str | None, candidate: str | None, levels: str | None, stage_time: str | None,
         warmup: str | None, rates: str | None, arrival: str, burstiness: str, max_concurrency: int | None,
         design: str, block_time: str | None, self_test: bool, repeats: int, prompts: tuple[str, ...],
         category: tuple[str, ...], prompt_limit: int | None, min_prompt_chars: int | None,
         max_prompt_chars: int | None, turns: str, max_tokens: int | None, ignore_eos: bool, seed: int,
         model: str, processes: int | str, metrics_url_baseline: str | None,
         metrics_url_candidate: str | None, power_metrics_url_baseline: str | None,
         power_metrics_url_candidate: str | None, power_gpus_baseline: str | None,
         power_gpus_candidate: str | None, gpu_cost_per_hour: float | None, gpus: float | None,
         gpus_baseline: float | None, gpus_candidate: float | None, time_scale: float, sim_gpu: str,
         speculative_config: str, speculative_config_baseline: str | None,
         speculative_config_candidate: str | None, prime: bool, self_check_prompts: int,
         skip_preflight: bool, serving_concurrency: int | None, objective: str, margin_pct: float,
         ttft_margin_pct: float, slo_text: str | None, out: Path, overwrite: bool, resume: bool) -> None:
    """Run the concurrency ladder (or with --rates the open-loop rate ladder) against a baseline and a
    candidate server, then print the verdict.

    Both arms get the same prompts in the same order, the same seed and max_tokens; by default they take
    turns in short blocks within every level on one clock (--design). Without URLs, two spec-sim servers
    (speculation off, and n-gram on) run on this machine for a demo.

    The verdict per level is ship, off, tradeoff (per-token latency and throughput moved apart) or
    inconclusive; overall, the levels' word when they agree, else depends, said with the level up to
    which speculation pays. --serving-concurrency N (here or in `spec-verdict OUT`) makes it the verdict
    at the concurrency you serve.

    Exit codes: 0 a verdict; 1 no verdict (a preflight check failed, an arm could not be primed or its
    Locust failed; one line says why); 2 a bad option, or --out holds results, a file spec-ab did not write
    (--overwrite), a link, or is in use by another run (nothing is touched);
    3 a verdict, but an arm failed most requests at some level; 130 interrupted (--resume finishes it).
    """
    if overwrite and resume:
        raise click.UsageError("give --overwrite (replace the results) or --resume (finish them), not both")
    if self_test and candidate is not None:
        raise click.UsageError("--aa runs the baseline against itself: give --baseline only")
    if not self_test and (baseline is None) != (candidate is None):
        raise click.UsageError("give both --baseline and --candidate, or neither to run the simulators")
    if self_test and design == designs.SIMULTANEOUS:
        raise click.UsageError("--aa sends both arms to one server, so they cannot run at once: use "
                               "--design interleaved, or give two identical servers as --baseline and "
                               "--candidate")
    try:
        question = Question(objective, margin_pct, ttft_margin_pct, parse_slo(slo_text) if slo_text else None)
        if objective == rules.GOODPUT and question.slo is None:
            raise InputError("--objective goodput needs --slo (goodput is the tokens of requests within it)")
    except InputError as exc:
        raise click.UsageError(str(exc)) from None
    simulated = baseline is None
    default = DEMO_LADDER if simulated else REAL_LADDER
    if rates is not None and levels is not None:
        raise click.UsageError("give --levels (users) or --rates (requests per second), not both")
    if rates is not None and simulated:
        default = DEMO_RATE_LADDER
    ladder = Ladder(levels or default.levels, stage_time or default.stage_time, warmup or default.warmup,
                    rates or "")
    try:
        ladder.check()
        parse_burstiness(burstiness)
        plan = ladder.design(design, len(ARMS),
                             block_time or (DEMO_BLOCK_TIME if simulated else REAL_BLOCK_TIME))
        sim_config = json.loads(speculative_config)
        for option, url in (("--metrics-url-baseline", metrics_url_baseline),
                            ("--metrics-url-candidate", metrics_url_candidate),
                            ("--power-metrics-url-baseline", power_metrics_url_baseline),
                            ("--power-metrics-url-candidate", power_metrics_url_candidate)):
            check_urls([url] if url else [], option)
    except (ValueError, UrlError) as exc:
        raise click.BadParameter(str(exc)) from None
    pricing = pricing_of(gpu_cost_per_hour, gpus, gpus_baseline, gpus_candidate)
    power_gpus = power_selections(power_gpus_baseline, power_gpus_candidate)
    prompts = prompts or (DEMO_PROMPTS if simulated else ())
    # Before --processes auto, whose calibration would write into the folder.
    folder = outdir.Folder(out, "spec-ab")
    try:
        held = folder.enter(lambda: keep.admit(folder, REFUSAL_OPTIONS, overwrite, resume, OWN_DIRS,
                                               OWN_FILES))
    except outdir.FolderError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    display = progress.Display(sys.stdout)
    if processes == "auto":
        for prefix in capacity.PREFIXES:
            folder.prefix(out / keep.CALIBRATION / prefix)
        streams = (max_concurrency or DEFAULT_MAX_CONCURRENCY) if ladder.rates else None
        at_once = len(ARMS) if design == designs.SIMULTANEOUS else 1
        processes, reason = auto_processes(ladder.levels, simulated, out,
                                           lambda line: display.say(f"spec-ab: {line}"), streams, at_once,
                                           any(on_this_machine(url) for url in (baseline, candidate) if url))
        display.say(f"spec-ab: --processes auto: {reason}")
    display.say(f"spec-ab: {children.priority_note()}")
    try:
        selection = Selection.of(category, prompt_limit, min_prompt_chars, max_prompt_chars, turns)
    except PromptError as exc:
        raise click.BadParameter(str(exc)) from None
    arrivals = (("--arrival", arrival, "--burstiness", burstiness)
                + (("--max-concurrency", str(max_concurrency)) if max_concurrency else ()))
    given = {"baseline": speculative_config_baseline or ("none" if simulated else None),
             "candidate": speculative_config_candidate or (json.dumps(sim_config, sort_keys=True) if simulated
                                                           else None)}
    if self_test:
        given["candidate"] = given["baseline"]
    load = Load(prompts, max_tokens, ignore_eos, seed, model, processes, arrivals, selection,
                tuple((arm, config) for arm, config in given.items() if config))
    runs = schedule(repeats, out)
    plans = sessions.sessions(runs, plan)
    metrics = {"baseline": metrics_url_baseline,
               "candidate": metrics_url_baseline if self_test else metrics_url_candidate}
    power_urls = {"baseline": power_metrics_url_baseline,
                  "candidate": power_metrics_url_baseline if self_test else power_metrics_url_candidate}
    if simulated:
        sim = f"spec-sim --gpu {sim_gpu} --time-scale {time_scale:g}"
        where = {"baseline": sim, "candidate": sim if self_test else
                 f"{sim} --speculative-config {json.dumps(sim_config, sort_keys=True)}"}
    else:
        where = {"baseline": display_url(base_url(baseline or "")),
                 "candidate": display_url(base_url((baseline if self_test else candidate) or ""))}
    record = servers_record(where, metrics, self_test, power_urls)
    todo = list(plans)
    if resume and held:
        servers = {"baseline": baseline, "candidate": baseline if self_test else candidate}
        resumed = resume_plan(out, plans, record,
                              lambda r, d: locust_command(r, "http://resumed", ladder, load, d),
                              facts_now(load, servers))
        if resumed.conflict:
            click.echo(f"spec-ab: --resume refused, {out} left untouched: {resumed.conflict}; give the "
                       "options it was measured with, or --overwrite", err=True)
            sys.exit(2)
        todo = [plans[i] for i in resumed.todo]
        kept_names = ", ".join("+".join(plans[i].arms) + f" r{plans[i].repeat}" for i in resumed.kept)
        display.say(f"spec-ab: --resume: kept {kept_names or 'nothing'} from {out}; "
                    f"{len(todo)} of {len(plans)} session(s) to measure")
        for note in resumed.notes:
            display.say(f"spec-ab: --resume: {note}")
        own(folder, runs)  # what it kept is the settings' own spec-ab's: a later --overwrite replaces it
        for position, slot, rebuilt in resumed.restored:
            run = plans[position].runs[slot]
            display.say(f"spec-ab: --resume: {run.arm} r{run.repeat} had no design file: rebuilt "
                        f"{sessions.design_path(run)}")
            sessions.write_design(run, rebuilt)
    replacing = overwrite and bool(held)
    logs = out / keep.STAGING if replacing else out
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    done: list[Run] = [r for s in plans if s not in todo for r in s.runs]
    primed: set[str] = set()
    try:
        if todo:
            if logs != out:
                folder.dir(logs)
            for name in sorted(keep.LOGS) if simulated else ():
                folder.file(logs / name)
            logs.mkdir(exist_ok=True)
            with _servers(simulated, logs, time_scale, sim_gpu, sim_config, baseline, candidate,
                          self_test, resume, display) as urls:
                sims = "one spec-sim server" if self_test else "two spec-sim servers"
                where_text = (f"{sims} (simulated {sim_gpu}, time x{time_scale:g})" if simulated else
                              f"{urls['baseline']} against itself" if self_test else
                              f"{urls['baseline']} vs {urls['candidate']}")
                steps = f"rates {ladder.rates} req/s" if ladder.rates else f"levels {ladder.levels}"
                display.say(f"spec-ab: {'A/A self-test, ' if self_test else ''}{design_text(plan)}; "
                            f"{len(todo)} session(s) of {plan.seconds:g}s "
                            f"({steps}, {level_length_text(plan)}) on {where_text} -> {out}")
                display.say(f"spec-ab: {question.rule(bool(ladder.rates)).describe()}")
                if not skip_preflight:
                    run_preflight(urls, metrics, load, display, ARMS[:1] if self_test else ARMS)
                start_writing(folder, logs, record, runs, todo, display)

                # The simulators model their GPU's power: scraped too, so energy per token runs without one.
                gpus_at = ({arm: base_url(url) + SIM_POWER_PATH for arm, url in urls.items()} if simulated
                           else power_urls)

                def command(run: Run, run_design: Design) -> tuple[list[str], dict[str, str]]:
                    cmd = locust_command(run, base_url(urls[run.arm]), ladder, load, run_design)
                    env = child_env(scraped_urls(metrics[run.arm], gpus_at.get(run.arm),
                                                 base_url(urls[run.arm])))
                    return (children.pinned(cmd, CLIENT_CPU) if simulated else cmd), env

                for session in todo:
                    fresh = {urls[arm]: arm for arm in session.arms if urls[arm] not in primed}
                    if prime:
                        prime_arms({arm: base_url(url) for url, arm in fresh.items()}, load, display)
                    if "baseline" in fresh.values() and self_check_prompts:
                        baseline_self_check(folder.file(out / "baseline" / self_check.FILE),
                                            base_url(urls["baseline"]), load, self_check_prompts, display)
                    primed.update(fresh)
                    sessions.run(session, command, display)
                    done.extend(session.runs)
        for name in (*VERDICT_FILES, *((aa.FILE,) if self_test else ())):
            folder.file(out / name)
        verdict = write_verdict(out, runs, display, serving_concurrency, pricing, power_gpus,
                                question=question)
        if self_test:
            found = aa.self_test(verdict)
            (out / aa.FILE).write_text(aa.render_json(found))
            display.say(aa.render_text(found))
            return
        display.say(api.render(verdict, "text"))
        if simulated and any(CLIENT_BEHIND in reason for level in verdict.levels for reason in level.reasons):
            display.say(f"spec-ab: {SLOWER_SIMULATION}")
        failed = failed_levels(verdict)
        if failed:
            display.say(f"spec-ab: the run is bad: {'; '.join(failed)} (see each arm's log in {out})")
            sys.exit(3)
    except KeyboardInterrupt as exc:
        display.finish()
        display.say(sessions.interrupted_line("spec-ab", out, done, exc,
                                              "Locust and the simulators" if simulated else "Locust"))
        sys.exit(130)
    except (AbError, ChildError, SessionError) as exc:
        display.finish()
        display.say(f"spec-ab: {exc}")
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if logs != out:
            shutil.rmtree(logs, ignore_errors=True)  # our own staging folder: the preflight failed


def start_writing(folder: outdir.Folder, logs: Path, record: dict, runs: list[Run],
                  todo: list[sessions.Session], display: progress.Display) -> None:
    """Once the preflight has passed: under --overwrite clear the earlier results (what spec-ab wrote, its
    record says: outdir.py) and move the running simulators' logs in (they keep writing to them); the
    unfinished sessions' leftovers go (they are measured again); spec-ab.json records the servers."""
    out = folder.root
    if logs != out:
        folder.clear(spare=(keep.CALIBRATION, keep.STAGING))
        for log in logs.iterdir():
            os.replace(log, folder.file(out / log.name))
        logs.rmdir()
        display.say(f"spec-ab: --overwrite: cleared the earlier results in {out}")
    own(folder, runs)
    for session in todo:
        for run in session.runs:
            for path in sessions.run_files(run):
                path.unlink(missing_ok=True)
    write_whole(folder.file(out / keep.SETTINGS_FILE), (json.dumps(record, indent=2) + "\n").encode())


def own(folder: outdir.Folder, runs: list[Run]) -> None:
    """Record the runs' files (by prefix), spec-ab.json and the simulators' logs there as spec-ab's own."""
    for run in runs:
        folder.prefix(run.prefix)
    for name in (keep.SETTINGS_FILE, *sorted(keep.LOGS)):
        if name == keep.SETTINGS_FILE or (folder.root / name).is_file():
            folder.file(folder.root / name)


def level_length_text(plan: Design) -> str:
    """'60s each: 30s per arm in turns' under the interleaved design, whose level holds every arm's
    --stage-time one after another (a user who asked for 30s read "60s each" unexplained); '60s each'
    where a level lasts one stage time."""
    if plan.kind == designs.INTERLEAVED and plan.arms > 1:
        return f"{plan.stage_s:g}s each: --stage-time {plan.stage_s / plan.arms:g}s per arm, in turns"
    return f"{plan.stage_s:g}s each"


def design_text(plan: Design) -> str:
    """'interleaved, 12 blocks of 5s per level (ABBA)' and the like, for the first line."""
    if not plan.blocked:
        return "sequential: each arm's ladder in turn (drift between them is not in the intervals)"
    if plan.kind == designs.INTERLEAVED:
        return f"interleaved: {plan.n_blocks} blocks of {plan.block_s:g}s per level, arms alternating ABBA"
    return f"simultaneous: both arms at once, {plan.n_blocks} blocks of {plan.block_s:g}s per level"
