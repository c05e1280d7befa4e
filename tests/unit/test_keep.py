"""What spec-ab does with a run folder that holds results (locust_spec/ab/keep.py): refuse it unless told,
and under --resume keep exactly the sessions that finished with the same settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from locust_spec.ab import cli as ab
from locust_spec.ab import keep, sessions
from locust_spec.ab.resume_check import Now
from locust_spec.core.design import INTERLEAVED, SEQUENTIAL

OUT = Path("runs/x")
LADDER = ab.Ladder("1,64", "20s", "2s")
LOAD = ab.Load(prompts=("quote", "code:3"), max_tokens=None, ignore_eos=False, seed=7, model="", processes=1)
CLOCK = 1_800_000_000.0


def _plan(kind: str = INTERLEAVED, repeats: int = 2) -> list[sessions.Session]:
    return sessions.sessions(ab.schedule(repeats, OUT), LADDER.design(kind, 2, "5s"))


def _command(run: sessions.Run, design, ladder: ab.Ladder = LADDER, host: str = "http://a:1") -> list[str]:
    # as Locust records its argv: its __main__ first, then the options spec-ab gave
    return ["/venv/locust/__main__.py", *ab.locust_command(run, host, ladder, LOAD, design)[3:]]


def _finished(run: sessions.Run, design, clock: float = CLOCK, ladder: ab.Ladder = LADDER,
              ended: float | None = None) -> keep.Recorded:
    """A run's files as a finished Locust leaves them, measured at `clock` (another host, another clock)."""
    measured = design.for_slot(design.slot, clock) if design.blocked else design
    end = clock + design.seconds + 0.3 if ended is None else ended
    record = {"started_unix_s": clock - 6, "ended_unix_s": end,
              "command": _command(run, measured, ladder, host="http://127.0.0.1:40404")}
    return keep.Recorded(True, record, measured.to_dict())


def _expected(plans, found, now=None) -> list[list[keep.Expected]]:
    """Each session's runs as this command would measure them, with what the folder holds (`found`) and
    the arms' servers and prompts `now` ({arm: resume_check.Now})."""
    def read(run: sessions.Run) -> keep.Recorded:
        session = next(s for s in plans if run in s.runs)
        slot = session.runs.index(run)
        return found(run, session.design.for_slot(slot, None) if session.design.blocked else session.design)

    return ab.expected_sessions(plans, _command, read, now)


def test_a_folder_with_results_is_refused_in_one_line_naming_both_ways_on():
    line = keep.refusal("spec-ab", OUT, ["baseline", "candidate", "report.html", "verdict.json"],
                        ab.REFUSAL_OPTIONS)
    assert line is not None and "\n" not in line
    assert line.startswith("spec-ab: runs/x already holds results (baseline, candidate, report.html and 1 "
                           "more)")
    assert "--overwrite" in line and "--resume" in line


def test_an_empty_folder_or_one_holding_only_spec_abs_own_logs_is_no_result():
    assert keep.refusal("spec-ab", OUT, keep.results([]), ab.REFUSAL_OPTIONS) is None
    # what a run whose preflight failed, or that stopped in its first session, leaves: its record lists them
    left = ["sim-baseline.log", "sim-candidate.log", "spec-ab.json", ".locust-spec-files",
            ".locust-spec.lock"]
    assert keep.results(left, mine={"sim-baseline.log", "sim-candidate.log", "spec-ab.json"}) == []
    assert keep.results(["notes.txt", "sim-baseline.log"], mine={"sim-baseline.log"}) == ["notes.txt"], \
        "anyone's file counts"
    assert keep.results(["sim-baseline.log", "spec-ab.json"]) == ["sim-baseline.log", "spec-ab.json"], \
        "a file of spec-ab's names that its record does not list is someone's: truncating it loses it"


def test_locust_options_leave_out_what_differs_between_any_two_runs():
    options = keep.options_of(["/x/__main__.py", "-f", "/a/sweep.py", "--headless", "--host", "http://h:1",
                               "--csv", "/runs/a/baseline/r0", "--processes", "-1", "--prompts", "a",
                               "--prompts", "b:2", "--master-port", "5000", "--seed=3"])
    assert options == {"--headless": (), "--processes": ("-1",), "--prompts": ("a", "b:2"), "--seed": ("3",)}
    assert keep.options_difference(["-f", "x", "--seed", "3"], ["-f", "y", "--seed", "3"]) is None
    assert keep.options_difference(["-f", "x", "--seed", "3"], ["-f", "x", "--seed", "4"]) == \
        "--seed was 3, now 4"
    assert keep.options_difference(["-f", "x", "--ignore-eos"], ["-f", "x"]) == \
        "--ignore-eos was set, now not given"


