"""Messages say what the files hold and name options the named command accepts (issue 21, item 3)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import orjson
import pytest
from locust.argument_parser import get_parser
from locust_spec.analysis import api, diagnoses
from locust_spec.analysis.cli import cli, run
from locust_spec.analysis.model import LevelInput
from locust_spec.analysis.runs import InputError

from locust_spec.ab.cli import main as spec_ab
from locust_spec.ab.prime_cli import main as spec_prime
from locust_spec.metrics import crosscheck
from locust_spec.metrics.crosscheck import ClientTotals
from locust_spec.recording import scraper  # noqa: F401  (their Locust options)
from locust_spec.recording.summary import build_summary
from locust_spec.sim.cli import build_parser
from tests.data.run_builder import write_pair
from tests.support import REPO, ngram_capture_window
from tests.unit.test_verdict_rules import arm, spec


def _spec_ab_options() -> set[str]:
    return {opt for p in spec_ab.params for opt in p.opts}


def _named(text: str, command: str) -> set[str]:
    """The options a hint names for `command` (written as `command --option`)."""
    # up to the end of the clause: `;`, `)`, a quote or the end of the line
    parts = re.findall(rf"{command} ([^;)\n\"'`]*)", text)
    return {o for part in parts for o in re.findall(r"--[a-z-]+", part)}


def _command_options() -> dict[str, set[str]]:
    """Every option each command accepts: spec-ab and spec-verdict from click, locust from the parser it
    builds, with the options the plugin adds (the modules holding them are imported above)."""
    verdict = {o for command in cli.commands.values() for p in command.params for o in p.opts}
    locust = {o for action in get_parser()._actions for o in action.option_strings}
    everywhere = {"--help"}
    return {"spec-ab": _spec_ab_options() | everywhere, "spec-verdict": verdict | everywhere,
            "locust": locust | everywhere}


def test_every_option_a_message_names_for_a_command_is_one_that_command_accepts():
    accepted = _command_options()
    assert "--metrics-url" in accepted["locust"] and "--off-acceptance" in accepted["spec-verdict"]
    sources = [*Path(REPO, "analysis").rglob("*.py"), *Path(REPO, "locust_spec").rglob("*.py")]
    named = 0
    for path in sources:
        text = path.read_text()
        for command, known in accepted.items():
            for option in _named(text, command):
                named += 1
                assert option in known, f"{path.name}: {command} {option} does not exist"
    assert named >= 5, "the scan found the hints"


def test_the_metrics_hints_name_spec_ab_options_that_exist():
    for text in (crosscheck.METRICS_OPTIONS, crosscheck.CANDIDATE_METRICS_OPTIONS):
        named = _named(text, "spec-ab")
        assert named and named <= _spec_ab_options(), named
        assert "--metrics-url" in _named(text, "locust")


def _verdict(folder: Path):
    return api.verdict_for([folder / "off"], [folder / "ngram"])


def test_a_missing_server_metrics_csv_is_said_so_and_names_the_option(tmp_path):
    write_pair(tmp_path, server_metrics=False)
    verdict = _verdict(tmp_path)
    note = next(w for w in verdict.warnings if "_server_metrics.csv" in w)
    assert "run_server_metrics.csv does not exist" in note and "spec-ab --metrics-url-candidate" in note
    assert all(any("no server counters on the candidate at this level" in r for r in lv.reasons)
               for lv in verdict.levels)


def test_a_header_only_server_metrics_csv_is_not_called_missing(tmp_path):
    _, cand = write_pair(tmp_path)
    path = Path(f"{cand}_server_metrics.csv")
    path.write_text(path.read_text().splitlines()[0] + "\n")
    notes = [w for w in _verdict(tmp_path).warnings if "_server_metrics.csv" in w]
    assert len(notes) == 1 and "holds no scrape (header only)" in notes[0] and "not exist" not in notes[0]


def test_a_latency_json_is_missing_only_when_it_does_not_exist(tmp_path):
    base, cand = write_pair(tmp_path)
    Path(f"{base}_latency.json").unlink()
    empty = orjson.loads(Path(f"{cand}_latency.json").read_bytes())
    empty["levels"] = {}
    Path(f"{cand}_latency.json").write_bytes(orjson.dumps(empty))
    (note,) = [w for w in _verdict(tmp_path).warnings if "ITL p50 from per-request medians" in w]
    assert f"{base}_latency.json does not exist" in note
    assert f"{cand}_latency.json has no ITL histogram at 1 users" in note
    assert f"{cand}_latency.json does not exist" not in note


def test_whole_files_give_no_file_notes(tmp_path):
    write_pair(tmp_path)
    assert not [w for w in _verdict(tmp_path).warnings if "_latency.json" in w or "_server_metrics" in w]


def test_several_tokens_per_chunk_with_still_counters_blame_the_metrics_url():
    level = LevelInput(4, arm(tpc=1.0), arm(tpc=1.94), spec(None, (), 0, 0, gen=5000))
    found = diagnoses.speculation_inactive(level)
    assert "1.94 tokens per chunk" in found.message
    assert "metrics URL points at another server" in found.message
    assert "spec-ab --metrics-url-candidate" in found.message
    plain = diagnoses.speculation_inactive(LevelInput(4, arm(tpc=1.0), arm(tpc=1.0), spec(None, (), 0, 0,
                                                                                          gen=5000)))
    assert "metrics URL" not in plain.message


def test_counters_of_another_server_are_not_blamed_on_the_load_generator():
    window = ngram_capture_window()
    idle = dataclasses.replace(window, generation_tokens=0.0, max_requests_running=0.0,
                               max_requests_waiting=0.0, scrapes=5)
    totals = ClientTotals(requests=24, ok=24, output_tokens=int(window.generation_tokens))
    warnings = build_summary(totals, idle, [(8, idle)], {})["warnings"]
    conc = next(w for w in warnings if w.startswith("concurrency at 8 users"))
    assert "under-delivered" not in conc and "not the one under load" in conc
    tokens = next(w for w in warnings if w.startswith("cross-check output tokens"))
    assert "likely another server's" in tokens and "spec-ab --metrics-url-baseline" in tokens


def test_arms_given_the_wrong_way_round_are_called_swapped_not_inactive(tmp_path):
    write_pair(tmp_path)
    # without --force the swap is one line and exit 2 (test_provenance); forced, every level says it
    with pytest.raises(InputError, match="the arms look swapped"):
        api.verdict_for([tmp_path / "ngram"], [tmp_path / "off"])
    verdict = api.verdict_for([tmp_path / "ngram"], [tmp_path / "off"], force=True)
    assert verdict.verdict == "inconclusive" and "arms swapped?" in verdict.summary
    for level in verdict.levels:
        assert level.reasons[0].startswith("arms swapped? the baseline's draft counters moved (")
        inactive = next(d for d in level.diagnoses if d.kind == "speculation_inactive")
        assert "arms swapped?" in inactive.message and "speculation is disabled" not in inactive.message
    assert "arms swapped?" not in _verdict(tmp_path).summary


def test_a_spec_ab_folder_alone_is_read_as_its_two_arms(tmp_path, capsys):
    base, cand = write_pair(tmp_path / "runs")
    (tmp_path / "ab").mkdir()
    base.parent.rename(tmp_path / "ab" / "baseline")
    cand.parent.rename(tmp_path / "ab" / "candidate")
    assert run([str(tmp_path / "ab"), "--format", "json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["verdict"] == "depends", "its levels disagree"
    (tmp_path / "runs" / "notes.txt").write_text("a folder of something else")
    assert run([str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (f"spec-verdict: {tmp_path / 'runs'}: give BASELINE and CANDIDATE, or "
                                       "a spec-ab --out folder (one holding baseline/ and candidate/)\n")


def test_each_kind_of_wrong_folder_gets_its_own_line(tmp_path, capsys):
    def refusal(folder) -> str:
        assert run([str(folder)]) == 2
        return capsys.readouterr().err

    assert "no such file or folder" in refusal(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    assert "the folder is empty" in refusal(tmp_path / "empty")
    (tmp_path / "half" / "baseline").mkdir(parents=True)
    half = refusal(tmp_path / "half")
    assert "holds baseline/ but no candidate/" in half
    assert f"spec-ab --out {tmp_path / 'half'} --resume" in half


def _helps() -> dict[str, str]:
    """Each console script's --help, as its user reads it."""
    ctx = click.Context
    return {"spec-sim": build_parser().format_help(),
            "spec-prime": spec_prime.get_help(ctx(spec_prime, info_name="spec-prime")),
            "spec-ab": spec_ab.get_help(ctx(spec_ab, info_name="spec-ab")),
            "spec-verdict": cli.get_help(ctx(cli, info_name="spec-verdict")),
            "spec-verdict compare": cli.commands["compare"].get_help(ctx(cli.commands["compare"]))}


