"""spec-ab against spec-sim on loopback: the preflight stops a doomed A/B before any sweep with one line per
problem naming the fix; a run that ends bad exits non-zero; progress shows while an arm sweeps."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from locust_spec.ab import outdir
from locust_spec.ab.cli import main as spec_ab_main
from tests.support import BIN, REPO, free_port

SPEC_AB = str(BIN / "spec-ab")
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
SHORT = ["--levels", "1", "--stage-time", "6s", "--warmup", "1s"]


BASELINE = ("--time-scale", "0.2")
CANDIDATE = (*BASELINE, "--speculative-config", NGRAM)
SMALL = ("--max-model-len", "512", "--time-scale", "0.2")


@pytest.fixture
def arms(shared_sim):
    """A baseline (no speculation) and a candidate (n-gram) spec-sim, fast clock: the same two for every test
    of this file (a preflight reads which counters a server has, and whether they move while it looks)."""
    return shared_sim(*BASELINE), shared_sim(*CANDIDATE)


def _spec_ab(out: Path, baseline: str, candidate: str, *args: str, timeout: float = 120):
    cmd = [SPEC_AB, "--baseline", baseline, "--candidate", candidate, "--out", str(out), *SHORT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _failed_preflight(done: subprocess.CompletedProcess, out: Path) -> list[str]:
    """The preflight lines of a run refused before any sweep (exit 1, no arm's files)."""
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "Traceback" not in text
    assert re.search(r"^spec-ab: preflight: \d+ problem\(s\), no sweep started", done.stdout, re.M), text
    assert not (out / "baseline").exists() and not (out / "candidate").exists(), "no sweep ran"
    lines = [line for line in done.stdout.splitlines() if line.startswith("preflight FAILED: ")]
    assert lines and all("; fix: " in line for line in lines), text
    return lines


def _options() -> set[str]:
    return {opt for p in spec_ab_main.params for opt in p.opts}


def _named_options(line: str) -> set[str]:
    """The spec-ab options a fix names (server flags such as vLLM's --speculative-config excluded)."""
    fix = line.split("; fix: ", 1)[1]
    return {o for o in re.findall(r"--[a-z-]+", fix) if o != "--speculative-config"}


def test_a_dead_candidate_fails_in_seconds_before_any_sweep(tmp_path, arms):
    baseline, _ = arms
    dead = f"http://127.0.0.1:{free_port()}"
    lines = _failed_preflight(_spec_ab(tmp_path / "run", baseline.url, dead), tmp_path / "run")
    assert len(lines) == 1, lines
    assert lines[0].startswith("preflight FAILED: candidate: cannot read")
    assert "Connection refused" in lines[0]
    assert _named_options(lines[0]) == {"--candidate"}


def test_a_wrong_model_name_names_the_served_one(tmp_path, arms):
    baseline, candidate = arms
    done = _spec_ab(tmp_path / "run", baseline.url, candidate.url, "--model", "no-such-model")
    lines = _failed_preflight(done, tmp_path / "run")
    assert [line.split(":")[1].strip() for line in lines] == ["baseline", "candidate"]
    assert all("'no-such-model' is not served" in line and line.endswith("fix: pass --model sim-8b")
               for line in lines), lines

    # The same typo with --overwrite over an earlier A/B: nothing is cleared before the preflight passes.
    earlier = tmp_path / "earlier"
    names = ("baseline/r0_requests.csv", "candidate/r0_run.json", "verdict.json", "report.html",
             "spec-ab.json", "sim-candidate.log")
    record = outdir.Folder(earlier, "spec-ab")  # as the earlier spec-ab recorded them, writing them
    for name in names:
        (earlier / name).parent.mkdir(parents=True, exist_ok=True)
        if "/" in name:
            record.prefix(earlier / name.split("_")[0])
        else:
            record.file(earlier / name)
        (earlier / name).write_text(f"earlier {name}")
    before = sorted(str(p.relative_to(earlier)) for p in earlier.rglob("*"))
    again = _spec_ab(earlier, baseline.url, candidate.url, "--model", "no-such-model", "--overwrite")
    assert again.returncode == 1 and "'no-such-model' is not served" in again.stdout, again.stdout
    assert sorted(str(p.relative_to(earlier)) for p in earlier.rglob("*") if p.name != outdir.LOCK) == before
    assert all((earlier / name).read_text() == f"earlier {name}" for name in names)


@pytest.mark.parametrize(("arm", "other", "says"), [
    ("candidate", 0, "no speculative-decoding counters"),  # the candidate scrapes the baseline
    ("baseline", 1, "draft counters"),  # the baseline scrapes the speculating candidate
])
def test_a_metrics_url_of_the_other_server_is_named(tmp_path, arms, arm, other, says):
    baseline, candidate = arms
    done = _spec_ab(tmp_path / "run", baseline.url, candidate.url,
                    f"--metrics-url-{arm}", arms[other].url + "/metrics")
    lines = _failed_preflight(done, tmp_path / "run")
    assert any(line.startswith(f"preflight FAILED: {arm}:") and says in line
               and f"--metrics-url-{arm}" in line for line in lines), lines
    assert all(_named_options(line) <= _options() for line in lines), lines


def test_a_prompt_over_the_context_is_left_out_with_a_note_as_the_runs_leave_it_out(tmp_path, shared_sim):
    """Before: a prompt the server's tokenizer counts over the context failed the preflight ("lower
    --max-tokens", which could not help) while each run would have left it out."""
    small = shared_sim(*SMALL)
    # Three long English prompts that fit, and a shorter Cyrillic one (2 bytes a letter) that does not: by
    # bytes/4 it is the least likely to overflow, by the server's own tokenizer (POST /tokenize) the most.
    english = ("The quick brown fox jumps over the lazy dog while the parser returns a value. " * 20)[:1500]
    cyrillic = "Съешь же ещё этих мягких французских булок да выпей чаю. " * 10
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": text, "class": cls}) + "\n"
                               for text, cls in ((english, "en"), (english, "en"), (english, "en"),
                                                 (cyrillic, "ru"), ("hello", "short"))))
    chat = {"model": "sim-8b", "messages": [{"role": "user", "content": cyrillic}],
            "add_generation_prompt": True}
    completion = {"model": "sim-8b", "prompt": english}  # vLLM's two forms
    counts = [_post(small.url + "/tokenize", body) for body in (chat, completion)]
    assert counts[0]["count"] > 512 > counts[1]["count"] and counts[0]["max_model_len"] == 512
    assert len(counts[1]["tokens"]) == counts[1]["count"]
    # one server for both arms: the preflight fails for that, after judging the prompts
    done = _spec_ab(tmp_path / "run", small.url, small.url, "--prompts", str(prompts), "--max-tokens", "32")
    lines = _failed_preflight(done, tmp_path / "run")
    assert not any("does not fit the context" in line for line in lines), "the probes skip what is left out"
    notes = [line for line in done.stdout.splitlines() if "cannot fit the model's context" in line]
    assert len(notes) == 2, done.stdout
    # a prompt without an id is keyed by its file, line and content (mine-4-<6 hex>)
    assert all(line.startswith("preflight warning: ") and "1 of 5 prompts cannot fit the model's context of "
               "512" in line and re.search(r"mine-4-[0-9a-f]{6} \(", line) and "+ 32 tokens)" in line
               and "counted by its /tokenize" in line
               and f"fix: --max-prompt-chars {len(cyrillic) - 1} leaves them out" in line
               for line in notes), notes


