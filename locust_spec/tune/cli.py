"""spec-tune: measure each speculation length at each ladder level, write vLLM's per-batch-size schedule,
serve it, and check it against the best fixed k and against off."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import click

from locust_spec.ab import capacity, children, keep, outdir, progress, sessions
from locust_spec.ab import cli as ab
from locust_spec.ab.children import CLIENT_CPU, ChildError
from locust_spec.ab.cli import AbError, Ladder, Load, Run
from locust_spec.ab.sessions import SessionError
from locust_spec.analysis.cli import pricing_of, pricing_options
from locust_spec.analysis.model import Pricing
from locust_spec.analysis.report.table import users_label
from locust_spec.analysis.runs import InputError, read_run
from locust_spec.analysis.tasks import tasks_of
from locust_spec.core import design as designs
from locust_spec.core import schedule, speculative
from locust_spec.core.design import Design
from locust_spec.core.formats import Selection
from locust_spec.core.hosts import on_this_machine
from locust_spec.sim import roofline
from locust_spec.tune import choose, confirm, measure, report, servers
from locust_spec.tune.result import TaskDecisions, TuneResult
from locust_spec.wiring.shape import DEFAULT_MAX_CONCURRENCY, parse_duration, parse_stage_time

DEFAULT_KS = "0,1,2,3,4,5"
BASE_CONFIG = {k: v for k, v in ab.SIM_SPECULATIVE_CONFIG.items() if k != "num_speculative_tokens"}
SWING_CYCLES = 3
"""Each swing phase alternates its two levels this many times: six switches across the threshold."""
OUTPUTS = ("schedule.json", "tune.json", "report.md", "report.html", "schedule.png")
PHASES = ("tune", "confirm", "servers")
OWN_DIRS = (*PHASES, keep.CALIBRATION)
"""spec-tune's folders at the top of its run folder (and swing-T, one per threshold)."""


@dataclass(frozen=True)
class Settings:
    ks: tuple[int, ...]
    ladder: Ladder
    repeats: int
    load: Load
    objective: str
    slo: choose.Slo | None
    base_config: dict
    max_num_seqs: int
    prime: bool
    pin_client: bool
    swing_stage_time: str
    design: str = designs.INTERLEAVED
    block_time: str = ab.DEMO_BLOCK_TIME
    max_servers: int | None = None
    pricing: Pricing | None = None


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(p) for p in text.split(",") if p.strip()}))
    except ValueError:
        raise ValueError(f"--k wants comma-separated speculation lengths, e.g. 0,2,4: {text!r}") from None
    if not ks or any(k < 0 for k in ks):
        raise ValueError(f"--k wants lengths >= 0 (0 = speculation off): {text!r}")
    if len(ks) < 2:
        raise ValueError("--k needs at least two lengths to choose between")
    return ks


def arm_config(base: dict, k: int) -> dict | None:
    return None if k == 0 else {**base, "num_speculative_tokens": k}


def sweep(runs: list[Run], urls: dict[str, str], ladder: Ladder, s: Settings, primed: set[str],
          display: progress.Display, design: Design) -> None:
    """The runs in sessions (every arm of a repeat on one clock under a blocked design, each alone when
    sequential), each server primed before its first run; spec-ab's machinery."""
    def command(run: Run, run_design: Design) -> tuple[list[str], dict[str, str]]:
        # Pinned on the simulator's machine, as spec-ab: the load generator keeps its own core; it scrapes
        # HOST/metrics of the server it loads.
        cmd = ab.locust_command(run, ab.base_url(urls[run.arm]), ladder, s.load, run_design)
        return (children.pinned(cmd, CLIENT_CPU) if s.pin_client else cmd), ab.child_env(None)

    for session in sessions.sessions(runs, design):
        if s.prime:
            todo = {urls[arm]: arm for arm in session.arms if urls[arm] not in primed}
            ab.prime_arms({arm: ab.base_url(url) for url, arm in todo.items()}, s.load, display)
            primed.update(todo)
        sessions.run(session, command, display)


def batches(arms: Sequence[str], cap: int | None) -> list[tuple[str, ...]]:
    """The arms in groups of at most `cap` servers at once (all together without a cap)."""
    size = len(arms) if cap is None else max(1, cap)
    return [tuple(arms[i:i + size]) for i in range(0, len(arms), size)]