def test_every_commands_help_opens_for_its_user_and_names_no_internal_function():
    helps = _helps()
    for command, text in helps.items():
        # a module's function (`server_api.prime`) or a source file means nothing to the user
        assert not re.findall(r"\b[a-z]+(?:_[a-z]+)+\.[a-z_]+|\b\w+\.py\b", text), command
    opening = helps["spec-sim"].split("\n\n")[1]
    assert opening.startswith("A simulated vLLM server") and "command line" not in opening
    entries = {entry.split()[0]: " ".join(entry.split())
               for entry in re.split(r"\n  (?=-)", helps["spec-sim"]) if entry.startswith("--")}
    for option, default in (("--port", "8000"), ("--gpu", "h100"), ("--time-scale", "1.0"),
                            ("--max-num-seqs", "256"), ("--fault-500", "0.0")):
        assert entries[option].endswith(f"(default: {default})"), entries[option]
    assert "(default: None)" not in helps["spec-sim"]
    assert "2 bad input" in helps["spec-verdict"]


def test_a_spec_sim_typo_is_answered_in_two_lines_naming_the_option_it_meant(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--speculative-confg", "{}"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "spec-sim: unrecognized arguments: --speculative-confg {} (did you mean --speculative-config?)",
        "Try 'spec-sim --help' for the options."]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--port", "abc"])
    err = capsys.readouterr().err
    assert err.startswith("spec-sim: argument --port: invalid int value: 'abc'\n") and "usage:" not in err
