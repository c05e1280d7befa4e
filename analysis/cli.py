"""spec-verdict's command line (click): compare two arms, or check two tokenizers with `vocab`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from locust_spec.metrics import power

from .cost import pricing_from
from .model import Pricing, Slo
from .rule import OBJECTIVES
from .runs import InputError
from .verdict import DEPENDS, INCONCLUSIVE, OFF, TRADEOFF, Thresholds

DEFAULTS = Thresholds()
EXIT_BAD_INPUT = 2
FORMATS = ("text", "json", "markdown", "html")


SLO_KEYS = ("ttft_ms", "tpot_ms")


def parse_slo(text: str) -> Slo:
    """'ttft_ms=500,tpot_ms=50' (either or both) -> Slo; InputError naming what is wrong."""
    bounds: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in SLO_KEYS:
            wanted = ", ".join(k + "=X" for k in SLO_KEYS)
            raise InputError(f"--slo: {part.strip()[:40]!r} is not one of {wanted}")
        try:
            bound = float(value)
        except ValueError:
            raise InputError(f"--slo: {key} is not a number: {value[:20]!r}") from None
        if not bound > 0 or bound == float("inf"):
            raise InputError(f"--slo: {key} must be a positive number of milliseconds")
        bounds[key] = bound
    return Slo(**bounds)


def pricing_options(command):
    """--gpu-cost-per-hour and the GPU counts, the same in spec-verdict, spec-ab and spec-tune."""
    for option in reversed((
        click.option("--gpu-cost-per-hour", type=float, metavar="USD",
                     help="What one GPU-hour costs: each level gets the cost per million output tokens "
                          "per arm (docs/cost.md)."),
        click.option("--gpus", type=float, metavar="N",
                     help="GPUs each arm's server holds (default 1), for the cost."),
        click.option("--gpus-baseline", type=float, metavar="N",
                     help="The baseline's GPUs, when they differ."),
        click.option("--gpus-candidate", type=float, metavar="N",
                     help="The candidate's GPUs, when they differ (a draft model may need more)."),
    )):
        command = option(command)
    return command


def pricing_of(gpu_cost_per_hour: float | None, gpus: float | None, gpus_baseline: float | None,
               gpus_candidate: float | None) -> Pricing | None:
    """The pricing options' values -> Pricing; click's BadParameter saying what is wrong."""
    try:
        return pricing_from(gpu_cost_per_hour, gpus, gpus_baseline, gpus_candidate)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def power_selection_options(command):
    """Which GPUs of the runs' DCGM series count for each arm (spec-verdict, spec-ab)."""
    for arm in ("candidate", "baseline"):
        command = click.option(
            f"--power-gpus-{arm}", metavar="LABEL=V[,V]",
            help=f"The {arm}'s GPUs among the power series (DCGM's labels, e.g. gpu=0,1 or UUID=GPU-...); "
                 "default every GPU its runs' /metrics exposed.")(command)
    return command


def power_selections(baseline: str | None, candidate: str | None) -> dict[str, power.GpuSelection | None]:
    """The selection options' values per arm; click's BadParameter saying which is wrong."""
    out = {}
    for arm, text in (("baseline", baseline), ("candidate", candidate)):
        try:
            out[arm] = power.parse_selection(text)
        except ValueError as exc:
            raise click.BadParameter(f"--power-gpus-{arm}: {exc}") from None
    return out


class DefaultCompareGroup(click.Group):
    """`spec-verdict A B` means `spec-verdict compare A B`; `spec-verdict vocab T D` stays vocab."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["compare", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultCompareGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Should you switch speculative decoding on? Compare a run without it (BASELINE) and one with it
    (CANDIDATE), level by level, and get the verdict with its reasons.

    \b
    Usage:
      spec-verdict BASELINE CANDIDATE [OPTIONS]   (same as: spec-verdict compare ...)
      spec-verdict AB_FOLDER [OPTIONS]            (spec-ab's --out: its baseline/ and candidate/)
      spec-verdict vocab TARGET DRAFT

    BASELINE and CANDIDATE are each a Locust --csv prefix (PREFIX_requests.csv, PREFIX_latency.json,
    PREFIX_server_metrics.csv, PREFIX_summary.json) or a folder of runs (several runs = repeats).
    See `spec-verdict compare --help` for the options.

    Each level answers one declared question (--objective, default latency: TPOT p50 better beyond the
    noise band) with every guard within --margin; its verdict is ship, off (a measured loss), tradeoff
    (the question improved while a guard got worse) or inconclusive, the levels' questions under Holm's
    correction, the per-task breakdown exploratory (false discovery rate). Overall: the levels' word
    when they agree, else depends, with the level up to which speculation pays; --serving-concurrency N
    gives the verdict at the concurrency you serve instead (the nearest measured level; between two
    measured levels that disagree, inconclusive with where to measure), e.g. `spec-verdict runs/ab
    --serving-concurrency 16`.

    \b
    Exit codes: 0 verdict produced; 1 the verdict is one named by --fail-on;
    2 bad input, or runs that cannot be compared (different models, the same run twice, swapped; prompts,
    request settings, design or load that differ; one arm's runs on two servers: --force compares them
    anyway and the report says what differs first), one line on stderr.
    """


