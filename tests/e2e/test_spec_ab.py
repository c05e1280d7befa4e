"""spec-ab end to end: real spec-sim servers and headless Locust sweeps, the verdict in the run folder."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import psutil
import pytest

from locust_spec.ab.cli import DEMO_PROMPTS
from locust_spec.core.design import READY_MARGIN_S
from tests.support import BIN, REPO

SPEC_AB = str(BIN / "spec-ab")
ARM_FILES = ("_requests.csv", "_latency.json", "_server_metrics.csv", "_run.json", "_stats.csv",
             "_stats_history.csv", "_failures.csv", "_exceptions.csv")
def _short_demo_prompts(tmp: Path, max_tokens: int = 80) -> list[str]:
    """spec-ab's demo mix (`ab.DEMO_PROMPTS`) with shorter answers: enough requests at one user for a
    verdict (10, and 1000 output tokens, after the warm-up) within short stages."""
    args = []
    for spec in DEMO_PROMPTS:
        name, weight = spec.split(":")
        path = tmp / f"{name}.jsonl"
        with path.open("w") as out:
            for line in (REPO / "prompts" / f"{name}.jsonl").read_text().splitlines():
                out.write(json.dumps({**json.loads(line), "max_tokens": max_tokens}) + "\n")
        args += ["--prompts", f"{path}:{weight}"]
    return args


def _fast(tmp: Path) -> list[str]:
    """At the modelled GPU's own pace: a faster clock makes 64 streams outrun one client core, and a
    load generator that cannot keep up favours the arm that sends fewer chunks (speculation)."""
    return [*_short_demo_prompts(tmp), "--ignore-eos", "--time-scale", "1", "--seed", "3"]


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_spec_ab_on_simulators_ships_at_one_user_and_not_at_64_with_every_file(tmp_path):
    out = tmp_path / "run"
    # interleaved (the default): 20 s a level in 8 blocks of 2.5 s, 4 block pairs; over 4 pairs a TPOT p90
    # interval is too wide to rule out a 5% tail loss, so this short run declares a 30% margin (the option's
    # way into the verdict is part of what it checks)
    cmd = [SPEC_AB, "--out", str(out), "--levels", "1,64", "--stage-time", "10s", "--warmup", "1.5s",
           "--block-time", "2.5s", "--no-prime", "--margin", "30", "--gpu-cost-per-hour", "2.5",
           *_fast(tmp_path)]  # (priming: test_prime, the Compose test)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["design"] == {"kind": "interleaved", "block_s": 2.5, "blocks_per_level": 8, "arms": 2,
                                 "repeats": 1, "warmup_s": 1.5}
    assert verdict["decision_rule"]["margin_pct"] == 30.0 and "decision rule (latency)" in done.stdout
    by_users = {level["users"]: level for level in verdict["levels"]}
    assert by_users[1]["metrics"]["tpot_p50_ms"]["units"]["unit"] == "block pairs"
    assert by_users[1]["verdict"] == "ship", by_users[1]["reasons"]
    assert by_users[64]["verdict"] != "ship", by_users[64]["reasons"]
    assert by_users[64]["acceptance"] > 0.3, "the candidate speculated"
    assert "VERDICT" in done.stdout.upper() and verdict["summary"] in done.stdout
    # priced, and the simulators' modelled GPU power scraped beside their counters (docs/cost.md)
    assert verdict["pricing"] == {"usd_per_gpu_hour": 2.5, "gpus": {"baseline": 1.0, "candidate": 1.0}}
    assert verdict["power"]["candidate"]["source"] == "energy counter"
    for level in verdict["levels"]:
        for arm in ("baseline", "candidate"):
            tok_s = level["metrics"]["output_tok_s"][arm]
            assert level["cost_per_mtok_usd"][arm] == pytest.approx(2.5 / 3600 / tok_s * 1e6, rel=0.005)
            # a100: idle to busy (the scrapes' timestamps are the midpoints of their round trips)
            assert 60 * 0.9 < level["power_w"][arm] <= 400 * 1.05, level["power_w"]
            assert level["joules_per_token"][arm] == pytest.approx(level["power_w"][arm] / tok_s, rel=0.02)
    assert "cost per million output tokens from $" in verdict["summary"]

    for name in ("verdict.json", "report.html", "report.md"):
        assert (out / name).stat().st_size > 0, name
    report = (out / "report.html").read_text()
    # the candidate simulator serves per-request stats: the report gives the verdict per task (prompt class)
    assert "<h2>Per task</h2>" in report and "<td>quote</td><td>1</td>" in report
    assert "alt='Per task: acceptance, TPOT and throughput, speculation on vs off'" in report
    assert {t["task"] for t in verdict["tasks"]} == {"quote", "code", "boilerplate", "chat", "creative"}
    assert "not drawn" not in report
    # the answer first: the headline and every level's verdict, what was measured after the levels
    assert (report.index("<table class='levels'>") < report.index("<h2>1 user:")
            < report.index("What was measured"))
    # the baseline's self-check (answered twice before the sweep) is the answer gate's measured noise floor
    assert "baseline: self-check: " in done.stdout and (out / "baseline" / "self_check.json").is_file()
    assert by_users[1]["answers"]["noise_floor_from"] is not None, by_users[1]["answers"]
    assert by_users[1]["answers"]["status"] == "same", by_users[1]["answers"]
    assert verdict["speculation"]["candidate"]["inferred"]["k"] >= 1 and verdict["differences"] == []
    for arm in ("baseline", "candidate"):
        for suffix in (*ARM_FILES, "_design.json"):
            assert (out / arm / f"r0{suffix}").is_file(), f"{arm}/r0{suffix} missing"
        # Each arm's Locust idles through the other's blocks (at 1 user, its one request done): its cost per
        # chunk counts only loaded time.
        spent = json.loads((out / arm / "r0_summary.json").read_text())["client"]["generators"]["by_process"]
        assert all(0 < p["budget_by_level"]["1"]["loaded_s"] < p["budget_by_level"]["1"]["wall_s"]
                   for p in spent.values()), spent
    designs = [json.loads((out / arm / "r0_design.json").read_text()) for arm in ("baseline", "candidate")]
    assert [d["slot"] for d in designs] == [0, 1] and designs[0]["clock_unix_s"] == designs[1]["clock_unix_s"]
    # the clock started once both processes were up (each logs its start when its imports are done), not
    # after a lead sized for the slowest machine
    up = max(_logged_start(out / arm / "r0.log") for arm in ("baseline", "candidate"))
    assert 0 < designs[0]["clock_unix_s"] - up < READY_MARGIN_S + 2, designs[0]["clock_unix_s"] - up
    # both arms started each block pair on the same prompts: their first prompt in every block agrees
    firsts = []
    for arm, design in zip(("baseline", "candidate"), designs, strict=True):
        rows = pd.read_csv(out / arm / "r0_requests.csv")
        rows = rows[rows["start_unix_s"] < design["clock_unix_s"] + design["stage_s"]]  # the first level
        block = ((rows["start_unix_s"] - design["clock_unix_s"]) // design["block_s"]).astype(int)
        firsts.append(rows.groupby(block // 2)["prompt_id"].first())
    assert (firsts[0] == firsts[1]).mean() >= 0.75, firsts
    assert "speculation ngram" in (out / "sim-candidate.log").read_text()
    assert "speculation off" in (out / "sim-baseline.log").read_text()


def _logged_start(log: Path) -> float:
    """When Locust logged its start (its locustfile imported), in unix seconds (its log is in local time)."""
    line = next(line for line in log.read_text().splitlines() if "Starting Locust" in line)
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def test_sigint_keeps_the_first_repeat_and_resume_measures_only_the_second(tmp_path):
    out = tmp_path / "run"
    # 4 s a session (8 blocks of 0.5 s): each of the three sessions (r0, r1 cut, r1 resumed) costs its time
    cmd = [SPEC_AB, "--out", str(out), "--levels", "1", "--stage-time", "2s", "--warmup", "0.3s",
           "--block-time", "1s", "--repeats", "2", "--no-prime", *_fast(tmp_path)]
    # A shell starts background jobs with SIGINT ignored and Python keeps that: give spec-ab a Ctrl-C it can
    # hear, however this suite was launched.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        second = out / "candidate" / "r1.log"
        deadline = time.monotonic() + 90
        while not second.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the second repeat never started"
            time.sleep(0.2)
        first = {arm: _digest(out / arm) for arm in ("baseline", "candidate")}
        time.sleep(2)
        children = psutil.Process(proc.pid).children(recursive=True)
        sims = [c.pid for c in children if "locust_spec.sim" in " ".join(c.cmdline())]
        locusts = [c.pid for c in children if any(a.endswith("locust") for a in c.cmdline())]
        assert len(sims) == 2 and locusts, [c.cmdline() for c in children]

        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 130, output
    assert output.strip().splitlines()[-1].startswith("spec-ab: interrupted"), output
    assert "with --resume measures the rest" in output
    assert "Traceback" not in output
    for pid in sims + locusts:
        assert not psutil.pid_exists(pid), f"pid {pid} outlived spec-ab"
    for arm in ("baseline", "candidate"):
        kept = {name: digest for name, digest in first[arm].items() if name.startswith("r0")}
        assert {"r0_requests.csv", "r0_latency.json", "r0_server_metrics.csv", "r0_design.json"} <= set(kept)
        assert {n: d for n, d in _digest(out / arm).items() if n.startswith("r0")} == kept
        assert not list((out / arm).glob("r1_*")), "the unfinished repeat's files are discarded"
    assert not (out / "verdict.json").exists()
    interrupted = _files(out)

    # Again without --resume: refused (tests/unit/test_keep.py); with --resume only the second repeat runs.
    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "--resume: kept baseline+candidate r0" in resumed.stdout and "1 of 2 session(s)" in resumed.stdout
    assert resumed.stdout.count(" done in ") == 1, "only the second repeat is measured"
    first_repeat = {k: v for k, v in interrupted.items() if "/r0" in k}
    assert {k: v for k, v in _files(out).items() if "/r0" in k} == first_repeat, "kept as it was"
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["design"]["repeats"] == 2
    for arm in ("baseline", "candidate"):
        runs = [json.loads((out / arm / f"r{i}_run.json").read_text())["run_id"] for i in (0, 1)]
        assert len(set(runs)) == 2 and [p["run"]["run_id"] for p in verdict["provenance"][arm]] == runs


def test_the_aa_self_test_on_a_rate_ladder_interleaves_the_arrivals_and_reports_the_noise_floor(tmp_path):
    # One run covers the A/A self-test and open loop under the interleaved design: each arm's arrivals
    # fall in its own blocks only, and its ledger owes it only those.
    out = tmp_path / "aa"
    cmd = [SPEC_AB, "--aa", "--out", str(out), "--rates", "4", "--max-concurrency", "16",
           "--stage-time", "5s", "--warmup", "0.5s", "--block-time", "1.25s", "--no-prime", *_fast(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "one spec-sim server" in done.stdout and "the baseline answers" in done.stdout
    report = json.loads((out / "aa.json").read_text())
    assert report["intervals_excluding_zero"]["levels"]["of"] == 4 and report["levels_shipped"] == []
    assert report["compared"] == 4 + report["intervals_excluding_zero"]["tasks"]["of"]  # and every task's
    assert set(report["noise_floor_pct"]["4/s"]) == {"tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms",
                                                     "output_tok_s"}
    assert f"A/A self-test: {report['claimed']} of {report['compared']} compared quantities" in done.stdout
    assert not (out / "sim-candidate.log").exists(), "one server serves both arms"

    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["axis"] == "rate" and verdict["design"]["kind"] == "interleaved"
    (level,) = verdict["levels"]
    assert level["rate"] == 4.0 and level["metrics"]["tpot_p50_ms"]["units"]["unit"] == "block pairs"
    for arm in ("baseline", "candidate"):
        design = json.loads((out / arm / "r0_design.json").read_text())
        assert design["rates"] == [4.0] and design["kind"] == "interleaved"
        clock, block_s = design["clock_unix_s"], design["block_s"]
        rows = pd.read_csv(out / arm / "r0_requests.csv")
        # The file keeps intended times to the ms, and an arrival may be due at its block's very start.
        ours = [any(design["order"][int((t - clock + d) // block_s)] == design["slot"] for d in (-1e-3, 1e-3))
                for t in rows["intended_unix_s"]]
        assert len(rows) and all(ours), "only in its blocks"
        account = json.loads((out / arm / "r0_summary.json").read_text())["arrivals"]["4/s"]
        assert account["window_s"] == pytest.approx(4 * block_s - design["warmup_s"], abs=0.01)
        assert account["missed"] == 0 and level["arrivals"][arm]["missed"] == 0
