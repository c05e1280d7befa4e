"""spec-ab: sweep the concurrency ladder against both arms in turn, then write and print the verdict."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from locust_spec.ab import capacity, children, preflight, progress
from locust_spec.ab.children import ARMS, CLIENT_CPU, ChildError
from locust_spec.analysis import api
from locust_spec.analysis.model import Verdict
from locust_spec.analysis.runs import InputError
from locust_spec.client import server_api
from locust_spec.client.headers import HeaderValueError, credential
from locust_spec.client.http_fetch import METRICS_URLS_ENV, UrlError, check_urls
from locust_spec.core.formats import EVERYTHING, TURNS, Selection
from locust_spec.core.prompts import Prompt, PromptError, load_prompt_set, parse_weighted
from locust_spec.core.resources import locustfile
from locust_spec.recording.scraper import TOKEN_ENV
from locust_spec.sim import roofline
from locust_spec.wiring.shape import LadderSettings, parse_duration, parse_levels, parse_stage_time

SWEEP_LOCUSTFILE = locustfile("sweep")

SIM_SPECULATIVE_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                          "prompt_lookup_min": 2}
VERDICT_FILES = ("verdict.json", "report.html", "report.md")


@dataclass(frozen=True)
class Ladder:
    """The ladder every run of the A/B climbs."""

    levels: str
    stage_time: str
    warmup: str

    @property
    def seconds(self) -> float:
        return len(parse_levels(self.levels)) * parse_stage_time(self.stage_time)

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
                              parse_duration(self.warmup))


REAL_LADDER = Ladder("1,4,16,64", "60s", "5s")
DEMO_LADDER = Ladder("1,64", "25s", "3s")
"""On the built-in simulators: both arms in about two minutes on two cores, with enough requests at one
user for a verdict (at least 10, and 1000 output tokens, after the warm-up)."""
DEMO_PROMPTS = ("quote:2", "code:2", "boilerplate:2", "chat:1", "creative:1")
"""Mostly workloads that copy their input (n-gram acceptance around 0.6) with some open chat and creative
writing, whose proposals are rarely accepted but still verified: speculation pays alone and costs at 64."""
DEMO_TIME_SCALE = 1.0
"""Real time: a faster clock would make 64 streams outrun one load-generator core."""
DEMO_GPU = "a100"
"""The simulated GPU: its compute-to-bandwidth ratio makes verification compute-bound by 64 users."""


@dataclass(frozen=True)
class Run:
    """One sweep of one arm: its place in the A/B and its Locust `--csv` prefix."""

    arm: str
    repeat: int
    prefix: Path


def schedule(repeats: int, out: Path, arms: Sequence[str] = ARMS) -> list[Run]:
    """Arms alternate ABBA...: in the given order in even repeats, reversed in odd ones (ABC CBA with more).

    Alternating spreads slow drift of the machine (thermal, noisy neighbours) over every arm.
    """
    runs = []
    for repeat in range(repeats):
        order = tuple(arms) if repeat % 2 == 0 else tuple(arms)[::-1]
        runs += [Run(arm, repeat, out / arm / f"r{repeat}") for arm in order]
    return runs


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
    selection: Selection = EVERYTHING
    """The prompt filters (--category, --prompt-limit, ...), passed on to every run as Locust options."""


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


def locust_command(run: Run, host: str, ladder: Ladder, load: Load) -> list[str]:
    """The headless Locust command line of one run (the scraper reads HOST/metrics unless told by
    `child_env`)."""
    cmd = [sys.executable, "-m", "locust", "-f", str(SWEEP_LOCUSTFILE), "--headless",
           "--host", host, "--csv", str(run.prefix), "--metrics-interval", f"{ladder.metrics_interval_s:g}",
           "--levels", ladder.levels, "--stage-time", ladder.stage_time, "--warmup", ladder.warmup,
           "--seed", str(load.seed)]
    if load.max_tokens:
        cmd += ["--max-tokens", str(load.max_tokens)]
    for prompts in load.prompts:
        cmd += ["--prompts", prompts]
    cmd += load.selection.args()
    if load.ignore_eos:
        cmd.append("--ignore-eos")
    if load.model:
        cmd += ["--model", load.model]
    if load.processes != 1:
        # the master's port has no authentication: loopback, whatever $LOCUST_MASTER_BIND_HOST says
        cmd += ["--processes", str(load.processes), "--master-bind-host", "127.0.0.1"]
    return cmd


def child_env(metrics_url: str | None) -> dict[str, str]:
    """The environment of one run's Locust: the arm's /metrics URL travels here, not in the command line,
    where its user:password or query token would be visible to every user of the machine (`ps`)."""
    env = {k: v for k, v in os.environ.items() if k != METRICS_URLS_ENV}
    if metrics_url:
        env[METRICS_URLS_ENV] = metrics_url
    return env


class AbError(Exception):
    """A failure the user sees as one line."""


def _run_files(run: Run) -> list[Path]:
    return sorted(run.prefix.parent.glob(run.prefix.name + "_*")) + [run.prefix.with_suffix(".log")]


def run_sweep(position: int, runs: list[Run], cmd: list[str], env: dict[str, str], ladder: Ladder,
              display: progress.Display) -> None:
    """Run one arm's Locust to the end, showing progress; on interrupt stop it and discard its files."""
    run = runs[position]
    run.prefix.parent.mkdir(parents=True, exist_ok=True)
    log = run.prefix.with_suffix(".log")
    sweep = progress.Sweep(position, len(runs), run.arm, run.repeat, ladder.settings())
    watch = progress.Watch(run.prefix)
    proc = children.spawn(cmd, log, env)
    started = time.monotonic()
    display.start(sweep.seconds)
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            display.update(elapsed, progress.line(sweep, elapsed, watch.poll(time.monotonic())))
            time.sleep(0.5)
    except BaseException:
        display.finish()
        children.stop(proc)
        for path in _run_files(run):
            path.unlink(missing_ok=True)
        raise
    display.finish()
    requests_csv = Path(f"{run.prefix}_requests.csv")
    # Locust exits 1 when any request failed; that is data for the verdict, not a broken run.
    if proc.returncode not in (0, 1) or not requests_csv.is_file():
        raise AbError(f"locust ({run.arm} r{run.repeat}) failed, exit {proc.returncode}: "
                      f"{children.reason(log)} "
                      f"(log: {log})")
    live = watch.poll(time.monotonic())
    display.say(f"[{position + 1}/{len(runs)}] {run.arm} r{run.repeat} done in "
                f"{time.monotonic() - started:.0f}s ({live.requests} requests, {live.failures} failed) "
                f"-> {run.prefix}_*")


