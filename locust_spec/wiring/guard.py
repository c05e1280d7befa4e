"""What a peer on the network can do to a run: neither redirect its credentials nor choose its files.

- Locust's web UI applies every `POST /swarm` form field that names an option to the run's options, shown
  in the form or not (Locust 2.x). Without `--web-login` (Locust's default) anyone who reaches the UI could
  send the API key and the metrics token to a host of theirs (`host=`, `metrics_url=`), have any file read
  (`response_format=`, `prompts=`) or written elsewhere (`csv_prefix=`); a file read is sent with every
  request (a `response_format` schema), so a host of theirs with a file of the user's leaks it even with no
  credential configured. A swarm request is refused when it changes the host (without `--web-login`
  always; with it, while a credential is configured), names a file not given at start (built-in prompt
  sets and `json_object` stay allowed), or sets an option the form does not show. Each field is judged as
  Locust will read it: Locust takes a repeated field's first value (a list option's every value), so a
  field that Locust reads once may appear once only (joined, `host=http://127.0.0.1:80&host=00` read as the
  real host while Locust used the first).
- Any web page the user opens can send a form to the UI, on loopback too (Locust checks no origin): a
  state-changing request (POST, PUT, PATCH, DELETE) whose `Origin`, else `Referer`, is not the UI's own
  host is refused. A request with neither comes from no browser (curl, a script), where no page acts for
  the user.
- A UI reachable from the network without `--web-login` gets a warning at start.
- `--master-bind-host` defaults to loopback (Locust's default is every interface, without
  authentication): `--processes N` needs nothing else; workers on other machines need it set explicitly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

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
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CREDENTIAL_ENV = ("OPENAI_API_KEY", "LOCUST_SPEC_METRICS_TOKEN")


def _values(value: object) -> list[str]:
    """An option's value as the list of strings a form carries ("a,b" or repeated fields)."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def _set_name(spec: str) -> str:
    """A `--prompts` item's set or file, without its weight (a bad weight cut off too: the run's own
    prompt check names it)."""
    try:
        return parse_weighted(spec)[0]
    except PromptError:
        return spec.rpartition(":")[0] or spec


def cross_origin(method: str, origin: str | None, referer: str | None, host: str | None) -> str | None:
    """Why a request to the web UI must be refused as sent by another site's page, or None.

    `host` is the request's Host header (the address the browser reached the UI at); a state-changing
    request's `Origin`, else its `Referer`, must name the same host and port. Browsers send `Origin` with
    every cross-origin POST ("null" from a sandboxed or privacy-stripped page: refused as well)."""
    if method.upper() in SAFE_METHODS:
        return None
    source = origin if origin else referer
    if not source:
        return None
    try:
        netloc = urlsplit(source).netloc if source != "null" else ""
    except ValueError:
        netloc = ""
    if netloc and host and netloc.lower() == host.lower():
        return None
    return f"a {method.upper()} from another site's page ({source[:100]}) is refused; use the UI's own page"


def refusal(form: Mapping[str, list[str]], options: Mapping[str, object], shown: Iterable[str],
            hosts: frozenset[str] | None, builtins: Iterable[str] = ()) -> str | None:
    """Why a `/swarm` form must be refused, or None when it changes nothing it may not.

    `form` maps each field to its values, `options` are the run's options as started, `shown` the plugin
    options the form shows, `hosts` the hosts the run may be pointed at (None: any, as the UI needs a
    login and no credential is at stake), `builtins` the built-in prompt set names. A file option may name
    only the files it was given at start: whatever it names is read and, for a schema, sent.
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
                return ("the host is fixed at start (credentials and the files given go to it only); "
                        "restart Locust with --host to test another server")
        elif key in FILE_OPTIONS:
            started = {_set_name(v) if key == "prompts" else v for v in _values(options.get(key))}
            for value in _values(values):
                name = _set_name(value) if key == "prompts" else value
                if name not in started and name not in not_files:
                    return (f"{key} may name only the files given at start (or built-in sets, json_object); "
                            f"restart Locust with --{key.replace('_', '-')} to use another")
        elif key in options and key not in allowed:
            return f"{key} cannot be set from the web UI"
    return None


def _has_credentials(options, environ: Mapping[str, str]) -> bool:
    return bool(getattr(options, "api_key", "") or getattr(options, "metrics_token", None)
                or any(environ.get(name) for name in CREDENTIAL_ENV)
                or any("@" in url for url in getattr(options, "metrics_url", None) or []))


def allowed_hosts(options, environ: Mapping[str, str], host: str | None,
                  class_hosts: Iterable[str | None]) -> frozenset[str] | None:
    """The hosts the UI may point the run at: the start host, or without one the user classes' own; None
    (any) only behind --web-login while no credential is at stake."""
    if getattr(options, "web_login", False) and not _has_credentials(options, environ):
        return None
    if host:
        return frozenset({host.rstrip("/")})
    return frozenset({"", *((h or "").rstrip("/") for h in class_hosts)})


def install(environment, web_ui) -> None:
    """Refuse other sites' requests, and swarm requests that would move credentials or files (see the
    module's docstring)."""
    from flask import jsonify, request

    options = dict(vars(environment.parsed_options))
    classes = environment.runner.user_classes if environment.runner is not None else []
    hosts = allowed_hosts(environment.parsed_options, os.environ, environment.host, (c.host for c in classes))

    @web_ui.app.before_request
    def _guard():
        why = cross_origin(request.method, request.headers.get("Origin"), request.headers.get("Referer"),
                           request.host)
        if why is not None:
            log.warning("locust-spec: refused a web UI %s %s from %s: %s", request.method, request.path,
                        request.remote_addr, why)
            return jsonify({"success": False, "message": f"locust-spec: {why}"}), 403
        if request.method != "POST" or not request.path.endswith("/swarm"):
            return None
        shown = web_ui.template_args.get("extra_options") or {}
        why = refusal(request.form.to_dict(flat=False), options, shown, hosts, set_names())
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
            "who reaches it can start and stop runs (at the host and with the files given at start); "
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
