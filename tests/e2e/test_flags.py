"""Flags do what they say, against a real spec-sim: `--max-tokens` caps the built-in prompts' own
max_tokens; prompts longer than the server's context are left out with one warning, not sent to fail."""

from __future__ import annotations

import json

from tests.e2e.chat_runs import assert_reconciles, chat
from tests.support import REPO, run_locust

CHAT = str(REPO / "locustfiles" / "chat.py")


def test_max_tokens_caps_every_built_in_prompts_own(spec_sim, tmp_path):
    sim = spec_sim("--time-scale", "0.05")
    # built-in prompts carry max_tokens 128-256 of their own; ignore_eos makes the server use all of it
    run = chat(tmp_path, sim.url, "--prompts", "all", "--max-tokens", "24", "--ignore-eos",
               "--metrics-url", "off", users=4, seconds=3, locustfile=CHAT)
    ok = [r for r in assert_reconciles(run) if not r["error"]]
    assert ok and {int(r["output_tokens"]) for r in ok} == {24}
    assert run.proc.returncode == 0, run.output[-3000:]


def test_prompts_beyond_the_servers_context_are_left_out_with_one_warning(spec_sim, tmp_path):
    sim = spec_sim("--max-model-len", "300", "--time-scale", "0.05")
    prompts = tmp_path / "context.jsonl"
    long_text = " ".join(f"item{i}" for i in range(600))
    prompts.write_text(json.dumps({"id": "short", "class": "fits", "prompt": "Say hello."}) + "\n"
                       + json.dumps({"id": "long", "class": "too-long", "prompt": long_text}) + "\n")
    run = chat(tmp_path, sim.url, "--prompts", str(prompts), "--metrics-url", "off", users=2, seconds=2,
               locustfile=CHAT)
    rows = assert_reconciles(run)
    assert "short" in {r["prompt_id"] for r in rows} and "long" not in {r["prompt_id"] for r in rows}
    assert not any(r["error"].startswith("http_400") for r in rows)
    lines = [line for line in run.output.splitlines() if "prompts left out" in line]
    assert len(lines) == 1 and "1 of 4 prompts left out" in lines[0], run.output[-3000:]
    assert "max_model_len 300" in lines[0] and "counted by the server's /tokenize" in lines[0]


def test_a_run_where_no_prompt_fits_the_context_stops_at_once_with_exit_code_2(spec_sim, tmp_path):
    sim = spec_sim("--max-model-len", "64")
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"id": "long", "prompt": " ".join(f"item{i}" for i in range(300))}) + "\n")
    proc = run_locust(["-f", CHAT, "--headless", "-u", "2", "-r", "2", "-t", "30s", "--host", sim.url,
                       "--prompts", str(prompts), "--metrics-url", "off"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "every prompt exceeds the server's context" in proc.stderr
    assert "Traceback" not in proc.stderr
