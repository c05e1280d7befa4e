"""spec-ab's children never carry a credential in their command line (visible to anyone on the machine
through `ps`): an arm's /metrics URL with user:password reaches the child through its environment, and
the scrape still authenticates. Before: `--metrics-url http://user:pw@...` was in Locust's argv."""

from __future__ import annotations

import base64
import subprocess
import threading
from pathlib import Path

from tests.hostile.server import chat_stream, metrics_text, models
from tests.support import BIN

PASSWORD = "pw-argv-6e2b"
LOAD = {"/v1/models": models(), "/v1/chat/completions": chat_stream()}


def _argv_holding(secret: str, stop: threading.Event, found: list[str]) -> None:
    while not stop.wait(0.1):
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if secret in text:
                found.append(text)


def test_an_arms_metrics_credentials_reach_its_locust_through_the_environment(hostile, tmp_path):
    baseline, candidate, metrics = hostile(LOAD), hostile(LOAD), hostile({"/metrics": metrics_text})
    url = metrics.url.replace("http://", f"http://scraper:{PASSWORD}@") + "/metrics"
    stop, found = threading.Event(), []
    watcher = threading.Thread(target=_argv_holding, args=(PASSWORD, stop, found), daemon=True)
    watcher.start()
    try:
        result = subprocess.run(
            [str(BIN / "spec-ab"), "--baseline", baseline.url, "--candidate", candidate.url,
             "--metrics-url-candidate", url, "--levels", "1", "--stage-time", "3s", "--warmup", "0",
             "--no-prime", "--skip-preflight", "--prompts", "code", "--max-tokens", "8",
             "--out", str(tmp_path / "ab")],
            capture_output=True, text=True, timeout=300,
        )
    finally:
        stop.set()
        watcher.join()
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out[-3000:]
    assert Path(tmp_path / "ab" / "candidate" / "r0_requests.csv").is_file(), out[-3000:]
    scraped = metrics.requests_to("/metrics")
    assert scraped, out[-3000:]
    assert base64.b64decode(scraped[0].headers["Authorization"].removeprefix("Basic ")) == \
        f"scraper:{PASSWORD}".encode()
    # spec-ab's own command line holds it (as the user typed it); its Locust children's never do
    assert any("spec-ab" in cmd for cmd in found)
    assert [cmd for cmd in found if "-m locust" in cmd] == []
