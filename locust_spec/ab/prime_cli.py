"""spec-prime: send every prompt of the run's sets once to a server, as spec-ab does before an arm's first
sweep, for runs that start Locust themselves (compose's single-GPU profile, the Kubernetes Jobs)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from locust_spec.ab import cli as ab
from locust_spec.ab import progress, self_check
from locust_spec.client import server_api
from locust_spec.core.formats import Selection
from locust_spec.core.prompts import prompt_specs

POLL_S = 5.0


def wait_ready(host: str, api_key: str, wait_s: float) -> None:
    """Until GET /v1/models answers (a server still loading its model refuses or answers 503); raises the
    last RuntimeError once `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            server_api.first_model(host, api_key, timeout=10)
            return
        except RuntimeError:
            if time.monotonic() + POLL_S > deadline:
                raise
            time.sleep(POLL_S)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--host", required=True, metavar="URL", help="The server (Locust's --host).")
@click.option("--prompts", multiple=True, help="Prompt sets as Locust gets them (repeatable, or separated "
              "by commas; default: every built-in set).")
@ab.selection_options
@click.option("--model", default="", help="Model name (default: the server's first model).")
@click.option("--wait-s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Wait this long for the server to answer /v1/models before priming.")
@click.option("--name", default="server", show_default=True, help="What to call the server in the output.")
@click.option("--self-check", "self_check_prompts", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="Then answer N prompts twice (the baseline's noise floor for the answer "
                                "gate, as spec-ab's --self-check) into --self-check-out.")
@click.option("--self-check-out", type=click.Path(file_okay=False, path_type=Path), metavar="FOLDER",
              help="The baseline's run folder: the self-check goes there, where spec-verdict reads it.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="The self-check's max_tokens: the run's.")
@click.option("--seed", type=int, default=0, show_default=True, help="Which prompts the self-check takes.")
def main(host: str, prompts: tuple[str, ...], category: tuple[str, ...], prompt_limit: int | None,
         min_prompt_chars: int | None, max_prompt_chars: int | None, turns: str, model: str, wait_s: float,
         name: str, self_check_prompts: int, self_check_out: Path | None, max_tokens: int | None,
         seed: int) -> None:
    """Prime a server's prefix cache before a run that starts Locust itself: send every prompt of the
    run's sets once (a conversation's first turn) with max_tokens 1, as spec-ab does before an arm's first
    sweep, so that both arms of an A/B start with their prompts cached. The API key comes from
    $OPENAI_API_KEY."""
    host = ab.base_url(host)
    try:
        selection = Selection.of(category, prompt_limit, min_prompt_chars, max_prompt_chars, turns)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if self_check_prompts and self_check_out is None:
        raise click.UsageError("--self-check needs --self-check-out (the baseline's run folder)")
    load = ab.Load(tuple(prompt_specs(list(prompts))), max_tokens, False, seed, model, 1, selection=selection)
    try:
        wait_ready(host, os.environ.get("OPENAI_API_KEY", ""), wait_s)
        display = progress.Display(sys.stdout)
        ab.prime_arm(name, host, load, display)
        if self_check_prompts and self_check_out is not None:
            ab.baseline_self_check(self_check_out / self_check.FILE, host, load, self_check_prompts, display)
    except (RuntimeError, ab.AbError) as e:
        raise click.ClickException(str(e)) from None