def test_resume_keeps_finished_sessions_and_measures_the_missing_one():
    plans = _plan()
    first = {r.prefix for r in plans[0].runs}
    found = _expected(plans, lambda run, design: _finished(run, design) if run.prefix in first
                      else keep.Recorded(False, None, None))
    assert keep.plan(found) == keep.Plan(kept=(0,), todo=(1,), notes=())


def test_a_session_cut_short_is_measured_again_and_said():
    plans = _plan()
    first = {r.prefix for r in plans[0].runs}

    def found(run, design):
        if run.prefix in first:
            return _finished(run, design)
        if run.arm == "baseline":  # killed hard: its Locust stopped by the parent's death, mid-ladder
            return _finished(run, design, ended=CLOCK + design.seconds / 2)
        return keep.Recorded(True, {"started_unix_s": CLOCK, "ended_unix_s": None}, None)

    plan = keep.plan(_expected(plans, found))
    assert (plan.kept, plan.todo, plan.conflict) == ((0,), (1,), None)
    (note,) = plan.notes
    assert note.startswith("measuring candidate r1 + baseline r1 again")
    assert "baseline r1: it stopped before its ladder's end" in note
    assert "candidate r1: its run record never ended" in note


def test_sequential_runs_are_kept_one_arm_at_a_time():
    plans = _plan(SEQUENTIAL, repeats=1)
    found = _expected(plans, lambda run, design: _finished(run, design) if run.arm == "baseline"
                      else keep.Recorded(False, None, None))
    assert keep.plan(found) == keep.Plan(kept=(0,), todo=(1,), notes=())


def test_a_finished_run_measured_with_other_settings_refuses_the_resume():
    plans = _plan()
    longer = ab.Ladder("1,64", "30s", "2s")
    measured = longer.design(INTERLEAVED, 2, "5s")
    found = _expected(plans, lambda run, design: _finished(run, replace(measured, slot=design.slot),
                                                           ladder=longer))
    conflict = keep.plan(found).conflict
    assert conflict is not None and conflict.startswith("baseline r0 was measured with other settings")
    assert conflict.endswith("--stage-time was 60s, now 40s")

    def other_blocks(run, design):
        return _finished(run, replace(design, warmup_s=1.0))

    conflict = keep.plan(_expected(plans, other_blocks)).conflict
    assert conflict is not None and conflict.endswith("its design's warmup_s was 1.0, now 2.0")


SERVED = {"models": [{"id": "llama", "root": "/models/llama-8b"}], "version": "0.32.0"}
PROMPTS = [{"file": "quote", "sha256": "a" * 64}, {"file": "code", "sha256": "c" * 64}]


def _served(run, design, served=SERVED, prompts=PROMPTS) -> keep.Recorded:
    found = _finished(run, design)
    return replace(found, run={**found.run, "server": served, "load": {"prompts": prompts}})


NOW = Now(prompts=("code " + "c" * 16, "quote " + "a" * 16), models=("/models/llama-8b",), version="0.32.0")


def test_resume_keeps_runs_measured_against_the_servers_and_prompts_it_finds_now():
    plans = _plan()
    plan = keep.plan(_expected(plans, _served, {"baseline": NOW, "candidate": NOW}))
    assert (plan.kept, plan.conflict) == ((0, 1), None)
    unknown = Now(prompts=None)  # the simulators: not started yet; their settings are spec-ab.json's
    assert keep.plan(_expected(plans, _served, {"baseline": unknown, "candidate": unknown})).kept == (0, 1)


def test_a_server_redeployed_with_another_model_refuses_the_resume():
    """Same URL, same options: only the kept runs' records against the server now tell the mix."""
    redeployed = replace(NOW, models=("/models/llama-8b-v2",))
    conflict = keep.plan(_expected(_plan(), _served, {"baseline": NOW, "candidate": redeployed})).conflict
    assert conflict == ("candidate r0 was measured with other settings or servers (its _run.json and "
                        "_design.json): its server's models was /models/llama-8b, now /models/llama-8b-v2")
    upgraded = replace(NOW, version="0.33.0")
    conflict = keep.plan(_expected(_plan(), _served, {"baseline": upgraded, "candidate": NOW})).conflict
    assert conflict.endswith("its server's version was 0.32.0, now 0.33.0")


