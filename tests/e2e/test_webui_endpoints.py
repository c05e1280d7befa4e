"""The web UI's Speculation data over HTTP, from a `--processes 2` master merging its workers' histograms."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.support import BIN, CLIENT_CPU, REPO, free_port, own_master_port, pinned, wait_http

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
SECRET = "sk-endpoint-never-shown-51c"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def test_master_ui_serves_merged_exact_latency_acceptance_and_our_files(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    port = free_port()
    proc = subprocess.Popen(
        pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"), "--processes", "2",
                *own_master_port(), "--autostart", "-u", "4", "-r", "4", "-t", "90", "--autoquit", "0",
                "--web-host", "127.0.0.1", "--web-port", str(port), "--csv", "out/run", "--host", sim.url,
                "--prompts", "code", "--prompts", "quote", "--max-tokens", "48", "--metrics-interval", "0.5",
                "--api-key", SECRET],
               CLIENT_CPU),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc=proc)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = json.loads(get(url + "/spec/stats"))
            values = {r["measure"]: r["value"] for r in stats["speculation"]}
            merged = {r["cls"]: r for r in stats["latency"]}
            if values.get("acceptance rate") and merged.get("all", {}).get("n", 0) >= 4:
                break
            time.sleep(0.5)
        assert float(values["acceptance rate"]) > 0
        assert set(merged) >= {"code", "quote", "all"} and merged["all"]["n"] == merged["code"]["n"] + \
            merged["quote"]["n"]
        assert float(merged["all"]["ttft50"]) > 0 and float(merged["all"]["tpot99"]) > 0

        polled = json.loads(get(url + "/stats/requests"))
        assert [s["key"] for s in polled["extended_stats"]] == ["speculation", "spec-latency"]
        page = get(url + "/").decode()
        assert "Speculation" in page and "./spec/files/requests" in page

        rows = list(csv.DictReader(io.StringIO(get(url + "/spec/files/requests").decode())))
        assert rows and rows[0]["prompt_class"] in ("code", "quote")
        assert json.loads(get(url + "/spec/files/latency"))["schema"] == 1
        live_summary = json.loads(get(url + "/spec/files/summary"))
        assert live_summary["schema"] == 2 and live_summary["server"]["acceptance_rate"] > 0
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(url + "/spec/files/..%2Fetc")
        assert missing.value.code == 404
        for text in (page, json.dumps(stats), json.dumps(polled)):
            assert SECRET not in text
        proc.terminate()  # the run lasts until the checks are done, however slow the machine
        proc.wait(40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    log = (tmp_path / "locust.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    summary = json.loads((tmp_path / "out" / "run_summary.json").read_text())
    assert summary["client"]["generators"]["processes"] == 2
    assert summary["client"]["generators"]["requests"] == summary["client"]["requests"] > 0


def test_prompt_fields_changed_in_the_web_ui_reach_every_worker(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05")
    # no max_tokens of their own (built-ins have); given at start, as the web UI may name only such files
    sets = [tmp_path / "mine.jsonl", tmp_path / "yours.jsonl"]
    for path in sets:
        path.write_text("".join(f'{{"prompt": "Write the number {i} in words, then count to ten."}}\n'
                                for i in range(8)))
    port, master_port = free_port(), free_port()
    # its own master port (the default 5557 is shared by every Locust here) and session (a killed master
    # must take its worker children with it)
    proc = subprocess.Popen(
        pinned([str(BIN / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"), "--processes", "2",
                "--master-bind-port", str(master_port), "--master-port", str(master_port),
                "--web-host", "127.0.0.1", "--web-port", str(port), "--csv", "out/run", "--host", sim.url,
                "--prompts", "code", *(a for path in sets for a in ("--prompts", str(path))),
                "--max-tokens", "64"], CLIENT_CPU),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("w"),
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc=proc)
        # a start posted before both --processes workers have connected would spawn no user
        deadline = time.monotonic() + 60
        while len(json.loads(get(url + "/stats/requests")).get("workers", [])) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the workers never connected"
            time.sleep(0.5)
        form = {"user_count": "2", "spawn_rate": "2", "host": sim.url, "prompts": ",".join(map(str, sets)),
                "max_tokens": "5", "seed": "3"}
        swarm = urllib.request.Request(url + "/swarm", data=urllib.parse.urlencode(form).encode())
        started = json.loads(urllib.request.urlopen(swarm, timeout=10).read())
        assert started["success"], started
        deadline = time.monotonic() + 60
        rows: list[dict] = []
        while len([r for r in rows if not r["error"]]) < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
            rows = list(csv.DictReader(io.StringIO(get(url + "/spec/files/requests").decode())))
        ok = [r for r in rows if not r["error"]]
        assert len(ok) >= 6
        assert {r["prompt_class"] for r in rows} == {"mine", "yours"}
        assert all(int(r["output_tokens"]) <= 5 for r in ok)
        proc.terminate()
        proc.wait(40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert "Traceback" not in (tmp_path / "locust.log").read_text()