def ab_arms(folder: Path) -> tuple[Path, Path]:
    """spec-ab's --out folder -> its two arms' folders; InputError saying what was expected otherwise."""
    arms = folder / "baseline", folder / "candidate"
    if all(arm.is_dir() for arm in arms):
        return arms
    # Each kind of wrong folder with its own fix (one line for all of them sent users looking).
    if not folder.exists():
        raise InputError(f"{folder}: no such file or folder (give BASELINE and CANDIDATE, or a spec-ab --out "
                         "folder)")
    if folder.is_dir() and not any(folder.iterdir()):
        raise InputError(f"{folder}: the folder is empty (a spec-ab --out folder holds baseline/ and "
                         "candidate/ once its first level is measured)")
    held = [arm.name for arm in arms if arm.is_dir()]
    if held:
        missing = next(arm.name for arm in arms if not arm.is_dir())
        raise InputError(f"{folder}: it holds {held[0]}/ but no {missing}/: that spec-ab run did not get to "
                         f"both arms (spec-ab --out {folder} --resume finishes it)")
    raise InputError(f"{folder}: give BASELINE and CANDIDATE, or a spec-ab --out folder (one holding "
                     "baseline/ and candidate/)")


@cli.command("compare")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path), required=False)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="What to print on stdout.")
@click.option("-o", "--output", "outputs", multiple=True, type=click.Path(path_type=Path),
              help="Also write to PATH, the format from its suffix (.json .md .html .txt); repeatable.")
@click.option("--serving-concurrency", type=click.IntRange(min=1), metavar="N",
              help="The concurrency you serve at: the overall verdict is that level's (nearest measured; "
                   "between measured levels that disagree, inconclusive with the --levels to measure); "
                   "without it, levels that disagree make it 'depends'.")
@click.option("--ship-acceptance", type=float, default=DEFAULTS.ship_acceptance, show_default="2/3",
              help="Acceptance at or above which speculation is worth it.")
@click.option("--off-acceptance", type=float, default=DEFAULTS.off_acceptance, show_default=True,
              help="Acceptance below which to switch it off; in between, the measurements decide.")
@click.option("--noise-pct", type=float, default=DEFAULTS.noise_pct, show_default=True,
              help="Differences within +-this % are ties (widened to the repeats' spread).")
@click.option("--max-failure-rate", type=float, default=DEFAULTS.max_failure_rate, show_default=True,
              help="An arm failing more than this fraction of requests at a level makes it inconclusive.")
@click.option("--min-requests", type=int, default=DEFAULTS.min_requests, show_default=True,
              help="Floor: fewest measured requests per arm and level (the intervals decide above it).")
@click.option("--min-tokens", "min_output_tokens", type=int, default=DEFAULTS.min_output_tokens,
              show_default=True, help="Floor: fewest output tokens per arm and level.")
@click.option("--disagree-acceptance", type=float, default=DEFAULTS.disagree_acceptance, show_default=True,
              help="Acceptance below which draft and target are said to disagree.")
@click.option("--position-acceptance", type=float, default=DEFAULTS.position_acceptance, show_default=True,
              help="Per-position acceptance a draft position must keep to be worth proposing.")
@click.option("--max-client-lag-share", "max_client_late_share", type=float,
              default=DEFAULTS.max_client_late_share, show_default=True,
              help="An arm whose load generator was behind more than this share of the time at a level "
                   "makes it inconclusive (from its _summary.json).")
@click.option("--force", is_flag=True, default=False,
              help="Compare arms that served different models, the same run twice, arms that look swapped "
                   "(the baseline speculated, the candidate did not), or runs whose prompts, request "
                   "settings, design or load differ (docs/comparability.md); by default each is an error "
                   "(exit 2), forced the report names each difference first.")
@click.option("--allow-lossy", is_flag=True, default=False,
              help="Judge a candidate whose answers changed beyond the baseline's own noise on speed alone "
                   "(by default it is not shipped: lossless speculation does not change answers).")
@click.option("--max-lateness-p99-ms", type=float, default=DEFAULTS.max_lateness_p99_ms, show_default=True,
              help="Open loop: a rate level where an arm's requests went out later than this (p99) after "
                   "their intended start is inconclusive (it did not get its rate).")