def test_a_prompt_file_edited_in_place_refuses_the_resume():
    edited = replace(NOW, prompts=("code " + "d" * 16, "quote " + "a" * 16))
    conflict = keep.plan(_expected(_plan(), _served, {"baseline": edited, "candidate": edited})).conflict
    assert conflict.endswith(f"its prompt files (by content) was code {'c' * 16}, quote {'a' * 16}, now "
                             f"code {'d' * 16}, quote {'a' * 16}")


def test_the_servers_record_must_match():
    record = ab.servers_record({"baseline": "http://a:1", "candidate": "http://b:1"},
                               {"baseline": None, "candidate": "http://u:secret@b:1/metrics?token=x"}, False)
    assert record["metrics_urls"]["candidate"] == "http://b:1/metrics", "no credential is written"
    assert keep.settings_difference(record, record) is None
    moved = {**record, "servers": {"baseline": "http://a:1", "candidate": "http://c:1"}}
    assert keep.settings_difference(record, moved).startswith("servers was {")
    assert keep.settings_difference({"schema": "other"}, record) == \
        "its spec-ab.json is not one this spec-ab wrote"


def _holding(folder: Path) -> dict[str, str]:
    for name in ("baseline/r0_requests.csv", "verdict.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("earlier")
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def test_spec_ab_refuses_a_folder_with_results_before_starting_anything(tmp_path):
    before = _holding(tmp_path)
    result = CliRunner().invoke(ab.main, ["--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1, "one line, before --processes auto measures anything"
    assert "already holds results (baseline, verdict.json), left untouched" in result.output
    assert {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_resume_of_a_folder_spec_ab_did_not_write_is_refused_untouched(tmp_path):
    before = _holding(tmp_path)
    result = CliRunner().invoke(ab.main, ["--out", str(tmp_path), "--resume"])
    assert result.exit_code == 2 and "--resume refused" in result.output
    assert "it has no readable spec-ab.json" in result.output
    assert {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before
    both = CliRunner().invoke(ab.main, ["--out", str(tmp_path), "--resume", "--overwrite"])
    assert both.exit_code == 2 and "not both" in both.output


def test_spec_tune_refuses_a_folder_with_results_unless_overwrite(tmp_path):
    from locust_spec.tune.cli import main as spec_tune

    before = _holding(tmp_path)
    result = CliRunner().invoke(spec_tune, ["--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"spec-tune: {tmp_path} already holds results (baseline, verdict.json), "
                                     "left untouched; --overwrite replaces them")
    assert {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_finished_run_without_its_design_file_is_kept_with_the_file_rebuilt_not_measured_again():
    plans = _plan(repeats=1)

    def found(run, design):
        kept = _finished(run, design)
        return replace(kept, design=None) if run.arm == "baseline" else kept

    plan = keep.plan(_expected(plans, found))
    assert (plan.kept, plan.todo, plan.conflict) == ((0,), (), None)
    ((position, slot, design),) = plan.restored
    assert (position, slot) == (0, 0) and design.clock_unix_s == CLOCK, "the other arm's file holds the clock"
    assert design == plans[0].design.for_slot(0, CLOCK)

    sequential = _plan(SEQUENTIAL, repeats=1)
    plan = keep.plan(_expected(sequential, lambda run, design: replace(_finished(run, design), design=None)))
    assert plan.kept == (0, 1) and [d for _, _, d in plan.restored] == [sequential[0].design] * 2


def test_a_finished_session_whose_clock_is_lost_refuses_the_resume_rather_than_deleting_it():
    plans = _plan(repeats=1)
    plan = keep.plan(_expected(plans, lambda run, design: replace(_finished(run, design), design=None)))
    assert plan.conflict is not None and plan.conflict.startswith(
        "baseline r0 finished, but its _design.json (the shared clock's zero) is missing")
    assert "restore the file, or give another --out" in plan.conflict


def test_a_kept_looking_session_whose_files_do_not_read_is_measured_again_and_said():
    plans = _plan(repeats=1)

    def found(run, design):
        kept = _finished(run, design)
        return replace(kept, unreadable="r0_requests.csv: truncated") if run.arm == "candidate" else kept

    plan = keep.plan(_expected(plans, found))
    assert (plan.kept, plan.todo) == ((), (0,))
    assert plan.notes == ("measuring baseline r0 + candidate r0 again (candidate r0: its files do not read "
                          "(r0_requests.csv: truncated))",)
