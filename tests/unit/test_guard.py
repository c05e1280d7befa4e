"""The web UI guard's decisions (pure): which swarm forms would move credentials or files."""

from __future__ import annotations

import argparse
from pathlib import Path

from locust_spec.core.hosts import on_this_machine
from locust_spec.wiring.guard import exposure_warning, is_loopback, refusal

OPTIONS = {"host": "http://vllm:8000", "api_key": "k", "metrics_url": None, "csv_prefix": "out/run",
           "response_format": "", "prompts": ["code", "json:2"], "max_tokens": 256, "num_users": 1}
SHOWN = {"prompts", "response_format", "max_tokens"}
HOSTS = frozenset({"http://vllm:8000"})
ROOT = Path("/srv/run")
BUILTINS = ("code", "json", "quote")


def form(**fields) -> dict[str, list[str]]:
    return {"user_count": ["4"], "spawn_rate": ["4"], **{k: v if isinstance(v, list) else [v]
                                                          for k, v in fields.items()}}


def why(hosts: frozenset[str] | None = HOSTS, **fields) -> str | None:
    return refusal(form(**fields), OPTIONS, SHOWN, hosts, ROOT, BUILTINS)


def test_the_form_as_the_ui_sends_it_passes():
    assert refusal(form(host="http://vllm:8000/", prompts="code,json:2", max_tokens="64",
                        response_format=""), OPTIONS, SHOWN, HOSTS, ROOT, BUILTINS) is None
    assert refusal(form(prompts=["code", "json:2"]), OPTIONS, SHOWN, HOSTS, ROOT, BUILTINS) is None


def test_another_host_is_refused_when_credentials_are_at_stake_only():
    assert "host is fixed at start" in why(host="http://thief:1")
    assert why(None, host="http://elsewhere:1") is None


def test_a_field_locust_reads_once_is_judged_as_locust_reads_it_and_may_not_repeat():
    # Locust sets the host from the first value; joined, these two read as the real host
    assert "host is given 2 times" in why(host=["http://vllm:800", "0"])
    assert "max_tokens is given 2 times" in why(max_tokens=["64", "128"])
    assert "host is fixed at start" in why(host=" http://vllm:8000")  # not the host Locust would use
    assert why(host="http://vll<m:8000>") is None  # Locust removes < and > (its XSS guard)
    assert why(prompts=["code", "json:2"]) is None  # a list option: Locust reads every value


def test_files_outside_the_runs_folder_and_options_the_form_does_not_show_are_refused():
    assert "response_format may name files under /srv/run only" in why(response_format="/etc/passwd")
    assert "prompts may name files under /srv/run only" in why(prompts="code,/etc/shadow:2")
    assert why(prompts="../../etc/hosts") is not None
    assert why(prompts="quote:3,json,all,mine.jsonl,/srv/run/sets/yours.jsonl:2") is None
    assert why(response_format="json_object") is None and why(response_format="schema.json") is None
    assert why(prompts="code:-1") is None  # not a file: the run's own prompt check names the bad weight
    for key, value in (("csv_prefix", "/elsewhere"), ("api_key", "x"), ("metrics_url", "http://thief/")):
        assert why(**{key: value}) == f"{key} cannot be set from the web UI"


def test_a_ui_on_every_interface_without_login_is_warned_about():
    def opts(**kw):
        return argparse.Namespace(**{"headless": False, "web_login": False, "web_host": "", **kw})

    assert "every interface without --web-login" in exposure_warning(opts())
    assert "10.0.0.5" in exposure_warning(opts(web_host="10.0.0.5"))
    quiet = (opts(web_host="127.0.0.1"), opts(web_host="::1"), opts(web_login=True), opts(headless=True))
    for options in quiet:
        assert exposure_warning(options) is None
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("*")


def test_a_server_url_on_loopback_is_on_this_machine():
    assert on_this_machine("http://localhost:8000/v1") and on_this_machine("http://[::1]:8000")
    assert on_this_machine("http://127.0.0.1:8000")
    assert not on_this_machine("http://10.0.0.5:8000") and not on_this_machine("https://gpu-box:8000")
    assert not on_this_machine("http://[bad") and not on_this_machine("not a url")