def load_prompts(load: Load) -> list[Prompt]:
    """Every prompt of the run's sets that its filters keep, once each."""
    try:
        specs = load.prompts or ("all",)
        found = {p.id: p for spec in specs
                 for p in load_prompt_set(parse_weighted(spec)[0], load.selection)}
        if not found:
            raise PromptError(f"no prompt passes the filters ({load.selection.describe()})")
        return list(found.values())
    except PromptError as exc:
        raise AbError(str(exc)) from None


def run_preflight(urls: dict[str, str], metrics: dict[str, str | None], load: Load,
                  display: progress.Display) -> None:
    """Check both arms before the first sweep; AbError when any check failed (each said in one line)."""
    started = time.monotonic()
    arms = [preflight.Arm(arm, base_url(urls[arm]), metrics[arm], arm == "candidate", f"--{arm}",
                          f"--metrics-url-{arm}") for arm in ARMS]
    try:
        key = credential(os.environ.get("OPENAI_API_KEY", ""), "$OPENAI_API_KEY")
        token = credential(os.environ.get(TOKEN_ENV, ""), f"${TOKEN_ENV}") or None
    except HeaderValueError as e:
        raise AbError(str(e)) from None
    credentials = preflight.Credentials(key, token)
    problems = preflight.check(arms, load.model, load_prompts(load), load.max_tokens, credentials)
    for problem in problems:
        display.say(problem.line())
    fatal = sum(p.fatal for p in problems)
    if fatal:
        raise AbError(f"preflight: {fatal} problem(s), no sweep started ({time.monotonic() - started:.1f}s); "
                      "--skip-preflight runs anyway")
    display.say(f"preflight: both arms answer, stream and expose their counters "
                f"({time.monotonic() - started:.1f}s)")


