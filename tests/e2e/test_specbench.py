"""SpecBench's tasks on a real spec-sim: `--prompts specbench` sends all six and the copy-heavy ones are
accepted more than translation; files in the public formats, written here as the field publishes them,
run as given with their categories as classes; a malformed row stops Locust at start with one line."""

from __future__ import annotations

import csv
import json
from collections import defaultdict

import pytest

from tests.support import REPO, run_locust, start_spec_sim

CHAT = str(REPO / "locustfiles" / "chat.py")
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
TASKS = {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}
QUESTIONS = [  # SpecBench's question.jsonl rows: MT-Bench's two turns, its own tasks' one
    {"question_id": 81, "category": "writing", "turns": [
        "Write a short travel note about a harbour town.",
        "Rewrite your previous response as three bullet points."]},
    {"question_id": 101, "category": "reasoning", "turns": [
        "Ada is taller than Ben and Ben is taller than Cy. Who is the shortest?",
        "Explain your previous answer step by step."]},
    {"question_id": 241, "category": "summarization", "turns": [
        "Summarize the following text in two sentences.\n\n" + "The harbour was busy before dawn. " * 30]},
    {"question_id": 161, "category": "translation", "turns": [
        "Translate the following German text into English.\n\nDer Hafen war vor der Morgendämmerung voll."]},
]
SHAREGPT = [{"id": "c1", "conversations": [
    {"from": "human", "value": "What is a tide?"}, {"from": "gpt", "value": "A rise of the sea."},
    {"from": "human", "value": "Summarize your previous answer in five words."},
    {"from": "gpt", "value": "Sea rises and falls daily."}]}]


def locust(tmp, url: str, name: str, users: int, seconds: int, *prompts: str) -> list[dict]:
    """A headless run of the packaged chat locustfile on these prompt sets only; its request rows."""
    args = ["-f", CHAT, "--headless", "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--host", url,
            "--csv", str(tmp / name), "--metrics-url", "off", "--max-tokens", "96", "--only-summary"]
    proc = run_locust(args + [arg for p in prompts for arg in ("--prompts", p)], cwd=tmp)
    assert "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    with open(tmp / f"{name}_requests.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("specbench")
    (tmp / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (tmp / "sharegpt.json").write_text(json.dumps(SHAREGPT, indent=1))
    sim = start_spec_sim(tmp, "--time-scale", "0.1", "--speculative-config", NGRAM,
                         "--per-request-spec-decode-metrics", "detailed")
    try:
        builtin = locust(tmp, sim.url, "builtin", 8, 6, "specbench")
        files = locust(tmp, sim.url, "files", 4, 4, "question.jsonl:3", "sharegpt.json")
    finally:
        sim.stop()
    return tmp, builtin, files


def test_specbench_sends_all_six_tasks_and_copy_heavy_ones_are_accepted_more_than_translation(runs):
    _, builtin, _ = runs
    ok = [r for r in builtin if not r["error"]]
    assert {r["prompt_class"] for r in ok} == TASKS
    sums = defaultdict(lambda: [0, 0])
    for r in ok:
        sums[r["prompt_class"]][0] += int(r["spec_accepted_tokens"])
        sums[r["prompt_class"]][1] += int(r["spec_draft_tokens"])
    acceptance = {task: a / d for task, (a, d) in sums.items() if d}
    assert min(acceptance["summarization"], acceptance["rag"]) > acceptance["translation"] + 0.2, acceptance
    assert any(r["prompt_id"].endswith("#2") for r in ok if r["prompt_class"] == "mt_bench")


def test_public_format_files_run_as_given_with_their_categories_as_classes_and_every_turn(runs):
    _, _, files = runs
    ok = [r for r in files if not r["error"]]
    assert {r["prompt_class"] for r in ok} == {"mt_bench", "summarization", "translation", "sharegpt"}
    turns = defaultdict(dict)
    for r in ok:
        qid, _, turn = r["prompt_id"].partition("#")
        turns[qid][turn or "1"] = int(r["prompt_tokens"])
    second = {qid: t for qid, t in turns.items() if "2" in t and "1" in t}
    assert set(second) & {"81", "101"} and "c1" in second
    # the second turn carries the first and the model's own answer to it
    assert all(t["2"] > t["1"] for t in second.values())


def test_a_malformed_row_stops_locust_at_start_with_one_line_naming_file_and_line(runs):
    tmp, *_ = runs
    bad = '[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"turns": 5}\n]'
    (tmp / "bad.json").write_text(bad)
    proc = run_locust(["-f", CHAT, "--headless", "-u", "1", "-t", "1s", "--host", "http://127.0.0.1:9",
                       "--prompts", "bad.json"], cwd=tmp, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "locust-spec: bad.json:3: turns must be a non-empty list of strings" in out
