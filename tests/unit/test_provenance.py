"""What a run measured (PREFIX_run.json) travels into the verdict and its first screen; arms that cannot be
compared (different models, the same run twice, swapped) are one line and exit 2 unless --force."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from locust_spec.analysis.cli import run

from locust_spec.core.prompts import describe_sets
from locust_spec.recording.provenance import REDACTED, redact_argv
from tests.data.run_builder import ArmSpec, write_run

ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 12}}


@pytest.fixture(scope="module")
def arms(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("arms")
    return (write_run(root / "off" / "run", ArmSpec(speculative=False, **ONE_LEVEL)),
            write_run(root / "on" / "run", ArmSpec(speculative=True, seed=2, **ONE_LEVEL)))


def verdict(capsys, *argv) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_no_credential_reaches_the_recorded_command_line():
    argv = ["locust", "--api-key", "sk-1", "--api-key=sk-2", "--metrics-token", "mt-3", "--max-tokens", "32",
            "--first-token-timeout", "9", "--metrics-url", "http://scrape:pw-4@10.0.0.1:9/metrics?t=q-5",
            "--host=https://user:pw-6@vllm.internal/v1", "--prompts", "code:3"]
    written = redact_argv(argv)
    assert not any(secret in " ".join(written) for secret in ("sk-1", "sk-2", "mt-3", "pw-4", "q-5", "pw-6"))
    assert written == ["locust", "--api-key", REDACTED, f"--api-key={REDACTED}", "--metrics-token", REDACTED,
                       "--max-tokens", "32", "--first-token-timeout", "9", "--metrics-url",
                       "http://10.0.0.1:9/metrics", "--host=https://vllm.internal/v1", "--prompts", "code:3"]


def test_prompt_sets_are_told_apart_by_content(tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    described = describe_sets(["code:3", str(mine)])
    assert [(d["file"], d["builtin"], d["weight"], d["prompts"]) for d in described] == [
        ("code", True, 3.0, 60), (str(mine), False, 1.0, 2)]
    before = described[1]["sha256"]
    mine.write_text('{"prompt": "a"}\n{"prompt": "c"}\n')
    assert describe_sets([str(mine)])[0]["sha256"] != before


def test_the_verdict_carries_each_arms_record_and_shows_it_first(arms, tmp_path, capsys):
    """(report.html's order is checked on spec-ab's real runs: tests/e2e/test_spec_ab.py.)"""
    md, out = tmp_path / "report.md", tmp_path / "verdict.json"
    code, _, err = verdict(capsys, *arms, "-o", md, "-o", out)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == 7
    base, cand = doc["provenance"]["baseline"], doc["provenance"]["candidate"]
    assert base[0]["known"] and base[0]["prefix"] == str(arms[0])
    assert cand[0]["run"]["server"]["models"][0] == {"id": "tiny-llama", "root": "/models/tiny-llama",
                                                     "max_model_len": 2048}
    page = md.read_text()
    assert page.index("| measured | baseline | candidate |") < page.index("### 1 user:")
    assert "| model (root) | tiny-llama (/models/tiny-llama) | tiny-llama (/models/tiny-llama) |" in page
    assert "| server version | 0.32.0 | 0.32.0 |" in page


def test_runs_before_the_record_read_as_unknown(tmp_path, capsys):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, model_root=None, **ONE_LEVEL))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, **ONE_LEVEL))
    code, out, err = verdict(capsys, base, cand, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["provenance"]["baseline"] == [{"prefix": str(base), "known": False}]
    assert f"provenance unknown for {base}: no _run.json" in " ".join(doc["warnings"])


def test_arms_of_different_models_are_one_line_and_exit_2_unless_forced(arms, tmp_path, capsys):
    bigger = ArmSpec(speculative=True, seed=2, model_root="/models/llama-70b", **ONE_LEVEL)
    other = write_run(tmp_path / "on" / "run", bigger)
    code, out, err = verdict(capsys, arms[0], other)
    assert (code, out) == (2, "")
    assert err == ("spec-verdict: baseline and candidate served different models (baseline: "
                   "/models/tiny-llama; candidate: /models/llama-70b): compare them anyway with --force\n")
    code, out, _ = verdict(capsys, arms[0], other, "--force", "--format", "json")
    assert code == 0 and "served different models" in " ".join(json.loads(out)["warnings"])


def test_the_same_run_twice_is_one_line_and_exit_2_also_when_copied(arms, tmp_path, capsys):
    code, _, err = verdict(capsys, arms[1], arms[1])
    assert code == 2 and err.count("\n") == 1 and "are the same run" in err
    copy = tmp_path / "copy" / "run"
    copy.parent.mkdir()
    for f in arms[1].parent.glob("run_*"):
        (copy.parent / f.name).write_bytes(f.read_bytes())
    code, _, err = verdict(capsys, arms[1], copy)
    assert code == 2 and "are the same run" in err


def test_swapped_arms_are_one_line_and_exit_2(arms, capsys):
    code, out, err = verdict(capsys, arms[1], arms[0])
    assert (code, out) == (2, "")
    assert err.startswith("spec-verdict: the arms look swapped: the baseline's server drafted ")
    assert err.count("\n") == 1


def test_a_record_that_is_not_one_is_a_bad_input(arms, tmp_path, capsys):
    copy = tmp_path / "bad" / "run"
    copy.parent.mkdir()
    for f in arms[1].parent.glob("run_*"):
        (copy.parent / f.name).write_bytes(f.read_bytes())
    Path(f"{copy}_run.json").write_bytes(orjson.dumps({"schema": 99}))
    code, _, err = verdict(capsys, arms[0], copy)
    assert code == 2 and "unknown schema 99" in err
    Path(f"{copy}_run.json").write_text('{"schema": 1, "server": "<script>", "model": ["x"], "load": 7}')
    code, _, err = verdict(capsys, arms[0], copy, "--format", "markdown")
    assert code == 0, err  # any JSON inside an object is shown as text, never trusted