@click.option("--max-missed-share", type=float, default=DEFAULTS.max_missed_share, show_default=True,
              help="Open loop: so is one where an arm never sent more than this share of its arrivals "
                   "(from its _summary.json).")
@click.option("--mde-target-pct", type=float, default=DEFAULTS.mde_target_pct, show_default=True,
              help="A level that could not have detected a change this large (%) on a deciding metric is "
                   "under-powered (docs/verdict-method.md).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=DEFAULTS.objective, show_default=True,
              help="Each level's one primary question: latency (TPOT p50 better, output tok/s a guard), "
                   "throughput (output tok/s better, latency a guard) or goodput (needs --slo).")
@click.option("--margin", "margin_pct", type=click.FloatRange(min=0), default=DEFAULTS.margin_pct,
              show_default=True, metavar="PCT",
              help="Non-inferiority margin (%): to ship, every guard (TPOT p90, TTFT p50, the other of "
                   "latency and throughput) must stay within it by its whole interval.")
@click.option("--ttft-margin", "ttft_margin_pct", type=click.FloatRange(min=0),
              default=DEFAULTS.ttft_margin_pct, show_default=True, metavar="PCT",
              help="TTFT p50's own non-inferiority margin (%): a draft's first step costs once per request.")
@click.option("--slo", "slo_text", metavar="ttft_ms=X,tpot_ms=Y",
              help="A latency objective: per arm and level, the share of requests meeting it and the goodput "
                   "(their tokens per second), which becomes the throughput the verdict judges.")
@pricing_options
@power_selection_options
@click.option("--fail-on", multiple=True, type=click.Choice((OFF, TRADEOFF, DEPENDS, INCONCLUSIVE)),
              help="Exit 1 when the overall verdict is this (repeatable), for CI; depends: the levels "
                   "disagree (with --serving-concurrency the overall verdict is one level's).")
def compare(baseline: Path, candidate: Path | None, fmt: str, outputs: tuple[Path, ...],
            serving_concurrency: int | None, slo_text: str | None, fail_on: tuple[str, ...], force: bool,
            gpu_cost_per_hour: float | None, gpus: float | None, gpus_baseline: float | None,
            gpus_candidate: float | None, power_gpus_baseline: str | None, power_gpus_candidate: str | None,
            **thresholds: float) -> int:
    """Compare BASELINE (speculation off) with CANDIDATE (speculation on) and print the verdict; given one
    folder, spec-ab's --out, compare its baseline/ and candidate/."""
    from .api import format_for, render, verdict_for, write_outputs

    if candidate is None:
        baseline, candidate = ab_arms(baseline)

    for path in outputs:
        format_for(path)
    slo = parse_slo(slo_text) if slo_text else None
    pricing = pricing_of(gpu_cost_per_hour, gpus, gpus_baseline, gpus_candidate)
    selections = power_selections(power_gpus_baseline, power_gpus_candidate)
    verdict = verdict_for([baseline], [candidate], serving_concurrency=serving_concurrency, slo=slo,
                          force=force, pricing=pricing, power_gpus=selections, **thresholds)
    write_outputs(verdict, outputs)
    click.echo(render(verdict, fmt), nl=False)
    return 1 if verdict.verdict in fail_on else 0


@cli.command("vocab")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("draft", type=click.Path(path_type=Path))
def vocab(target: Path, draft: Path) -> int:
    """Compare TARGET's and DRAFT's tokenizers: model folders, or their config.json / tokenizer.json.

    Exit 0 when they agree, 1 on a mismatch, 2 on bad input.
    """
    from . import vocab as v

    t, d = v.read_facts(target), v.read_facts(draft)
    problems = v.compare(t, d)
    click.echo(v.report(t, d, problems), nl=False)
    return 1 if problems else 0


def _fail(message: str) -> int:
    first = (message.strip().splitlines() or ["error"])[0]
    click.echo(f"spec-verdict: {first}", err=True)
    return EXIT_BAD_INPUT


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code; every error becomes one line on stderr."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="spec-verdict")))
        return _fail("missing BASELINE and CANDIDATE (see above)")
    try:
        code = cli.main(args=args, prog_name="spec-verdict", standalone_mode=False)
    except InputError as exc:
        return _fail(str(exc))
    except click.exceptions.Abort:
        return _fail("aborted")
    except click.ClickException as exc:
        return _fail(exc.format_message())
    except BrokenPipeError:
        return 0
    except Exception as exc:  # never a traceback: bad input can reach any layer
        return _fail(f"cannot analyse these inputs: {type(exc).__name__}: {exc}")
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run())