def test_max_tokens_beyond_the_context_is_refused_without_asking_twice(tmp_path, shared_sim):
    baseline, candidate = shared_sim(*SMALL), shared_sim(*SMALL, "--speculative-config", NGRAM)
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello", "class": "short"}) + "\n")
    done = _spec_ab(tmp_path / "run", baseline.url, candidate.url, "--prompts", str(prompts),
                    "--max-tokens", "600")
    lines = _failed_preflight(done, tmp_path / "run")
    assert any("at or above the model's context of 512" in line and "pass --max-tokens below 512" in line
               for line in lines), lines


def test_without_the_preflight_a_dead_arm_still_stops_the_run_at_its_priming(tmp_path, arms):
    baseline, _ = arms
    out = tmp_path / "run"
    done = _spec_ab(out, baseline.url, f"http://127.0.0.1:{free_port()}", "--skip-preflight",
                    "--prompts", "quote", "--max-tokens", "32", "--model", "sim-8b")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("spec-ab: candidate: every priming request failed, first: quote-")
    assert "Connection refused" in last and last.endswith("no sweep started")
    assert not list((out / "candidate").glob("r0_*")), "the dead arm was not swept"
    assert not (out / "verdict.json").exists()


def test_a_run_whose_candidate_failed_most_requests_exits_3_with_the_reason(tmp_path, shared_sim, spec_sim):
    baseline = shared_sim(*BASELINE)
    candidate = spec_sim(*CANDIDATE, "--fault-500", "0.9")
    out = tmp_path / "run"
    # a short level (as the interrupt test's): the failures show in any number of requests
    done = _spec_ab(out, baseline.url, candidate.url, "--prompts", "quote", "--max-tokens", "32",
                    "--skip-preflight", "--no-prime", "--stage-time", "2s", "--warmup", "0.3s",
                    "--block-time", "1s", timeout=180)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.match(r"spec-ab: the run is bad: candidate failed \d+ of \d+ requests at 1 user ", last), last
    assert (out / "verdict.json").is_file(), "the verdict is still written, for the diagnosis"


def test_progress_shows_both_arms_requests_and_acceptance_while_they_sweep(tmp_path, arms):
    baseline, candidate = arms
    # no priming: the sweep's progress lines are what is tested (priming: test_prime, the Compose test)
    done = _spec_ab(tmp_path / "run", baseline.url, candidate.url, "--prompts", "quote",
                    "--max-tokens", "64", "--no-prime", timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "preflight: both arms answer" in done.stdout
    head = "[1/1] baseline+candidate r0 1 user"
    live = [line for line in done.stdout.splitlines() if line.startswith(head)]
    # a 12 s level shared in blocks, plus Locust's start and stop: lines at PLAIN_INTERVAL_S (4 s)
    assert len(live) >= 2, done.stdout
    assert all(re.search(r"block \d/8 (baseline|candidate)", line) for line in live), live
    for arm in ("baseline", "candidate"):
        counts = [int(re.search(rf"\| {arm}: (\d+) req, (\d+) failed", line).group(1)) for line in live]
        assert counts == sorted(counts) and counts[-1] > 0, live
    assert any(re.search(r"\| candidate: .*acceptance 0\.\d\d", line) for line in live), live