def cap_note(arms: Sequence[str], groups: Sequence[tuple[str, ...]], cap: int | None) -> str | None:
    """What the design loses when the arms cannot all be served at once."""
    if len(groups) < 2:
        return None
    shown = " then ".join("+".join(g) for g in groups)
    return (f"--max-servers {cap}: the {len(arms)} arms ran in {len(groups)} batches one after the other "
            f"({shown}); arms of different batches were not interleaved, so drift between batches is not "
            "cancelled and their comparisons are unpaired (each arm's blocks resampled on their own: wider "
            "intervals, and a difference that is drift cannot be told from one that is not)")


def run_arms(arms: dict[str, tuple[str, dict | None]], folder: Path, ladder: Ladder, s: Settings,
            pool: servers.Servers, primed: set[str], display: progress.Display, kind: str,
            owner: outdir.Folder, ready: Callable[[], None] = lambda: None) -> list[Run]:
    """Every arm ({name: (server key, speculative config)}) on the ladder, at most --max-servers servers
    at a time: each batch's servers started (the others stopped first), its runs interleaved by `kind`
    (recorded in `owner`, the run folder, as they start); `ready` once the first batch's servers answer."""
    runs: list[Run] = []
    groups = batches(list(arms), s.max_servers if pool.starts_servers else None)
    for number, group in enumerate(groups):
        keys = {arms[a][0] for a in group}
        if len(groups) > 1:
            for started in list(pool.urls):
                if started not in keys:
                    pool.stop(started)
        urls = {}
        for arm in group:
            key, config = arms[arm]
            urls[arm] = pool.start(key, config)
        if number == 0:
            ready()
        group_runs = ab.schedule(s.repeats, folder, group)
        for run in group_runs:
            owner.prefix(run.prefix)
        plan = ladder.design(kind, len(group), s.block_time)
        sweep(group_runs, urls, ladder, s, primed, display, plan)
        runs += group_runs
    return runs


def prefixes(runs: Sequence[Run], arm: str) -> list[Path]:
    return [r.prefix for r in runs if r.arm == arm]


def _choices(by_k: dict[int, dict[int, choose.Sample]], s: Settings) -> tuple[choose.Decision, ...]:
    users = sorted(set().union(*by_k.values()))
    return tuple(choose.choose([by_k[k][u] for k in s.ks if u in by_k[k]], s.objective) for u in users)


def decide(runs: list[Run], s: Settings) -> tuple[tuple[choose.Decision, ...], TaskDecisions, list[str]]:
    """The k per level for the mix, and, where the mix holds several tasks, the k each task alone would
    choose (per stream; one server serves the mix, so the schedule is the mix's)."""
    found = tasks_of([read_run(p) for p in prefixes(runs, f"k{s.ks[0]}")])
    tasks = found if len(found) > 1 else []
    by_k = {k: measure.task_samples(prefixes(runs, f"k{k}"), k, s.objective, s.slo, [None, *tasks])
            for k in s.ks}
    decisions = _choices({k: by_k[k][None] for k in s.ks}, s)
    if s.pricing is not None:
        throughput = ({k: by_k[k][None] for k in s.ks} if s.objective == "throughput" else
                      {k: measure.level_samples(prefixes(runs, f"k{k}"), k, "throughput", None)
                       for k in s.ks})
        decisions = choose.priced(decisions, throughput, s.pricing)
    per_task = tuple((task, _choices({k: by_k[k][task] for k in s.ks}, s)) for task in tasks)
    notes = [f"{users_label(d.users)}: {d.reason}" for d in decisions if d.k is None]
    return decisions, per_task, notes


def points(decisions: Sequence[choose.Decision], notes: list[str]) -> list[schedule.Point]:
    out = []
    for d in decisions:
        if d.k is None:
            continue
        if d.batch is None and isinstance(d.users, float):  # a rate is no batch: nothing to place it by
            notes.append(f"{users_label(d.users)}: the server exposed no vllm:num_requests_running; the "
                         "level is left out of the schedule")
            continue
        if d.batch is None:
            notes.append(f"{users_label(d.users)}: the server exposed no vllm:num_requests_running; the "
                         "schedule uses the user count as its batch")
        out.append(schedule.Point(d.users, d.batch if d.batch is not None else float(d.users), d.k))
    return out