def prime_arm(arm: str, host: str, load: Load, display: progress.Display) -> None:
    """Send every prompt once before the arm's first sweep (see server_api.prime: a fair prefix cache)."""
    api_key = os.environ.get("OPENAI_API_KEY", "")
    prompts = load_prompts(load)
    try:
        model = load.model or server_api.first_model(host, api_key, timeout=30)
    except RuntimeError as exc:
        raise AbError(str(exc)) from None
    started = time.monotonic()
    result = server_api.prime(host, prompts, model, api_key)
    if result.failed == result.sent:
        raise AbError(f"{arm}: every priming request failed, first: {result.first_error}; no sweep started")
    line = (f"{arm}: primed the prefix cache with {result.sent} prompts in {time.monotonic() - started:.0f}s")
    if result.failed:
        line += f" ({result.failed} failed, first: {result.first_error})"
    display.say(line)


def clear_previous(out: Path) -> None:
    """Remove what an earlier spec-ab wrote into `out` (only its own files), so runs never mix."""
    for arm in ARMS:
        shutil.rmtree(out / arm, ignore_errors=True)
    for name in (*VERDICT_FILES, *(f"sim-{arm}.log" for arm in ARMS)):
        (out / name).unlink(missing_ok=True)


def raise_interrupt(_signum, _frame) -> None:
    """SIGTERM handler: stop like Ctrl-C, so children are stopped in order and kept files listed."""
    raise KeyboardInterrupt


def write_verdict(out: Path, runs: list[Run]) -> Verdict:
    """Judge both arms' runs and write the verdict files into `out`."""
    try:
        verdict = api.verdict_for([r.prefix for r in runs if r.arm == "baseline"],
                                  [r.prefix for r in runs if r.arm == "candidate"])
        api.write_outputs(verdict, [out / name for name in VERDICT_FILES])
    except InputError as exc:
        raise AbError(f"no verdict: {exc}") from None
    return verdict


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
                           f"{level.users} users")
    return out


@contextmanager
def _servers(simulated: bool, out: Path, time_scale: float, gpu: str, sim_config: dict,
             baseline: str | None, candidate: str | None) -> Iterator[dict[str, str]]:
    if simulated:
        with children.simulators(out, time_scale, gpu, sim_config) as urls:
            yield urls
    else:
        yield {"baseline": baseline, "candidate": candidate}


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


def auto_processes(levels: str, simulated: bool, out: Path, say: Callable[[str], None]) -> tuple[int, str]:
    """--processes auto: from the top level's chunk rate, this machine's measured cost per chunk and the
    cores this client may use (ab/capacity.py; one on the simulators, where it is pinned beside them)."""
    def calibration(host: str, prefix: Path, users: int) -> list[str]:
        ladder = Ladder(str(users), capacity.CALIBRATION_STAGE, capacity.CALIBRATION_WARMUP)
        return locust_command(Run("calibration", 1, prefix), host, ladder,
                              Load(DEMO_PROMPTS, capacity.CALIBRATION_TOKENS, True, 1, "", 1))

    return capacity.plan(max(parse_levels(levels)), simulated, out, calibration, say)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--baseline", metavar="URL", help="Server without speculation (e.g. http://host:8000). "
              "Give neither URL to run two built-in spec-sim servers.")
@click.option("--candidate", metavar="URL", help="Server with speculative decoding.")
@click.option("--levels", help=f"Users per ladder level (default {REAL_LADDER.levels}; "
              f"{DEMO_LADDER.levels} on the simulators).")
@click.option("--stage-time", help=f"Time per level, e.g. 60s, 2m (default {REAL_LADDER.stage_time}; "
              f"{DEMO_LADDER.stage_time} on the simulators).")
@click.option("--warmup", help="Start of each level left out of its statistics (default "
              f"{REAL_LADDER.warmup}; {DEMO_LADDER.warmup} on the simulators).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sweeps per arm, arms alternating ABBA...")
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
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=DEMO_TIME_SCALE,
              show_default=True, help="Simulators only: spec-sim's --time-scale.")
@click.option("--sim-gpu", type=click.Choice(sorted(roofline.GPUS)), default=DEMO_GPU, show_default=True,
              help="Simulators only: spec-sim's --gpu.")
@click.option("--speculative-config", default=json.dumps(SIM_SPECULATIVE_CONFIG), show_default=True,
              help="Simulators only: the candidate spec-sim's --speculative-config.")
@click.option("--prime/--no-prime", default=True, show_default=True,
              help="Before each arm's first sweep, send every prompt once (max_tokens 1) so both servers' "
                   "prefix caches start equally warm.")
@click.option("--skip-preflight", is_flag=True,
              help="Start sweeping without first checking both arms (reachable, model served, a token "
                   "streamed, the right /metrics, prompts within the context).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Run folder: both arms' files, verdict.json, report.html, report.md.")
