"""PREFIX_run.json: what a run measured, recorded once per run by the master or local runner.

Written when the test starts (what was asked: the command line, the load, the tools, the machine), again
when the server has said what it serves (`/v1/models`, `/version`), and completed when the test stops.
No secret reaches it: the command line keeps no option value that names a key, token, secret or password,
and every URL in it loses its user:password and query (client/http_fetch.display_url).

Schema 2 (docs/contracts.md; 1 is 2 without `speculative_config`):
```
{"schema": 1, "run_id": "<hex>", "started_unix_s": x, "ended_unix_s": x | null, "tests": n,
 "command": ["locust", ...], "host": "<URL>" | null, "model": "<asked for>" | null,
 "server": {"models": [{"id", "root", "max_model_len"}] | null, "version": "0.32.0" | null,
            "errors": ["..."]} | null,
 "load": {"prompts": [{"set", "file", "builtin", "weight", "prompts", "sha256"}], "seed": n,
          "max_tokens": n | null, "default_max_tokens": n, "ignore_eos": bool, "temperature": x,
          "response_format": "..." | null, "client": "fast" | "openai"},
 "tools": {"locust_spec": "...", "locust": "...", "python": "..."},
 "machine": {"cores": n, "runner": "local" | "master", "workers": n},
 "speculative_config": {"config": {...} | "none" | "<text>", "source": "given"} | null}
```
"""

from __future__ import annotations

import os
import platform
import re
import uuid
from collections.abc import Sequence
from pathlib import Path

import orjson

from locust_spec.client.http_fetch import display_url
from locust_spec.core.formats import EVERYTHING, Selection
from locust_spec.core.max_tokens import DEFAULT_MAX_TOKENS
from locust_spec.core.prompts import PromptError, PromptFiles, describe_sets, prompt_specs
from locust_spec.core.resources import installed_version
from locust_spec.core.runfiles import RUN_SCHEMA

REDACTED = "<redacted>"
# An option whose name ends in one of these carries a credential (--api-key, --metrics-token): its value
# is never written. (--max-tokens and --first-token-timeout do not end in one.)
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pass", "auth",
                          "authorization", "credential", "credentials", "cookie"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s,;]+")


def _secret_option(arg: str) -> bool:
    name = arg.split("=", 1)[0].lstrip("-").lower()
    return arg.startswith("-") and re.split(r"[-_.]", name)[-1] in SECRET_WORDS


def _without_credentials(arg: str) -> str:
    return _URL.sub(lambda m: display_url(m.group(0)), arg)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line as it may be written: the values of options naming a key, token, secret or
    password replaced, every URL's user:password and query left out."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
        elif _secret_option(arg) and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(_without_credentials(arg))
        hide_next = _secret_option(arg) and "=" not in arg
    return out


def versions() -> dict:
    return {"locust_spec": installed_version(), "locust": installed_version("locust"),
            "python": platform.python_version()}


def load_part(options, selection: Selection | None = EVERYTHING, files: PromptFiles | None = None) -> dict:
    """What every request of the run was sent with, from the run's options (the web UI may change them);
    `selection` the run's prompt filters (None: unusable, the run says why), `files` the prompt files the
    process has read (each file is read once)."""
    try:
        prompts: list[dict] | None = None if selection is None else describe_sets(
            prompt_specs(getattr(options, "prompts", None)), selection, files)
    except (PromptError, OSError):
        prompts = None  # the run itself says why it cannot load them
    cap = str(getattr(options, "max_tokens", None) or "")  # the web UI hands options back as text
    # the filters as given (spec-verdict compares runs by them; `prompts` counts what they keep of each file)
    filters = {key: getattr(options, key, None)
               for key in ("category", "prompt_limit", "min_prompt_chars", "max_prompt_chars", "turns")}
    return {"prompts": prompts, "prompt_filters": filters, "seed": getattr(options, "seed", None),
            "max_tokens": int(cap) if cap.isdigit() else None,
            "default_max_tokens": DEFAULT_MAX_TOKENS,
            "ignore_eos": bool(getattr(options, "ignore_eos", False)),
            "temperature": getattr(options, "temperature", None),
            "response_format": getattr(options, "response_format", "") or None,
            "client": getattr(options, "client", None)}


MAX_CONFIG_CHARS = 4000


def speculative_part(text: str | None) -> dict | None:
    """--speculative-config as given (its JSON parsed where it is JSON); None when not given."""
    text = (text or "").strip()[:MAX_CONFIG_CHARS]
    if not text:
        return None
    try:
        config: object = orjson.loads(text)
    except orjson.JSONDecodeError:
        config = text
    return {"config": config, "source": "given"}


def started(options, argv: Sequence[str], host: str | None, now_unix_s: float, runner: str,
            workers: int, load: dict | None = None) -> dict:
    """The record at test start (pure but for reading the prompt files and the installed versions)."""
    return {
        "schema": RUN_SCHEMA,
        "run_id": uuid.uuid4().hex,
        "started_unix_s": now_unix_s,
        "ended_unix_s": None,
        "tests": 1,
        "command": redact_argv(argv),
        "host": display_url(host) if host else None,
        "model": getattr(options, "model", "") or None,
        "server": None,
        "load": load_part(options) if load is None else load,
        "tools": versions(),
        "machine": {"cores": os.cpu_count(), "runner": runner, "workers": workers},
        "speculative_config": speculative_part(getattr(options, "speculative_config", None)),
    }


def server_part(models: list[dict] | None, version: str | None, errors: Sequence[str]) -> dict:
    return {"models": models, "version": version, "errors": list(errors)}


def write(path: Path, record: dict) -> None:
    """Atomically, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