def swing_pairs(decisions: Sequence[choose.Decision],
                built: schedule.Built) -> list[tuple[int, tuple[int, int]]]:
    """For each threshold, the two measured levels on either side of it (by batch)."""
    measured = sorted((d.batch if d.batch is not None else float(d.users), d.users) for d in decisions
                      if d.k is not None)
    pairs = []
    for t in built.thresholds:
        below = [u for b, u in measured if b < t]
        above = [u for b, u in measured if b >= t]
        if below and above:
            pairs.append((t, (below[-1], above[0])))
    return pairs


def confirmation(owner: outdir.Folder, decisions: Sequence[choose.Decision], built: schedule.Built,
                 config: dict, static_k: int, pool: servers.Servers, s: Settings, primed: set[str],
                 display: progress.Display) -> confirm.Confirmation:
    out = owner.root
    keys = {"schedule": "schedule", "static": f"k{static_k}", "off": "k0"}
    if static_k == 0:
        del keys["static"]
    if "k0" not in pool.urls and not pool.starts_servers:
        del keys["off"]  # given URLs without k=0: nothing to compare against "off"
    for arm in list(pool.urls):
        if arm not in keys.values() and pool.starts_servers:
            pool.stop(arm)
    configs = {arm: (key, config if arm == "schedule" else arm_config(s.base_config, int(key[1:]))
                     if key.startswith("k") else None) for arm, key in keys.items()}
    arms = tuple(keys)
    said = [confirm.static_text(static_k)] if "static" in keys else []
    said += ["off: k=0"] if "off" in keys else []
    display.say(f"spec-tune: confirmation: {', '.join(arms)} on the ladder"
                + (f" ({'; '.join(said)})" if said else ""))
    runs = run_arms(configs, out / "confirm", s.ladder, s, pool, primed, display, s.design, owner)
    # A sample's k only matters when choosing between ks; the confirmation compares arms by name.
    samples = {arm: measure.level_samples(prefixes(runs, arm), 0, s.objective, s.slo) for arm in arms}

    def same(k: int | None) -> str | None:
        return "off" if k == 0 else "static" if k == static_k else None

    checks = tuple(confirm.check_level(d, {a: samples[a].get(d.users) for a in arms}, s.objective,
                                       same(d.k)) for d in decisions)
    swings = []
    for t, (lo, hi) in swing_pairs(decisions, built):
        steps = ",".join([f"{lo:g},{hi:g}"] * SWING_CYCLES)
        ladder = (Ladder(s.ladder.levels, s.swing_stage_time, "0s", steps) if s.ladder.rates else
                  Ladder(steps, s.swing_stage_time, "0s"))
        display.say(f"spec-tune: swing {lo:g} <-> {users_label(hi)} across batch {t} (each arm alone: its "
                    "switches are what is measured)")
        sruns = run_arms(configs, out / f"swing-{t}", ladder, s, pool, primed, display, designs.SEQUENTIAL,
                         owner)
        whole = {a: measure.whole_sample(prefixes(sruns, a), 0, s.objective, s.slo) for a in arms}
        swings.append(confirm.check_swing(t, (lo, hi), decisions, whole, s.objective))
    return confirm.Confirmation(static_k, checks, tuple(swings), confirm.summarize(checks, swings))


def write_outputs(owner: outdir.Folder, result: TuneResult) -> None:
    out = owner.root
    for name in OUTPUTS:
        owner.file(out / name)
    (out / "schedule.json").write_text(json.dumps(result.schedule_json(), indent=2) + "\n")
    (out / "tune.json").write_text(report.render(result, "json"))
    (out / "report.md").write_text(report.render(result, "markdown"))
    png = report.plot(result)
    (out / "schedule.png").write_bytes(png)
    (out / "report.html").write_text(report.render_html(result, png))


