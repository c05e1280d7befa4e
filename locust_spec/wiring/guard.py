"""What a peer on the network can do to a run: neither redirect its credentials nor choose its files.

- Locust's web UI applies every `POST /swarm` form field that names an option to the run's options, shown
  in the form or not (Locust 2.x). Without `--web-login` (Locust's default) anyone who reaches the UI could
  send the API key and the metrics token to a host of theirs (`host=`, `metrics_url=`), have any file read
  (`response_format=`, `prompts=`) or written elsewhere (`csv_prefix=`). A swarm request is refused when
  it changes the host while a credential is configured, names a file outside the run's working directory
  (built-in prompt sets, `json_object` and the files given at start stay allowed), or sets an option the
  form does not show. Each field is judged as Locust will read it: Locust takes a repeated field's first
  value (a list option's every value), so a field that Locust reads once may appear once only (joined,
  `host=http://127.0.0.1:80&host=00` read as the real host while Locust used the first).
- A UI reachable from the network without `--web-login` gets a warning at start.
- `--master-bind-host` defaults to loopback (Locust's default is every interface, without
  authentication): `--processes N` needs nothing else; workers on other machines need it set explicitly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from locust.runners import MasterRunner, WorkerRunner

from locust_spec.core.hosts import is_loopback
from locust_spec.core.prompts import PromptError, parse_weighted, set_names

log = logging.getLogger(__name__)

MASTER_BIND_HOST = "127.0.0.1"
# What Locust's own start form sends besides the plugin options it shows (`extra_options`).
LOCUST_FORM = frozenset({"user_count", "spawn_rate", "host", "run_time", "profile", "user_classes",
                         "shape_class"})
# The fields Locust reads as lists (`request.form.getlist`): the user classes and every list option.
LIST_FIELDS = frozenset({"user_classes"})
# Shown in the form, but they may name files the run reads.
FILE_OPTIONS = ("response_format", "prompts")
NOT_FILES = frozenset({"all", "json_object"})
CREDENTIAL_ENV = ("OPENAI_API_KEY", "LOCUST_SPEC_METRICS_TOKEN")


def _values(value: object) -> list[str]:
    """An option's value as the list of strings a form carries ("a,b" or repeated fields)."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def _set_name(spec: str) -> str:
    """A `--prompts` item's set or file, without its weight (a bad weight: the item as it is)."""
    try:
        return parse_weighted(spec)[0]
    except PromptError:
        return spec


def _inside(name: str, root: Path) -> bool:
    path = Path(name) if Path(name).is_absolute() else root / name
    return path.resolve().is_relative_to(root.resolve())


def refusal(form: Mapping[str, list[str]], options: Mapping[str, object], shown: Iterable[str],
            hosts: frozenset[str] | None, root: Path, builtins: Iterable[str] = ()) -> str | None:
    """Why a `/swarm` form must be refused, or None when it changes nothing it may not.

    `form` maps each field to its values, `options` are the run's options as started, `shown` the plugin
    options the form shows, `hosts` the hosts the run may be pointed at (None: any, as no credential
    is at stake), `root` the folder files may be read from, `builtins` the built-in prompt set names.
    """
    allowed = LOCUST_FORM | frozenset(shown)
    not_files = NOT_FILES | frozenset(builtins)
    for key, values in form.items():
        if len(values) > 1 and key not in LIST_FIELDS and not isinstance(options.get(key), list):
            return f"{key} is given {len(values)} times; send each field once"
        if key == "host":
            # what Locust sets (web.py: the first value, `<` and `>` removed), judged exactly
            host = values[0].replace("<", "").replace(">", "").rstrip("/") if values else ""
            if hosts is not None and host not in hosts:
                return ("the host is fixed at start (the API key and metrics token go to it only); "
                        "restart Locust with --host to test another server")
        elif key in FILE_OPTIONS:
            started = _values(options.get(key))
            for value in _values(values):
                name = _set_name(value) if key == "prompts" else value
                if value not in started and name not in not_files and not _inside(name, root):
                    return f"{key} may name files under {root} only (or built-in sets, json_object)"
        elif key in options and key not in allowed:
            return f"{key} cannot be set from the web UI"
    return None


def _has_credentials(options) -> bool:
    return bool(getattr(options, "api_key", "") or getattr(options, "metrics_token", None)
                or any(os.environ.get(name) for name in CREDENTIAL_ENV)
                or any("@" in url for url in getattr(options, "metrics_url", None) or []))


def _allowed_hosts(environment) -> frozenset[str] | None:
    """The start host, or without one the user classes' own; None when no credential is at stake."""
    if not _has_credentials(environment.parsed_options):
        return None
    if environment.host:
        return frozenset({environment.host.rstrip("/")})
    classes = environment.runner.user_classes if environment.runner is not None else []
    return frozenset({"", *((c.host or "").rstrip("/") for c in classes)})


def install(environment, web_ui) -> None:
    """Refuse swarm requests that would move credentials or files (see the module's docstring)."""
    from flask import jsonify, request

    options = dict(vars(environment.parsed_options))
    hosts = _allowed_hosts(environment)
    root = Path.cwd()

    @web_ui.app.before_request
    def _guard_swarm():
        if request.method != "POST" or not request.path.endswith("/swarm"):
            return None
        shown = web_ui.template_args.get("extra_options") or {}
        why = refusal(request.form.to_dict(flat=False), options, shown, hosts, root, set_names())
        if why is None:
            return None
        log.warning("locust-spec: refused a web UI start from %s: %s", request.remote_addr, why)
        return jsonify({"success": False, "message": f"locust-spec: {why}", "host": environment.host})


def exposure_warning(options) -> str | None:
    """The warning for a web UI that anyone on the network can drive, or None."""
    if getattr(options, "headless", False) or getattr(options, "web_login", False):
        return None
    bind = getattr(options, "web_host", "") or "*"
    if is_loopback(bind):
        return None
    return (f"the web UI listens on {bind if bind != '*' else 'every interface'} without --web-login: anyone "
            "who reaches it can start and stop runs (the host, credentials and files stay as started); "
            "add --web-login, or --web-host 127.0.0.1")


def add_options(parser) -> None:
    """A master listens on loopback unless the user names an interface (--master-bind-host)."""
    parser.set_defaults(master_bind_host=MASTER_BIND_HOST)


def guard_environment(environment, web_ui) -> None:
    """At init on a master or local runner: say where the master listens; guard the web UI."""
    options = environment.parsed_options
    if options is None or isinstance(environment.runner, WorkerRunner):
        return
    if isinstance(environment.runner, MasterRunner) and is_loopback(options.master_bind_host or "*") \
            and not getattr(options, "processes", None):
        log.info("locust-spec: the master listens on %s only; workers on other machines need "
                 "--master-bind-host", options.master_bind_host)
    if web_ui is None:
        return
    install(environment, web_ui)
    warning = exposure_warning(options)
    if warning:
        log.warning("locust-spec: %s", warning)
