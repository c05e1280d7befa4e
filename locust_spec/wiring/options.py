"""The plugin's Locust command-line options (shown in the web UI) and the request settings read from them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import orjson

from locust_spec.client.headers import credential_type
from locust_spec.client.settings import RequestSettings
from locust_spec.client.transport import MAX_LINE_BYTES, MAX_RESPONSE_BYTES, MIN_LINE_BYTES
from locust_spec.core.formats import TURNS, PromptError, Selection
from locust_spec.core.max_tokens import DEFAULT_MAX_TOKENS, effective_max_tokens


def _byte_limit(text: str) -> int:
    """A --max-*-bytes value: an integer of at least one socket read (the line check relies on it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < MIN_LINE_BYTES:
        raise argparse.ArgumentTypeError(f"at least {MIN_LINE_BYTES} (one socket read), got {value}")
    return value


def validated(parse):
    """An argparse type that rejects bad input with argparse's one line but keeps the text for the web UI
    (which hands options back as text)."""

    def check(text: str) -> str:
        try:
            parse(str(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return str(text)

    check.__name__ = parse.__name__
    return check


def add_options(parser) -> None:
    parser.add_argument("--prompts", action="append", include_in_web_ui=True,
                       help="Prompt set: a built-in name (specbench: its six tasks; all: every set) or a "
                            "file (JSONL, JSON, CSV; SpecBench/MT-Bench question.jsonl, ShareGPT, OpenAI "
                            "chat as they are), optionally NAME:WEIGHT; repeatable (default: all built-in "
                            "sets)")
    parser.add_argument("--category", action="append", include_in_web_ui=True,
                       help="Send only prompts of these classes or file categories (repeatable or "
                            "comma-separated; mt_bench: MT-Bench's eight)")
    parser.add_argument("--prompt-limit", default=None, include_in_web_ui=True,
                       help="At most this many prompts of each set: the first, in file order, that pass "
                            "the other filters")
    parser.add_argument("--min-prompt-chars", default=None, include_in_web_ui=True,
                       help="Leave out prompts whose first request is shorter (characters)")
    parser.add_argument("--max-prompt-chars", default=None, include_in_web_ui=True,
                       help="Leave out prompts whose first request is longer (characters)")
    parser.add_argument("--turns", choices=TURNS, default="all", include_in_web_ui=True,
                       help="Multi-turn rows (SpecBench turns, ShareGPT conversations): all (each turn with "
                            "the model's own answers so far) or first")
    parser.add_argument("--model", default="", include_in_web_ui=True,
                       help="Model name (default: the first id from GET /v1/models)")
    parser.add_argument("--max-tokens", type=positive_int, default=None, include_in_web_ui=True,
                       help="Cap on every request's max_tokens, a prompt's own included (default: a "
                            f"prompt's own, else {DEFAULT_MAX_TOKENS})")
    parser.add_argument("--temperature", type=float, default=0.0, include_in_web_ui=True,
                       help="Sampling temperature of every request (0: greedy, a prompt's answer repeats)")
    parser.add_argument("--ignore-eos", action="store_true", default=False, include_in_web_ui=True,
                       help="Ask the server (vLLM) to generate max_tokens regardless of EOS")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""), include_in_web_ui=False,
                       type=credential_type("--api-key (or $OPENAI_API_KEY)"),
                       help="Bearer token (default: $OPENAI_API_KEY), surrounding whitespace stripped; never "
                            "written anywhere")
    parser.add_argument("--response-format", default="", include_in_web_ui=True,
                       help="Grammar mode: json_object, or a path to a JSON-schema file")
    parser.add_argument("--speculative-config", default="", include_in_web_ui=False,
                        help="What the server runs: its vLLM --speculative-config as JSON ('none': no "
                             "speculation), recorded in PREFIX_run.json (vLLM does not say it over HTTP); "
                             "spec-ab passes --speculative-config-baseline/-candidate here")
    parser.add_argument("--client", choices=("fast", "openai"), default="fast", include_in_web_ui=True,
                       help="fast: geventhttpclient line reader (accurate); openai: the official SDK "
                            "(accurate only at low concurrency per process)")
    parser.add_argument("--request-timeout", type=float, default=600.0, include_in_web_ui=True,
                       help="Seconds for a whole request (failure: timeout_request)")
    parser.add_argument("--connect-timeout", type=float, default=10.0, include_in_web_ui=True,
                       help="Seconds to open the connection (failure: timeout_connect)")
    parser.add_argument("--first-token-timeout", type=float, default=120.0, include_in_web_ui=True,
                       help="Seconds from sending to the first token (failure: timeout_first_token)")
    parser.add_argument("--idle-timeout", type=float, default=60.0, include_in_web_ui=True,
                       help="Seconds without bytes once tokens flow (failure: timeout_idle)")
    parser.add_argument("--seed", type=int, default=0, include_in_web_ui=True,
                       help="Seed of the prompt order; in a distributed run each worker draws its own "
                            "stream, derived from this seed and its worker index")
    parser.add_argument("--max-line-bytes", type=_byte_limit, default=MAX_LINE_BYTES, include_in_web_ui=True,
                       help=f"Longest SSE line accepted, at least {MIN_LINE_BYTES} (failure: too_large; "
                            "a vLLM chunk is under 1 kB)")
    parser.add_argument("--max-response-bytes", type=_byte_limit, default=MAX_RESPONSE_BYTES,
                       include_in_web_ui=True,
                       help="Largest streamed response accepted (failure: too_large; ~150k vLLM chunks)")


def response_format(value: str) -> dict | None:
    """`json_object` or a JSON-schema file -> the request's `response_format`; raises ValueError."""
    if not value:
        return None
    if value == "json_object":
        return {"type": "json_object"}
    path = Path(value)
    try:
        schema = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise ValueError(
            f"--response-format: {value} is neither json_object nor a readable JSON schema ({e})"
        ) from None
    return {"type": "json_schema", "json_schema": {"name": path.stem, "schema": schema}}


def positive_int(text: str | int) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _count(options, name: str) -> int | None:
    """A numeric filter option; the web UI hands one back as text ("" when left empty)."""
    value = getattr(options, name, None)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PromptError(f"--{name.replace('_', '-')} wants a whole number, not {value!r}") from None


def selection_from(options) -> Selection:
    """The prompt filters of a run's options (PromptError, one line, when one is unusable)."""
    given = getattr(options, "category", None) or []
    return Selection.of([given] if isinstance(given, str) else given, _count(options, "prompt_limit"),
                        _count(options, "min_prompt_chars"), _count(options, "max_prompt_chars"),
                        getattr(options, "turns", "all"))


def settings_from(options, model: str) -> RequestSettings:
    # the web UI hands an option without a default back as text ("" when left empty)
    cap = positive_int(options.max_tokens) if options.max_tokens not in (None, "") else None
    return RequestSettings(
        model=model,
        max_tokens=effective_max_tokens(None, cap),
        max_tokens_cap=cap,
        temperature=options.temperature,
        ignore_eos=options.ignore_eos,
        response_format=response_format(options.response_format),
        client=options.client,
        request_timeout=options.request_timeout,
        connect_timeout=options.connect_timeout,
        first_token_timeout=options.first_token_timeout,
        idle_timeout=options.idle_timeout,
        max_line_bytes=options.max_line_bytes,
        max_response_bytes=options.max_response_bytes,
    )