def run_tune(owner: outdir.Folder, s: Settings, pool: servers.Servers, do_confirm: bool,
             display: progress.Display) -> TuneResult:
    out = owner.root
    arms = {f"k{k}": (f"k{k}", arm_config(s.base_config, k)) for k in s.ks}
    steps = f"rates {s.ladder.rates} req/s" if s.ladder.rates else f"levels {s.ladder.levels}"
    display.say(f"spec-tune: k {','.join(map(str, s.ks))} on {steps}, {s.ladder.stage_time} each, {s.design} "
                f"({s.repeats} repeat(s)) -> {out}")
    primed: set[str] = set()
    # An earlier run's results go once the first servers answer (a server that fails to start leaves them);
    # the servers' logs, just written, are spared (each new one replaced the old one of its k).
    runs = run_arms(arms, out / "tune", s.ladder, s, pool, primed, display, s.design, owner,
                    lambda: owner.clear(spare=(keep.CALIBRATION, "servers")))
    with progress.phase(display, lambda t: f"spec-tune: choosing k at each level ({t:.0f}s)"):
        decisions, per_task, notes = decide(runs, s)
    capped = cap_note(list(arms), batches(list(arms), s.max_servers if pool.starts_servers else None),
                      s.max_servers)
    if capped:
        notes.append(capped)
    pts = points(decisions, notes)
    built = schedule.build(pts, s.max_num_seqs) if pts else None
    config = schedule.speculative_config(s.base_config, built.entries) if built else None
    static_k = choose.best_static(decisions, s.objective)
    result = TuneResult(s.objective, s.slo, s.ks, tuple(d.users for d in decisions), s.max_num_seqs,
                        decisions, built, config, static_k, None, tuple(notes), per_task, s.pricing)
    write_outputs(owner, result)
    display.say(f"spec-tune: schedule written to {out / 'schedule.json'}")
    if not do_confirm:
        return result
    skip = None
    if built is None or config is None or static_k is None:
        skip = "no speculating schedule to confirm (every level chose k=0 or none was measured)"
    elif not pool.starts_servers and "schedule" not in pool.urls:
        skip = "confirmation skipped: serve schedule.json and give --server schedule=URL to run it"
    if skip:
        notes.append(skip)
        result = replace(result, notes=tuple(notes))
    else:
        conf = confirmation(owner, decisions, built, config, static_k, pool, s, primed, display)
        result = replace(result, confirmation=conf)
    write_outputs(owner, result)
    return result


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--k", "ks", default=DEFAULT_KS, show_default=True,
              help="Speculation lengths to measure (num_speculative_tokens; 0 = off).")
@click.option("--server-cmd", metavar="TEMPLATE",
              help="Start each arm's server with this command: {port} and {speculative_config} (the JSON; "
                   "with k=0 the placeholder and the long option before it are dropped, nothing else; inside "
                   "a quoted shell command, sh -c \"...\", the JSON goes in shell-quoted) are filled in. "
                   "spec-tune waits for /health, keeps the log in OUT/servers/, stops it by pid.")
@click.option("--server", "server_urls", multiple=True, metavar="K=URL",
              help="A running server for k (repeatable); schedule=URL for the confirmation pass.")
@click.option("--levels", help=f"Users per ladder level (default {ab.REAL_LADDER.levels}; "
              f"{ab.DEMO_LADDER.levels} on the simulator).")
@click.option("--rates", help="Open loop: requests per second per level instead of --levels "
              "(docs/open-loop.md); each level's batch is what the server ran at that rate.")
@click.option("--stage-time", help="Time per level for each k (interleaved, a level lasts this times the "
              f"arms served together; default {ab.REAL_LADDER.stage_time}; {ab.DEMO_LADDER.stage_time} on "
              "the simulator).")
@click.option("--warmup", help="Start of each arm's first block at a level left out (default 5s; 3s on the "
              "simulator).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sweeps per k (the intervals treat repeats as clusters).")
@click.option("--design", type=click.Choice(designs.KINDS), default=designs.INTERLEAVED, show_default=True,
              help="interleaved: within each level the k arms take turns in blocks (ABC CBA...) on one "
                   "clock; simultaneous: all at once; sequential: one arm's ladder after the other's.")
@click.option("--block-time", help=f"Target block length (default {ab.REAL_BLOCK_TIME}; "
              f"{ab.DEMO_BLOCK_TIME} on the simulator).")
@click.option("--max-servers", type=click.IntRange(min=1),
              help="At most this many servers at once (a single-GPU box: 1). The arms then run in batches "
                   "one after the other: arms of different batches are not interleaved, so drift between "
                   "them is not cancelled and their intervals are unpaired (said in the notes).")