def main(baseline: str | None, candidate: str | None, levels: str | None, stage_time: str | None,
         warmup: str | None, repeats: int, prompts: tuple[str, ...], category: tuple[str, ...],
         prompt_limit: int | None, min_prompt_chars: int | None, max_prompt_chars: int | None, turns: str,
         max_tokens: int | None, ignore_eos: bool, seed: int, model: str, processes: int | str,
         metrics_url_baseline: str | None, metrics_url_candidate: str | None, time_scale: float, sim_gpu: str,
         speculative_config: str, prime: bool, skip_preflight: bool, out: Path) -> None:
    """Run the concurrency sweep against a baseline and a candidate server, then print the verdict.

    Both arms get the same prompts in the same order, the same seed and max_tokens. Without URLs, two
    spec-sim servers (speculation off, and n-gram on) run on this machine for a demo.

    Exit codes: 0 a verdict; 1 no verdict (a preflight check failed, an arm could not be primed or its
    Locust failed; one line says why); 3 a verdict, but an arm failed most requests at some level;
    130 interrupted.
    """
    if (baseline is None) != (candidate is None):
        raise click.UsageError("give both --baseline and --candidate, or neither to run the simulators")
    simulated = baseline is None
    default = DEMO_LADDER if simulated else REAL_LADDER
    ladder = Ladder(levels or default.levels, stage_time or default.stage_time, warmup or default.warmup)
    try:
        ladder.check()
        sim_config = json.loads(speculative_config)
        for option, url in (("--metrics-url-baseline", metrics_url_baseline),
                            ("--metrics-url-candidate", metrics_url_candidate)):
            check_urls([url] if url else [], option)
    except (ValueError, UrlError) as exc:
        raise click.BadParameter(str(exc)) from None
    prompts = prompts or (DEMO_PROMPTS if simulated else ())
    display = progress.Display(sys.stdout)
    if processes == "auto":
        processes, reason = auto_processes(ladder.levels, simulated, out,
                                           lambda line: display.say(f"spec-ab: {line}"))
        display.say(f"spec-ab: --processes auto: {reason}")
    try:
        selection = Selection.of(category, prompt_limit, min_prompt_chars, max_prompt_chars, turns)
    except PromptError as exc:
        raise click.BadParameter(str(exc)) from None
    load = Load(prompts, max_tokens, ignore_eos, seed, model, processes, selection)
    runs = schedule(repeats, out)
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    out.mkdir(parents=True, exist_ok=True)
    clear_previous(out)
    done: list[Run] = []
    primed: set[str] = set()
    try:
        with _servers(simulated, out, time_scale, sim_gpu, sim_config, baseline, candidate) as urls:
            metrics = {"baseline": metrics_url_baseline, "candidate": metrics_url_candidate}
            where = (f"two spec-sim servers (simulated {sim_gpu}, time x{time_scale:g})" if simulated
                     else f"{urls['baseline']} vs {urls['candidate']}")
            display.say(f"spec-ab: {len(runs)} sweeps of {ladder.seconds:g}s (levels {ladder.levels}, "
                        f"{ladder.stage_time} each) on {where} -> {out}")
            if not skip_preflight:
                run_preflight(urls, metrics, load, display)
            for position, run in enumerate(runs):
                host = base_url(urls[run.arm])
                if prime and run.arm not in primed:
                    prime_arm(run.arm, host, load, display)
                    primed.add(run.arm)
                cmd = locust_command(run, host, ladder, load)
                run_cmd = children.pinned(cmd, CLIENT_CPU) if simulated else cmd
                run_sweep(position, runs, run_cmd, child_env(metrics[run.arm]), ladder, display)
                done.append(run)
        verdict = write_verdict(out, runs)
        display.say(api.render(verdict, "text"))
        failed = failed_levels(verdict)
        if failed:
            display.say(f"spec-ab: the run is bad: {'; '.join(failed)} (see each arm's log in {out})")
            sys.exit(3)
    except KeyboardInterrupt:
        kept = ", ".join(f"{r.arm} r{r.repeat}" for r in done) or "nothing"
        stopped = "Locust and both simulators" if simulated else "Locust"
        display.finish()
        display.say(f"spec-ab: interrupted; {stopped} stopped, kept {kept} in {out}")
        sys.exit(130)
    except (AbError, ChildError) as exc:
        display.finish()
        display.say(f"spec-ab: {exc}")
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
