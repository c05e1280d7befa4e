"""The live page's data over HTTP (no browser): a ladder on a `--processes 2` master, its level changes,
client and server points while it runs, the final picture after it stops, and the link on Locust's page."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from tests.support import BIN, CLIENT_CPU, REPO, free_port, own_master_port, pinned, wait_http

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
SECRET = "sk-live-never-shown-7d2"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def column(data: dict, series: str, key: str) -> list:
    block = data[series]
    return [p[block["fields"].index(key)] for p in block["points"]]


def test_live_data_follows_a_distributed_ladder_and_keeps_the_final_picture(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    port = free_port()
    proc = subprocess.Popen(
        pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "sweep.py"), "--processes", "2",
                *own_master_port(), "--autostart", "--levels", "1,4", "--stage-time", "8s", "--warmup", "1s",
                "--web-host", "127.0.0.1", "--web-port", str(port), "--host", sim.url, "--prompts", "quote",
                "--max-tokens", "48", "--metrics-interval", "0.5", "--api-key", SECRET], CLIENT_CPU),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc=proc)
        deadline = time.monotonic() + 90
        running_seen = False
        while time.monotonic() < deadline:
            data = json.loads(get(url + "/spec/live.json"))
            running_seen = running_seen or (data["state"] == "running" and len(data["client"]["points"]) > 1)
            if data["state"] == "stopped":
                break
            time.sleep(0.5)
        assert running_seen and data["state"] == "stopped", data["state"]
        assert [users for _, users in data["levels"]] == [1, 4]
        assert data["started"] <= data["levels"][0][0] < data["levels"][1][0] <= data["stopped"]
        assert column(data, "client", "t") == sorted(column(data, "client", "t"))
        assert sum(1 for v in column(data, "client", "tpot_p50") if v) >= 3
        assert max(column(data, "client", "users")) == 4
        acceptance = [a for a in column(data, "server", "acceptance") if a is not None]
        assert acceptance and all(0 < a <= 1 for a in acceptance)
        assert max(r for r in column(data, "server", "running") if r is not None) > 1
        assert any(len(p) == 4 for p in column(data, "server", "per_position"))
        # the header's acceptance is the Speculation tab's for the same level, over one window
        tab = {r["measure"]: r["value"] for r in json.loads(get(url + "/spec/stats"))["speculation"]}
        assert data["level_acceptance"] is not None
        assert tab["acceptance at 4 users"] == f"{data['level_acceptance']:.4f}"

        time.sleep(2.5)  # a tick later, nothing is added or lost
        again = json.loads(get(url + "/spec/live.json"))
        assert (again["client"], again["server"], again["levels"]) == \
            (data["client"], data["server"], data["levels"])

        page, script = get(url + "/spec/live").decode(), get(url + "/spec/live.js").decode()
        assert "live.js" in page and "live.json" in script
        for text in (page, script):
            assert "http://" not in text and "https://" not in text  # nothing fetched from elsewhere
        index = get(url + "/").decode()
        assert '"/spec/live"' in index  # the script that turns the Speculation tab's cell into a link
        for text in (index, json.dumps(again)):
            assert SECRET not in text
    finally:
        proc.kill()
        proc.wait(10)
