"""Distributed runs: a real Locust master and two workers against spec-sim on loopback; the master's files."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

from locust_spec.core.prompts import PromptSampler, stream_seed
from locust_spec.recording.histograms import new_histogram, percentiles_us, record_ms
from tests.e2e.chat_runs import assert_level_table
from tests.support import BIN, CLIENT_CPU, REPO, free_port, pinned

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
USERS = 8
RUN_S = 6
INTERVAL_S = 1.0
LOCUSTFILE = str(REPO / "locustfiles" / "chat.py")


def run_distributed(tmp_path: Path, host: str, stop_worker_after_s: float | None = None, users: int = USERS,
                    load: tuple[str, ...] = ("--prompts", "code", "--prompts", "json", "--max-tokens", "48"),
                    ) -> subprocess.CompletedProcess:
    """`locust --master --expect-workers 2` plus two plain `--worker` processes (the load options go to the
    master only); returns the master's result.

    With `stop_worker_after_s`, the first worker gets SIGTERM that long after all users were spawned."""
    port = free_port()
    common = ["-f", LOCUSTFILE]
    master = subprocess.Popen(
        pinned([str(BIN / "locust"), *common, "--headless", "--master", "--expect-workers", "2",
                "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "-u", str(users), "-r", str(users), "-t", f"{RUN_S}s", "--csv", "out/run", "--host", host,
                *load, "--metrics-interval", str(INTERVAL_S)], CLIENT_CPU),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "master.log").open("w"))
    workers = [
        subprocess.Popen(
            pinned([str(BIN / "locust"), *common, "--worker", "--master-host", "127.0.0.1",
                    "--master-port", str(port)], CLIENT_CPU),
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"worker{i}.log").open("w"))
        for i in range(2)
    ]
    try:
        if stop_worker_after_s is not None:
            deadline = time.monotonic() + 30
            # a loaded machine can make Locust give up waiting for the workers' reports: spawned anyway
            while not any(line in (tmp_path / "master.log").read_text()
                          for line in ("All users spawned", "Spawning is complete")):
                assert time.monotonic() < deadline and master.poll() is None, "the test did not start"
                time.sleep(0.1)
            time.sleep(stop_worker_after_s)
            workers[0].send_signal(signal.SIGTERM)
            workers[0].wait(15)
        master.wait(60)
        for w in workers:
            w.wait(15)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
    return subprocess.CompletedProcess(master.args, master.returncode, "",
                                       (tmp_path / "master.log").read_text())


def locust_e2e_count(stats_csv: Path) -> int:
    """Locust's own count of streams: its E2E rows' request counts (failures included) and those cut off
    at stop (Interrupted)."""
    return sum(int(r["Request Count"]) for r in csv.DictReader(stats_csv.open())
               if r["Type"] in ("E2E", "Interrupted"))


def test_master_with_two_workers_writes_each_request_once_with_exact_merged_percentiles(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    result = run_distributed(tmp_path, sim.url)
    out = tmp_path / "out"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for i in range(2):
        assert "Traceback" not in (tmp_path / f"worker{i}.log").read_text()

    rows = list(csv.DictReader((out / "run_requests.csv").open()))
    assert len(rows) >= 20
    assert len(rows) == locust_e2e_count(out / "run_stats.csv")
    aggregated = [r for r in csv.DictReader((out / "run_stats.csv").open()) if r["Name"] == "Aggregated"]
    assert [int(r["Request Count"]) for r in aggregated] == [len(rows)]  # each request once, from the workers
    assert {r["level_users"] for r in rows} == {str(USERS)}  # workers knew the total from the start
    assert all(r["error"].startswith("interrupted") for r in rows if r["error"])

    summary = json.loads((out / "run_summary.json").read_text())
    workers = summary["client"]["generators"]["by_process"]
    assert len(workers) == 2 and all(w["requests"] > 0 for w in workers.values())
    assert sum(w["requests"] for w in workers.values()) == len(rows)
    generators = summary["client"]["generators"]
    # each worker's lag per level, merged on the master: samples add up, the worst lag stands
    at_level = generators["by_level"][str(USERS)]
    assert at_level["samples"] == sum(w["by_level"][str(USERS)]["samples"] for w in workers.values()) > 0
    assert at_level["max_lag_ms"] == max(w["by_level"][str(USERS)]["max_lag_ms"] for w in workers.values())
    assert sum(lv["samples"] for lv in generators["by_level"].values()) == generators["loop_lag_samples"]

    ok = [r for r in rows if not r["error"]]
    latency = json.loads((out / "run_latency.json").read_text())
    for metric in ("ttft", "tpot", "e2e"):
        pooled = new_histogram()
        record_ms(pooled, [float(r[f"{metric}_ms"]) for r in ok if r[f"{metric}_ms"]])
        p50, p99 = percentiles_us(pooled, (50.0, 99.0))
        merged = latency["metrics"][metric]["all"]
        assert merged["count"] == pooled.total_count
        assert (merged["p50"], merged["p99"]) == (p50 / 1000.0, p99 / 1000.0), metric
    assert latency["levels"][str(USERS)]["ttft"]["all"]["count"] == len(ok)
    assert all(r["output_hash"] and r["output_marks"] for r in ok)  # the answers came through the batches
    record = json.loads((out / "run_run.json").read_text())  # written by the master alone
    assert record["machine"]["runner"] == "master" and record["machine"]["workers"] == 2
    assert record["server"]["models"][0]["id"] == "sim-8b" and record["ended_unix_s"] is not None

    scrapes = {r["timestamp_unix_s"] for r in csv.DictReader((out / "run_server_metrics.csv").open())}
    # start, the level, every interval, stop: about RUN_S / INTERVAL_S + 3; three scraping processes would
    # have made three times as many
    assert 3 <= len(scrapes) <= RUN_S / INTERVAL_S + 5
    assert summary["server"]["acceptance_rate"] > 0
    # the master prints the table of every worker's requests at the end
    (level,) = assert_level_table(result.stderr, rows).values()
    assert 0 < float(level["acceptance"]) <= 1 and level["behind"].endswith("%")
    assert summary["crosscheck"]["finished requests"]["warning"] is None
    assert summary["crosscheck"]["output tokens"]["warning"] is None


def test_a_worker_stopped_mid_run_sends_its_last_requests_before_it_goes(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05", "--speculative-config", NGRAM)
    result = run_distributed(tmp_path, sim.url, stop_worker_after_s=2.0)
    out = tmp_path / "out"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    rows = list(csv.DictReader((out / "run_requests.csv").open()))
    summary = json.loads((out / "run_summary.json").read_text())
    workers = summary["client"]["generators"]["by_process"]
    assert len(workers) == 2 and all(w["requests"] > 0 for w in workers.values())
    # every request a worker measured, the stopped one's interrupted requests too, has its row
    assert sum(w["requests"] for w in workers.values()) == len(rows)
    assert not any("lost mid-run" in w or "no row" in w for w in summary["warnings"]), summary["warnings"]
    assert summary["lost_workers"] == []  # it sent its final batch: stopped, not lost
    # Locust's own stats miss what the stopped worker did after its last 3-second report; our rows do not
    assert len(rows) >= locust_e2e_count(out / "run_stats.csv")
    latency = json.loads((out / "run_latency.json").read_text())
    assert latency["metrics"]["ttft"]["all"]["count"] == sum(1 for r in rows if not r["error"])


def interleaves(merged: list[str], first: list[str], second: list[str]) -> bool:
    """Whether `merged` is `first` and `second` interleaved, each keeping its own order."""
    reachable = {(0, 0)}  # (taken from first, taken from second)
    for item in merged:
        reachable = {nxt for i, j in reachable for nxt, ok in (((i + 1, j), first[i:i + 1] == [item]),
                                                               ((i, j + 1), second[j:j + 1] == [item])) if ok}
    return (len(first), len(second)) in reachable


def test_plain_workers_sample_the_masters_prompts_each_its_own_reproducible_stream(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05")
    # one user per worker: each worker's rows, in the order they reach the master's file, are its stream
    result = run_distributed(tmp_path, sim.url, users=2, load=("--prompts", "code", "--seed", "7",
                                                               "--max-tokens", "16"))
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "out" / "run_requests.csv").open()))
    assert len(rows) >= 6
    assert {r["prompt_class"] for r in rows} == {"code"}
    workers = json.loads((tmp_path / "out" / "run_summary.json").read_text())["client"]["generators"]
    counts = sorted(w["requests"] for w in workers["by_process"].values())
    assert len(counts) == 2 and counts[0] > 0 and sum(counts) == len(rows)

    def stream(worker_index: int, n: int) -> list[str]:
        sampler = PromptSampler(["code"], stream_seed(7, worker_index))
        return [sampler.next().id for _ in range(n)]

    ids = [r["prompt_id"] for r in rows]
    # Locust numbers workers in the order they connect: either may be worker 0
    splits = [(stream(0, a), stream(1, b)) for a, b in {(counts[0], counts[1]), (counts[1], counts[0])}]
    assert any(interleaves(ids, first, second) for first, second in splits), ids
    assert stream(0, counts[0]) != stream(1, counts[0])
