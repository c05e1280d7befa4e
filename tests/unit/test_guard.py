"""The web UI guard's decisions (pure): which swarm forms would move credentials or files."""

from __future__ import annotations

import argparse

from locust_spec.guard import exposure_warning, is_loopback, refusal

OPTIONS = {"host": "http://vllm:8000", "api_key": "k", "metrics_url": None, "csv_prefix": "out/run",
           "response_format": "", "prompts": ["code", "json:2"], "max_tokens": 256, "num_users": 1}
SHOWN = {"prompts", "response_format", "max_tokens"}
HOSTS = frozenset({"http://vllm:8000"})


def form(**fields) -> dict[str, list[str]]:
    return {"user_count": ["4"], "spawn_rate": ["4"], **{k: v if isinstance(v, list) else [v]
                                                          for k, v in fields.items()}}


def test_the_form_as_the_ui_sends_it_passes():
    assert refusal(form(host="http://vllm:8000/", prompts="code,json:2", max_tokens="64",
                        response_format=""), OPTIONS, SHOWN, HOSTS) is None
    assert refusal(form(prompts=["code", "json:2"]), OPTIONS, SHOWN, HOSTS) is None


def test_another_host_is_refused_when_credentials_are_at_stake_only():
    assert "host is fixed at start" in refusal(form(host="http://thief:1"), OPTIONS, SHOWN, HOSTS)
    assert refusal(form(host="http://elsewhere:1"), OPTIONS, SHOWN, None) is None


def test_paths_and_options_the_form_does_not_show_are_refused():
    assert "response_format is fixed" in refusal(form(response_format="/etc/passwd"), OPTIONS, SHOWN, HOSTS)
    assert "prompts is fixed" in refusal(form(prompts="/etc/shadow"), OPTIONS, SHOWN, HOSTS)
    for key, value in (("csv_prefix", "/elsewhere"), ("api_key", "x"), ("metrics_url", "http://thief/")):
        assert refusal(form(**{key: value}), OPTIONS, SHOWN, HOSTS) == f"{key} cannot be set from the web UI"


def test_a_ui_on_every_interface_without_login_is_warned_about():
    def opts(**kw):
        return argparse.Namespace(**{"headless": False, "web_login": False, "web_host": "", **kw})

    assert "every interface without --web-login" in exposure_warning(opts())
    assert "10.0.0.5" in exposure_warning(opts(web_host="10.0.0.5"))
    quiet = (opts(web_host="127.0.0.1"), opts(web_host="::1"), opts(web_login=True), opts(headless=True))
    for options in quiet:
        assert exposure_warning(options) is None
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("*")
