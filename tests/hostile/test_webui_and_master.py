"""A network peer against a running Locust: the web UI cannot send the run's credentials elsewhere nor
choose its files, a UI open to the network is warned about, the master of --processes listens on
loopback only. Before: a swarm form with host=http://thief sent the API key and the metrics token there;
then, with the host sent twice (`host=http://127.0.0.1:THIEF&host=0`), the guard judged the values joined
(the real host) while Locust used the first: the key went to a listener whose URL was a prefix of the host."""

from __future__ import annotations

import json
import random
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.hostile import runs
from tests.hostile.server import chat_stream, metrics_text, models
from tests.support import free_port, wait_http

KEY = "sk-guarded-3b7e"
TOKEN = "metrics-guarded-9c1d"
LOAD = {"/v1/models": models(), "/v1/chat/completions": chat_stream(), "/metrics": metrics_text}


def swarm(url: str, *pairs: tuple[str, str], headers: dict | None = None, **fields: str) -> dict:
    """POST /swarm with `fields`, and `pairs` as given (a field may repeat)."""
    body = urllib.parse.urlencode([("user_count", "1"), ("spawn_rate", "1"), *fields.items(), *pairs])
    post = urllib.request.Request(url + "/swarm", body.encode(), headers or {})
    try:
        with urllib.request.urlopen(post, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"status": e.code, **json.loads(e.read())}


def stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    return out


def prefix_pair(hostile):
    """(legit, thief): the thief on port P, the legit server on 10 P + d, so the thief's URL is a text
    prefix of the legit one's."""
    for _ in range(100):
        port = random.randint(1025, 6553)
        try:
            thief = hostile(LOAD, port=port)
        except OSError:
            continue
        for digit in range(10):
            try:
                return hostile(LOAD, port=10 * port + digit), thief
            except OSError:
                pass
    raise RuntimeError("no free pair of prefix ports")


def test_the_web_ui_cannot_move_credentials_or_files(hostile, tmp_path):
    legit, thief = prefix_pair(hostile)
    assert legit.url.startswith(thief.url)
    port = free_port()
    proc = runs.start(tmp_path, legit.url, "--web-host", "127.0.0.1", "--web-port", str(port),
                      "--api-key", KEY, "--metrics-interval", "0.5",
                      env={"LOCUST_SPEC_METRICS_TOKEN": TOKEN})
    ui = f"http://127.0.0.1:{port}"
    try:
        wait_http(ui + "/", timeout=60, proc=proc)
        attempts = {
            "host": thief.url, "metrics_url": thief.url + "/metrics", "api_key": "sk-other",
            "response_format": "/etc/passwd", "prompts": "/etc/hostname",
            "csv_prefix": str(tmp_path / "else"),
        }
        for key, value in attempts.items():
            answer = swarm(ui, **{"host": legit.url, key: value})
            assert answer["success"] is False and "locust-spec:" in answer["message"], (key, answer)
        # Locust takes a repeated field's first value; joined, these read as the legit host.
        repeated = swarm(ui, ("host", thief.url), ("host", legit.url.removeprefix(thief.url)))
        assert repeated["success"] is False and "locust-spec:" in repeated["message"], repeated
        assert swarm(ui, ("host", legit.url), ("host", legit.url))["success"] is False  # ambiguous
        # any page the user opens can post this form; before: it started the run
        other_site = swarm(ui, host=legit.url, headers={"Origin": "https://evil.example"})
        assert other_site["status"] == 403 and "another site's page" in other_site["message"], other_site
        assert swarm(ui, host=legit.url)["success"] is True  # the form as the page sends it
        deadline = time.monotonic() + 60
        while len(legit.requests_to("/v1/chat/completions")) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        out = stop(proc)
    assert len(legit.requests_to("/v1/chat/completions")) >= 3
    assert legit.requests_to("/v1/chat/completions")[0].headers["Authorization"] == f"Bearer {KEY}"
    assert thief.seen == []
    assert not Path(str(tmp_path / "else") + "_requests.csv").exists()
    assert "without --web-login" not in out  # on loopback: no warning
    assert out.count("refused a web UI start") == len(attempts) + 2
    assert out.count("refused a web UI POST /swarm") == 1


def test_a_web_ui_on_every_interface_without_login_is_warned_about_at_start(hostile, tmp_path):
    server = hostile(LOAD)
    port = free_port()
    proc = runs.start(tmp_path, server.url, "--web-port", str(port))
    try:
        wait_http(f"http://127.0.0.1:{port}/", timeout=60, proc=proc)
    finally:
        out = stop(proc)
    assert "the web UI listens on every interface without --web-login" in out


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_master_of_processes_listens_on_loopback_only(hostile, tmp_path):
    server = hostile(LOAD)
    port = free_port()
    proc = runs.start(tmp_path, server.url, "--headless", "--processes", "2", "-u", "2", "-r", "2",
                      "-t", "60s", "--master-bind-port", str(port), "--master-port", str(port))
    try:
        deadline = time.monotonic() + 60
        while not server.requests_to("/v1/chat/completions") and time.monotonic() < deadline:
            time.sleep(0.2)  # the workers are connected and running
        addresses = _listening(port)
    finally:
        stop(proc)
    assert addresses == {"0100007F"}  # 127.0.0.1; before: 00000000 (every interface)