@click.option("--objective", type=click.Choice(choose.OBJECTIVES),
              help="What a level's best k maximises (default throughput; with --rates tpot: at a rate both "
                   "arms serve the same arrivals, so throughput is the offered load).")
@click.option("--slo", help="Goodput's per-request limits, e.g. ttft=500,tpot=50 (ms).")
@pricing_options
@click.option("--speculative-config", "base_config", default=json.dumps(BASE_CONFIG), show_default=True,
              help="The speculative config every arm shares; num_speculative_tokens is set per arm.")
@click.option("--max-num-seqs", type=click.IntRange(min=1), default=256, show_default=True,
              help="The server's max_num_seqs: the schedule's last range ends there.")
@click.option("--confirm/--no-confirm", default=True, show_default=True,
              help="Serve the schedule and run it against the best fixed k and off.")
@click.option("--swing-stage-time", default="5s", show_default=True,
              help="Time per level in the swing across each threshold.")
@click.option("--prompts", multiple=True, help="Prompt set (built-in NAME[:WEIGHT], specbench for its six "
              "tasks, or a file in the formats Locust reads), repeatable: the task mix the schedule is for.")
@ab.selection_options
@click.option("--max-tokens", type=click.IntRange(min=1), help="Per request, unless a prompt sets its own.")
@click.option("--ignore-eos", is_flag=True, help="Generate max_tokens on every arm.")
@click.option("--seed", type=int, default=1, show_default=True, help="Prompt order seed, every arm.")
@click.option("--model", default="", help="Model name (default: the server's first model).")
@click.option("--processes", default="auto", show_default=True, callback=ab.check_processes,
              help=capacity.PROCESSES_HELP)
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=ab.DEMO_TIME_SCALE,
              show_default=True, help="Simulator only: spec-sim's --time-scale.")
@click.option("--sim-gpu", type=click.Choice(sorted(roofline.GPUS)), default=ab.DEMO_GPU, show_default=True,
              help="Simulator only: spec-sim's --gpu.")
@click.option("--prime/--no-prime", default=True, show_default=True,
              help="Send every prompt once to each server before its first sweep.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Run folder: schedule.json, tune.json, report.md, report.html, schedule.png, the runs. A "
                   "folder that holds results is refused unless --overwrite.")
@click.option("--overwrite", is_flag=True,
              help="Replace the results an earlier spec-tune wrote into --out (its record there lists them); "
                   "a folder holding anything else is refused.")
