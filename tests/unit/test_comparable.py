"""A verdict compares only what is comparable: runs whose prompts, request settings, design or load differ,
or one arm's runs met on two servers (a resumed mix), are refused with one line and exit 2; --force
compares them anyway and the report's first screen says what differs."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest
from locust_spec.analysis.cli import run
from locust_spec.analysis.comparable import ComparedRun, command_options, differences, runs_of
from locust_spec.analysis.provenance import Provenance

from locust_spec.core.design import Design
from tests.data.run_builder import ArmSpec, write_run

ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 12}}


def verdict(capsys, *argv) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("off") / "run", ArmSpec(speculative=False, **ONE_LEVEL))


def candidate(tmp_path: Path, **arm) -> Path:
    return write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, **{**ONE_LEVEL, **arm}))


@pytest.mark.parametrize(("arm", "named"), [
    ({"classes": ("json", "code", "translation")},
     "the runs' prompt sets (by content) differ (baseline: code 5694d08a2e53, creative 828febb7609a, json "),
    ({"load": {"max_tokens": 64}}, "the runs' max_tokens differ (baseline: not given; candidate: 64)"),
    ({"load": {"temperature": 0.7}}, "the runs' temperature differ (baseline: 0.0; candidate: 0.7)"),
    ({"load": {"ignore_eos": True}}, "the runs' ignore_eos differ (baseline: False; candidate: True)"),
    ({"load": {"seed": 7}}, "the runs' seed differ (baseline: 0; candidate: 7)"),
    ({"locust_args": ("--levels", "1,4", "--stage-time=30s")},
     "the runs' Locust option --levels differ (baseline: not given; candidate: 1,4)"),
])
def test_runs_that_differ_in_what_they_sent_are_one_line_and_exit_2(baseline, tmp_path, capsys, arm, named):
    code, out, err = verdict(capsys, baseline, candidate(tmp_path, **arm))
    assert (code, out) == (2, "")
    assert err.startswith(f"spec-verdict: not comparable: {named}") and err.count("\n") == 1, err
    assert err.rstrip().endswith("compare them anyway with --force")


def test_forced_the_report_says_what_differs_on_its_first_screen(baseline, tmp_path, capsys):
    cand = candidate(tmp_path, load={"temperature": 0.7})
    html, md = tmp_path / "report.html", tmp_path / "report.md"
    code, out, err = verdict(capsys, baseline, cand, "--force", "-o", html, "-o", md)
    assert code == 0, err
    line = ("NOT COMPARABLE, compared anyway (--force): the runs' temperature differ (baseline: 0.0; "
            "candidate: 0.7)")
    assert out.splitlines()[2] == line
    page = html.read_text()
    assert page.index(escape(line)) < page.index("<table class='levels'>") < page.index("What was measured")
    # the measured table's labels stay whole ("starte d", "prom pts" before): its first column never wraps
    assert "word-break:break-all" not in page and "table.measured td:first-child" in page
    assert md.read_text().index("NOT COMPARABLE") < md.read_text().index("### 1 user")
    code, out, _ = verdict(capsys, baseline, cand, "--force", "--format", "json")
    assert json.loads(out)["differences"] == [line.split(": ", 1)[1]]


def test_a_resumed_mix_of_models_in_one_arm_is_refused(tmp_path, capsys):
    """Both arms hold a repeat on each model, so the arms' sets of models agree: only the runs within an arm
    tell the redeploy between Ctrl-C and --resume."""
    for arm, speculative in (("baseline", False), ("candidate", True)):
        for repeat, root in enumerate(("/models/tiny-llama", "/models/tiny-llama-v2")):
            write_run(tmp_path / arm / f"r{repeat}", ArmSpec(speculative=speculative, seed=repeat + 3,
                                                             model_root=root, **ONE_LEVEL))
    code, out, err = verdict(capsys, tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith("spec-verdict: not comparable: the baseline's runs' models (one arm, two servers) "
                          "differ (baseline 1: /models/tiny-llama; baseline 2: /models/tiny-llama-v2)"), err


def test_each_value_is_shown_with_the_runs_that_had_it_not_one_per_arm():
    """The prompt-file warning printed the same hash for both arms: it kept one value per arm, the last."""
    def record(sha: str) -> Provenance:
        return Provenance("p", {"load": {"prompts": [{"file": "mine.jsonl", "sha256": sha}]}})

    base = [(record("a" * 64), None), (record("b" * 64), None)]
    cand = [(record("a" * 64), None), (record("b" * 64), None)]
    (found,) = differences(runs_of(base, cand))
    assert found.line() == ("the runs' prompt sets (by content) differ (baseline 1, candidate 1: mine.jsonl "
                            "aaaaaaaaaaaa; baseline 2, candidate 2: mine.jsonl bbbbbbbbbbbb)")


def test_designs_compare_without_their_clock_or_slot():
    planned = Design.planned("interleaved", (1, 4), 60.0, 2.0, 2)
    other = Design.planned("interleaved", (1, 4), 60.0, 2.0, 2, target_block_s=10.0)
    unknown = Provenance("p", {})
    same = [ComparedRun("baseline", "baseline", unknown, planned.for_slot(0, 1.0e9)),
            ComparedRun("candidate", "candidate", unknown, planned.for_slot(1, 1.0e9 + 5))]
    assert differences(same) == []
    moved = ComparedRun("candidate", "candidate", unknown, other.for_slot(1, 1.0e9))
    (found,) = differences([same[0], moved])
    assert found.what == "the runs' designs"


def test_the_load_options_are_read_in_any_spelling():
    argv = ["locust", "-u", "4", "--spawn-rate=2", "--levels", "1,4", "--host", "http://x", "--rates", "1",
            "2"]
    assert command_options(argv) == {"--users": "4", "--spawn-rate": "2", "--levels": "1,4", "--rates": "1 2"}


def test_one_prompt_file_copied_into_each_arms_folder_is_the_same_prompts():
    """The real-vLLM tier writes the same prompts.jsonl into each arm's folder: by content, one set."""
    from locust_spec.analysis.comparable import prompts_text

    def record(path: str, sha: str) -> Provenance:
        return Provenance("r0", {"load": {"prompts": [{"file": path, "sha256": sha}]}})

    off = record("/runs/off/prompts.jsonl", "ffc9df" * 10)
    on = record("/runs/ngram/prompts.jsonl", "ffc9df" * 10)
    assert prompts_text(off) == prompts_text(on) == "prompts.jsonl ffc9dfffc9df"
    assert prompts_text(off) != prompts_text(record("/runs/ngram/prompts.jsonl", "0" * 64))
