"""The web UI guard's decisions (pure): which swarm forms would move credentials or files."""

from __future__ import annotations

import argparse

from locust_spec.core.hosts import on_this_machine
from locust_spec.wiring.guard import allowed_hosts, cross_origin, exposure_warning, is_loopback, refusal

OPTIONS = {"host": "http://vllm:8000", "api_key": "k", "metrics_url": None, "csv_prefix": "out/run",
           "response_format": "", "prompts": ["code", "json:2", "given.jsonl:3"], "max_tokens": 256,
           "num_users": 1}
SHOWN = {"prompts", "response_format", "max_tokens"}
HOSTS = frozenset({"http://vllm:8000"})
BUILTINS = ("code", "json", "quote")


def form(**fields) -> dict[str, list[str]]:
    return {"user_count": ["4"], "spawn_rate": ["4"], **{k: v if isinstance(v, list) else [v]
                                                          for k, v in fields.items()}}


def why(hosts: frozenset[str] | None = HOSTS, **fields) -> str | None:
    return refusal(form(**fields), OPTIONS, SHOWN, hosts, BUILTINS)


def test_the_form_as_the_ui_sends_it_passes():
    assert refusal(form(host="http://vllm:8000/", prompts="code,json:2", max_tokens="64",
                        response_format=""), OPTIONS, SHOWN, HOSTS, BUILTINS) is None
    assert refusal(form(prompts=["code", "json:2"]), OPTIONS, SHOWN, HOSTS, BUILTINS) is None


def test_another_host_is_refused_unless_behind_a_login_with_no_credential_at_stake():
    assert "host is fixed at start" in why(host="http://thief:1")
    assert why(None, host="http://elsewhere:1") is None

    def hosts(environ=None, **kw):
        options = argparse.Namespace(**{"api_key": "", "metrics_token": None, "metrics_url": None,
                                        "web_login": False, **kw})
        return allowed_hosts(options, environ or {}, "http://vllm:8000/", ())

    # No credential and no login: the host still stays, or a page could send it the files given at start
    assert hosts() == HOSTS
    assert hosts(web_login=True) is None
    assert hosts(web_login=True, api_key="k") == HOSTS
    assert hosts({"OPENAI_API_KEY": "k"}, web_login=True) == HOSTS
    assert hosts(web_login=True, metrics_url=["http://u:p@vllm:8000/metrics"]) == HOSTS
    options = argparse.Namespace(api_key="", metrics_token=None, metrics_url=None, web_login=False)
    assert allowed_hosts(options, {}, None, ["http://a:1/", None]) == {"", "http://a:1"}


def test_a_field_locust_reads_once_is_judged_as_locust_reads_it_and_may_not_repeat():
    # Locust sets the host from the first value; joined, these two read as the real host
    assert "host is given 2 times" in why(host=["http://vllm:800", "0"])
    assert "max_tokens is given 2 times" in why(max_tokens=["64", "128"])
    assert "host is fixed at start" in why(host=" http://vllm:8000")  # not the host Locust would use
    assert why(host="http://vll<m:8000>") is None  # Locust removes < and > (its XSS guard)
    assert why(prompts=["code", "json:2"]) is None  # a list option: Locust reads every value


def test_files_not_given_at_start_and_options_the_form_does_not_show_are_refused():
    # before: any file under the working directory passed, and a schema file went out with every request
    assert "response_format may name only the files given at start" in why(response_format="schema.json")
    assert "response_format may name only" in why(response_format="/etc/passwd")
    assert "prompts may name only the files given at start" in why(prompts="code,/etc/shadow:2")
    assert why(prompts="mine.jsonl") is not None and why(prompts="../../etc/hosts") is not None
    assert why(prompts="quote:3,json,all,given.jsonl,given.jsonl:5") is None
    assert why(response_format="json_object") is None and why(response_format="") is None
    assert refusal(form(response_format="schema.json"), {**OPTIONS, "response_format": "schema.json"},
                   SHOWN, HOSTS, BUILTINS) is None
    assert why(prompts="code:-1") is None  # not a file: the run's own prompt check names the bad weight
    for key, value in (("csv_prefix", "/elsewhere"), ("api_key", "x"), ("metrics_url", "http://thief/")):
        assert why(**{key: value}) == f"{key} cannot be set from the web UI"


def test_a_state_changing_request_from_another_sites_page_is_refused():
    ui = "127.0.0.1:8089"
    evil = "https://evil.example"
    assert f"another site's page ({evil})" in cross_origin("POST", evil, None, ui)
    assert cross_origin("POST", None, "https://evil.example/page.html", ui) is not None
    assert cross_origin("POST", "null", None, ui) is not None  # a sandboxed frame's form
    assert cross_origin("post", "http://127.0.0.1:8090", None, ui) is not None  # another port: another site
    assert cross_origin("DELETE", "http://localhost:8089", None, ui) is not None
    assert cross_origin("POST", "http://127.0.0.1:8089", None, ui) is None  # the UI's own page
    assert cross_origin("POST", None, "http://127.0.0.1:8089/?tab=charts", ui) is None
    assert cross_origin("POST", None, None, ui) is None  # no browser sent it: curl, a script
    assert cross_origin("GET", "https://evil.example", None, ui) is None  # reads change nothing


def test_a_ui_on_every_interface_without_login_is_warned_about_in_true_words():
    def opts(**kw):
        return argparse.Namespace(**{"headless": False, "web_login": False, "web_host": "", **kw})

    assert "every interface without --web-login" in exposure_warning(opts())
    assert "10.0.0.5" in exposure_warning(opts(web_host="10.0.0.5"))
    assert "at the host and with the files given at start" in exposure_warning(opts())
    quiet = (opts(web_host="127.0.0.1"), opts(web_host="::1"), opts(web_login=True), opts(headless=True))
    for options in quiet:
        assert exposure_warning(options) is None
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("*")


def test_a_server_url_on_loopback_is_on_this_machine():
    assert on_this_machine("http://localhost:8000/v1") and on_this_machine("http://[::1]:8000")
    assert on_this_machine("http://127.0.0.1:8000")
    assert not on_this_machine("http://10.0.0.5:8000") and not on_this_machine("https://gpu-box:8000")
    assert not on_this_machine("http://[bad") and not on_this_machine("not a url")