def main(ks: str, server_cmd: str | None, server_urls: tuple[str, ...], levels: str | None,
         rates: str | None, stage_time: str | None, warmup: str | None, repeats: int, design: str,
         block_time: str | None, max_servers: int | None, objective: str | None, slo: str | None,
         gpu_cost_per_hour: float | None, gpus: float | None, gpus_baseline: float | None,
         gpus_candidate: float | None, base_config: str, max_num_seqs: int, confirm: bool,
         swing_stage_time: str, prompts: tuple[str, ...], category: tuple[str, ...], prompt_limit: int | None,
         min_prompt_chars: int | None, max_prompt_chars: int | None, turns: str, max_tokens: int | None,
         ignore_eos: bool, seed: int, model: str, processes: int | str, time_scale: float, sim_gpu: str,
         prime: bool, out: Path, overwrite: bool) -> None:
    """Find the speculation length for each batch size, write vLLM's schedule, and prove it.

    Every k runs the same ladder with the same prompts, seed and order, arms interleaved. Per level the k
    with the best objective is chosen, or the smallest k statistically tied with it. Without --server-cmd
    or --server, one spec-sim per k runs on this machine. With --gpu-cost-per-hour every k's cost per
    million output tokens is reported per level (k 0 on --gpus-baseline GPUs, the others on
    --gpus-candidate).
    """
    pricing = pricing_of(gpu_cost_per_hour, gpus, gpus_baseline, gpus_candidate)
    if server_cmd and server_urls:
        raise click.UsageError("give --server-cmd or --server URLs, not both")
    simulated = not server_cmd and not server_urls
    default = ab.DEMO_LADDER if simulated else ab.REAL_LADDER
    if rates is not None and levels is not None:
        raise click.UsageError("give --levels (users) or --rates (requests per second), not both")
    ladder = Ladder(levels or default.levels, stage_time or default.stage_time, warmup or default.warmup,
                    rates or "")
    try:
        ladder.check()
        parse_stage_time(swing_stage_time)
        if parse_duration(ladder.warmup) >= parse_stage_time(ladder.stage_time):
            raise ValueError("--warmup must be shorter than --stage-time")
        k_list = parse_ks(ks)
        base = json.loads(base_config)
        if not isinstance(base, dict):
            raise ValueError("--speculative-config must be a JSON object")
        base.pop("num_speculative_tokens", None)
        base.pop(schedule.KEY, None)
        removed = speculative.removed_method(base)
        if removed and simulated:
            raise ValueError(removed)
        if speculative.is_synthetic(base):
            raise ValueError(f"{speculative.REJECTION} 'synthetic' accepts drafts at the rates its config "
                             "names, whatever they are: spec-tune would choose k by a number you typed; tune "
                             "with the standard rejection sampler")
        slo_value = choose.parse_slo(slo) if slo else None
        objective = objective or ("tpot" if ladder.rates else "throughput")
        if objective == "goodput" and slo_value is None:
            raise ValueError("--objective goodput needs --slo (e.g. ttft=500,tpot=50)")
        selection = Selection.of(category, prompt_limit, min_prompt_chars, max_prompt_chars, turns)
        given = dict(servers.parse_server(t) for t in server_urls)
        template = servers.parse_template(server_cmd) if server_cmd else None
        block_time = block_time or (ab.DEMO_BLOCK_TIME if simulated else ab.REAL_BLOCK_TIME)
        for arms in {len(g) for g in batches(parse_ks(ks), max_servers)}:
            ladder.design(design, arms, block_time)  # a ValueError now, not after the first servers
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    missing = [f"k{k}" for k in k_list if server_urls and f"k{k}" not in given]
    if missing:
        raise click.UsageError(f"no --server for {', '.join(m.removeprefix('k') for m in missing)}")
    owner = outdir.Folder(out, "spec-tune")
    try:
        owner.enter(lambda: keep.admit(owner, ("--overwrite replaces them",), overwrite, False, OWN_DIRS,
                                       OUTPUTS))
    except outdir.FolderError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    display = progress.Display(sys.stdout)
    if processes == "auto":
        for prefix in capacity.PREFIXES:
            owner.prefix(out / keep.CALIBRATION / prefix)
        at_once = max(map(len, batches(k_list, max_servers))) if design == designs.SIMULTANEOUS else 1
        processes, reason = ab.auto_processes(ladder.levels, simulated, out,
                                              lambda line: display.say(f"spec-tune: {line}"),
                                              DEFAULT_MAX_CONCURRENCY if ladder.rates else None, at_once,
                                              bool(server_cmd) or any(map(on_this_machine, given.values())))
        display.say(f"spec-tune: --processes auto: {reason}")
    display.say(f"spec-tune: {children.priority_note()}")
    settings = Settings(k_list, ladder, repeats,
                        Load(prompts or (ab.DEMO_PROMPTS if simulated else ()), max_tokens, ignore_eos, seed,
                             model, processes, selection=selection),
                        objective, slo_value, base, max_num_seqs, prime, simulated, swing_stage_time, design,
                        block_time, max_servers, pricing)
    sim = (servers.SimSettings(time_scale, sim_gpu, ("--max-num-seqs", str(max_num_seqs),
                                                     "--per-request-spec-decode-metrics", "detailed"))
           if simulated else None)
    if removed:  # a real server of vLLM 0.32 or older may still have it
        click.echo(f"spec-tune: note: {removed}; this config starts only on vLLM 0.32 or older")
    pool = servers.Servers(out, sim, template, given, display, owner.file)
    previous = signal.signal(signal.SIGTERM, ab.raise_interrupt)
    try:
        result = run_tune(owner, settings, pool, confirm, display)
        display.say(report.render(result, "text"))
    except KeyboardInterrupt:
        display.say(f"spec-tune: interrupted; servers and Locust stopped; finished runs kept in {out}")
        sys.exit(130)
    except (AbError, ChildError, InputError, SessionError) as exc:
        display.say(f"spec-tune: {exc}")
        sys.exit(1)
    finally:
        pool.close()
        signal.signal(signal.SIGTERM, previous)
