"""Secrets never leave the process: the API key (--api-key or $OPENAI_API_KEY), the /metrics bearer token and
credentials in a --metrics-url appear in no file, log line, web UI answer or spec-verdict report; text that
came from prompts or the server is escaped in the HTML report."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.chat_runs import Run, finish, locust_args, start_sims, stop_all
from tests.support import BIN, CLIENT_CPU, free_port, pinned, run_locust

KEY_FLAG = "sk-flag-4f9c2a7e1b-never-written"
KEY_ENV = "sk-env-83b1d0c6aa-never-written"
METRICS_TOKEN = "mt-tok-5e7a19c2-never-written"
URL_PASSWORD = "pw-in-url-0c4d9b"
URL_QUERY_TOKEN = "q-tok-77e1a3f0"
SECRETS = (KEY_FLAG, KEY_ENV, METRICS_TOKEN, URL_PASSWORD, URL_QUERY_TOKEN)
MODEL = "<script>alert('model')</script>"
CLASS = "<script>alert('class')</script>"
PROMPTS = json.dumps({"id": "<img src=x onerror=alert(1)>", "class": CLASS,
                      "prompt": "<script>alert('prompt')</script> def f(x): return x"}) + "\n"
WEB_PATHS = ("/", "/stats/requests", "/stats/requests/csv", "/stats/failures/csv", "/exceptions",
             "/stats/report", "/spec/stats", "/spec/files/requests", "/spec/files/latency",
             "/spec/files/summary", "/spec/files/server_metrics", "/spec/files/run")


@dataclass
class Outputs:
    tmp: Path
    texts: dict[str, str] = field(default_factory=dict)  # what -> text, for everything a run showed


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: " + e.read().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Iterator[Outputs]:
    tmp = tmp_path_factory.mktemp("secrets")
    out = Outputs(tmp)
    sims = start_sims(tmp, {"sim": ("--time-scale", "0.1", "--served-model-name", MODEL)})
    url = sims["sim"].url
    prompts = tmp / "prompts.jsonl"
    try:
        userinfo = url.replace("http://", f"http://scraper:{URL_PASSWORD}@")
        with_secrets = f"{userinfo}/metrics?t={URL_QUERY_TOKEN}"
        # (a URL that answers 404 would stop the run at start: tests/hostile/test_wrong_at_start.py)
        metrics = ("--metrics-url", url + "/metrics", "--metrics-url", with_secrets, "--metrics-token",
                   METRICS_TOKEN)
        # A: headless, the key from --api-key
        args = locust_args(tmp, url, "--api-key", KEY_FLAG, *metrics, users=2, seconds=3, name="flag")
        args[args.index("--prompts") + 1] = str(prompts)
        prompts.write_text(PROMPTS)
        a = run_locust(args, cwd=tmp)
        out.texts["A stdout+stderr"] = a.stdout + a.stderr
        # B: with the web UI, the key from $OPENAI_API_KEY; every page and download fetched mid-run
        port = free_port()
        args = locust_args(tmp, url, *metrics, users=2, seconds=4, name="env")
        args[args.index("--prompts") + 1] = str(prompts)
        args.remove("--headless")
        args += ["--autostart", "--autoquit", "1", "--web-host", "127.0.0.1", "--web-port", str(port)]
        cmd = pinned([str(BIN / "locust"), *args], CLIENT_CPU)
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "OPENAI_API_KEY": KEY_ENV})
        time.sleep(3)
        for path in WEB_PATHS:
            out.texts[f"web {path}"] = _get(f"http://127.0.0.1:{port}{path}")
        b: Run = finish(proc, tmp, name="env")
        out.texts["B stdout+stderr"] = b.output
        # the verdict on A vs B in every format
        reports = [tmp / f"report.{suffix}" for suffix in ("html", "json", "md", "txt")]
        # --force: A and B ran for different times (a load the comparability gate refuses); the reports'
        # first lines then name what differs, and those lines must leak nothing either
        verdict = subprocess.run([str(BIN / "spec-verdict"), str(tmp / "flag"), str(tmp / "env"), "--force",
                                  *[x for r in reports for x in ("-o", str(r))]],
                                 capture_output=True, text=True, timeout=60)
        out.texts["spec-verdict stdout+stderr"] = verdict.stdout + verdict.stderr
    finally:
        stop_all(sims.values())
    for path in sorted(tmp.rglob("*")):
        if path.is_file() and path != prompts:
            out.texts[str(path.relative_to(tmp))] = path.read_bytes().decode("utf-8", "replace")
    yield out


def test_the_runs_produced_what_is_searched(outputs):
    names = set(outputs.texts)
    for prefix in ("flag", "env"):
        for suffix in ("requests.csv", "latency.json", "server_metrics.csv", "summary.json", "stats.csv",
                       "run.json"):
            assert f"{prefix}_{suffix}" in names
    assert {"report.html", "report.json", "report.md", "report.txt"} <= names
    rows = list(csv.DictReader(io.StringIO(outputs.texts["flag_requests.csv"])))
    assert len(rows) > 5 and sum(1 for r in rows if not r["error"]) > 3  # requests succeeded
    # the run's record holds its command line, the key's option and the metrics URL in it redacted
    command = json.loads(outputs.texts["flag_run.json"])["command"]
    assert "--api-key" in command and "--metrics-token" in command
    assert json.loads(outputs.texts["web /spec/files/run"])["run_id"]  # the web UI's download of it
    assert "Speculation" in outputs.texts["web /"] or "extended_tabs" in outputs.texts["web /"]
    assert outputs.texts["web /spec/stats"].startswith("{")


def test_no_secret_in_any_output(outputs):
    leaks = {what: _leaks(text) for what, text in outputs.texts.items() if _leaks(text)}
    assert leaks == {}


def test_html_report_escapes_text_from_prompts_and_server(outputs):
    html = outputs.texts["report.html"]
    assert "&lt;script&gt;alert(" in html  # the server's model name or the prompts' class, shown as text
    assert "<script" not in html
    assert CLASS in outputs.texts["flag_requests.csv"]  # hostile text did reach our files
    assert MODEL in outputs.texts["flag_server_metrics.csv"]
