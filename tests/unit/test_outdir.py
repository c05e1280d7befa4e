"""A results folder that spec-ab and spec-tune share with nobody (locust_spec/ab/outdir.py): --overwrite
removes only what the tool's record lists and refuses a folder holding anything else; no link is
followed; one run at a time. The refusals happen before anything starts, so the commands are driven
through their main functions on real temporary folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from locust_spec.ab import cli as ab
from locust_spec.ab import outdir
from locust_spec.ab.outdir import Entry, Owned
from locust_spec.recording.writes import RecordFile, WriteFailed, write_whole
from locust_spec.tune.cli import main as spec_tune


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (links as where they point) with its content."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = (f"-> {os.readlink(path)}" if path.is_symlink() else
                    path.read_text() if path.is_file() else "/")
    return out


def _write(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"the user's {name}")


def _spec_ab(out: Path, *args: str):
    return CliRunner().invoke(ab.main, ["--out", str(out), *args])


def test_the_record_lists_each_tools_entries_and_ignores_a_torn_or_outside_line():
    text = (outdir.line("spec-ab", "prefix", "baseline/r0") + outdir.line("spec-ab", "file", "report.md")
            + outdir.line("spec-tune", "file", "tune.json") + outdir.line("spec-ab", "file", "../etc/passwd")
            + outdir.line("spec-ab", "dir", "/tmp") + '{"by":"spec-ab","file":"verd')
    assert outdir.parse(text, "spec-ab") == Owned(frozenset({"report.md"}), frozenset(),
                                                  frozenset({"baseline/r0"}))
    assert outdir.parse(text, "spec-tune").files == {"tune.json"}


def test_a_prefix_owns_its_runs_files_and_the_folders_they_are_in_nothing_else():
    owned = Owned(prefixes=frozenset({"baseline/r0"}))
    assert all(owned.owns(Entry(rel, "file")) for rel in ("baseline/r0_requests.csv", "baseline/r0.log",
                                                           "baseline/r0_latency.json.tmp"))
    assert not any(owned.owns(Entry(rel, "file")) for rel in ("baseline/r00_requests.csv", "baseline/r0x",
                                                               "baseline/thesis/chapter1.tex", "r0.log"))
    assert owned.owns(Entry("baseline", "dir")) and not owned.owns(Entry("baseline/thesis", "dir"))
    assert not owned.owns(Entry("baseline/r0.log", "link")), "a link is never the tool's"


def test_overwrite_refuses_a_folder_spec_ab_never_wrote_and_touches_nothing(tmp_path):
    _write(tmp_path, "baseline/thesis/chapter1.tex", "candidate/notes.md", "report.md", "verdict.json")
    before = _tree(tmp_path)
    result = _spec_ab(tmp_path, "--overwrite")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"spec-ab: --overwrite refused: {tmp_path / 'baseline'} (a folder) was "
                                    "not written by spec-ab")
    assert _tree(tmp_path) == before, "not even a lock file is left in a folder it refused"


def test_overwrite_refuses_a_users_file_among_spec_abs_own(tmp_path):
    folder = outdir.Folder(tmp_path, "spec-ab")
    folder.prefix(tmp_path / "baseline" / "r0")
    folder.file(tmp_path / "report.md")
    _write(tmp_path, "baseline/r0_requests.csv", "report.md", "baseline/thesis.tex")
    result = _spec_ab(tmp_path, "--overwrite")
    assert result.exit_code == 2 and f"{tmp_path / 'baseline' / 'thesis.tex'} (a file) was not written" \
        in result.output
    assert (tmp_path / "baseline" / "r0_requests.csv").exists()


def test_spec_tune_overwrite_refuses_unrelated_folders_before_starting_anything(tmp_path):
    _write(tmp_path, "servers/prod.conf", "swing-3/data.csv", "tune/plan.txt", "confirm/x", "report.md")
    before = _tree(tmp_path)
    result = CliRunner().invoke(spec_tune, ["--out", str(tmp_path), "--overwrite"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "--overwrite refused: " in result.output and "was not written by spec-tune" in result.output
    assert _tree(tmp_path) == before


def test_spec_tune_does_not_clear_spec_abs_files(tmp_path):
    folder = outdir.Folder(tmp_path, "spec-ab")
    folder.file(tmp_path / "report.md")
    _write(tmp_path, "report.md")
    result = CliRunner().invoke(spec_tune, ["--out", str(tmp_path), "--overwrite"])
    assert result.exit_code == 2 and "report.md (a file) was not written by spec-tune" in result.output


def test_clear_removes_exactly_the_tools_entries_and_keeps_the_record_of_what_is_left(tmp_path):
    folder = outdir.Folder(tmp_path, "spec-tune")
    folder.prefix(tmp_path / "tune" / "k0" / "r0")
    folder.prefix(tmp_path / "swing-3" / "k2" / "r0")
    folder.prefix(tmp_path / "calibration" / "r1")
    folder.file(tmp_path / "servers" / "k0.log")
    folder.file(tmp_path / "tune.json")
    outdir.Folder(tmp_path, "spec-ab").file(tmp_path / "report.md")
    _write(tmp_path, "tune/k0/r0_requests.csv", "tune/k0/r0.log", "swing-3/k2/r0_run.json", "servers/k0.log",
           "tune.json", "calibration/r1_summary.json", "report.md")
    folder.lock()
    with pytest.raises(outdir.FolderError, match="report.md"):  # all is its own but spec-ab's report.md
        folder.check_overwrite(folder.owned())
    (tmp_path / "report.md").unlink()
    folder.check_overwrite(folder.owned())
    folder.clear(spare=("calibration",))
    assert sorted(_tree(tmp_path)) == [".locust-spec-files", ".locust-spec.lock", "calibration",
                                       "calibration/r1_summary.json"]
    assert folder.owned() == Owned(prefixes=frozenset({"calibration/r1"}))
    assert outdir.Folder(tmp_path, "spec-ab").owned().files == {"report.md"}, "another tool's lines stay"


def test_a_line_torn_by_a_crash_does_not_swallow_the_next_one(tmp_path):
    (tmp_path / outdir.RECORD).write_text('{"by":"spec-ab","file":"verd')
    folder = outdir.Folder(tmp_path, "spec-ab")
    folder.file(tmp_path / "report.md")
    assert folder.owned().files == {"report.md"}


def test_a_link_anywhere_in_the_folder_is_refused_and_nothing_is_written_through_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere, "r0_requests.csv", "precious.txt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "baseline").symlink_to(elsewhere)
    result = _spec_ab(out, "--overwrite")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert f"{out / 'baseline'} is a symbolic link" in result.output
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.txt", "r0_requests.csv"]

    target = tmp_path / "target.md"
    target.write_text("mine")
    resumed = tmp_path / "resumed"
    _write(resumed, "spec-ab.json", "baseline/r0_requests.csv")
    (resumed / "report.md").symlink_to(target)
    result = _spec_ab(resumed, "--resume")
    assert result.exit_code == 2 and f"{resumed / 'report.md'} is a symbolic link" in result.output
    assert target.read_text() == "mine"

    # even where spec-ab would start at once: its own log's name linked to a file it would truncate
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "sim-baseline.log").symlink_to(target)
    assert _spec_ab(fresh).exit_code == 2 and target.read_text() == "mine"


def test_a_file_where_spec_ab_keeps_a_folder_is_one_line_not_a_traceback(tmp_path):
    outdir.Folder(tmp_path, "spec-ab").file(tmp_path / "baseline")
    _write(tmp_path, "baseline")
    result = _spec_ab(tmp_path, "--overwrite")
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert result.output.strip() == (f"spec-ab: {tmp_path}/baseline is a file, where the tool keeps a "
                                     "folder; nothing was touched")


def test_a_second_run_on_a_locked_folder_exits_naming_the_first(tmp_path):
    first = outdir.Folder(tmp_path, "spec-ab")
    first.lock()  # as a running spec-ab holds it: another open of the lock file cannot take it
    before = _tree(tmp_path)
    for result in (_spec_ab(tmp_path), _spec_ab(tmp_path, "--overwrite"),
                   CliRunner().invoke(spec_tune, ["--out", str(tmp_path), "--overwrite"])):
        assert result.exit_code == 2 and result.output.count("\n") == 1
        assert f"{tmp_path} is in use by another run (pid {os.getpid()})" in result.output
    assert _tree(tmp_path) == before


def test_run_files_are_never_written_through_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("mine")
    (tmp_path / "r0_requests.csv").symlink_to(target)
    with pytest.raises(WriteFailed, match="r0_requests.csv is a symbolic link"):
        RecordFile(tmp_path / "r0_requests.csv")
    (tmp_path / "r0_summary.json.tmp").symlink_to(target)
    with pytest.raises(WriteFailed, match="is a symbolic link"):
        write_whole(tmp_path / "r0_summary.json", b"{}")
    assert target.read_text() == "mine"
    (tmp_path / "r0_latency.json").symlink_to(target)
    write_whole(tmp_path / "r0_latency.json", b"{}")  # the link itself replaced, its target untouched
    assert target.read_text() == "mine" and not (tmp_path / "r0_latency.json").is_symlink()


def test_spec_tune_overwrite_keeps_the_earlier_results_when_its_first_server_fails(tmp_path):
    folder = outdir.Folder(tmp_path, "spec-tune")
    for name in ("tune.json", "report.md", "servers/k0.log"):
        folder.file(tmp_path / name)
    folder.prefix(tmp_path / "tune" / "k0" / "r0")
    _write(tmp_path, "tune.json", "report.md", "servers/k0.log", "tune/k0/r0_requests.csv")
    result = CliRunner().invoke(spec_tune, ["--out", str(tmp_path), "--overwrite", "--k", "0,2",
                                            "--processes", "1",
                                            "--server-cmd", "false --port {port} {speculative_config}"])
    assert result.exit_code == 1 and "spec-tune: server k0 (false) exited with 1 at start" in result.output
    assert (tmp_path / "tune.json").read_text() == "the user's tune.json"
    assert (tmp_path / "tune" / "k0" / "r0_requests.csv").is_file() and (tmp_path / "report.md").is_file()


def test_a_walk_is_bounded_and_overwrite_stops_at_the_first_foreign_entry(tmp_path):
    _write(tmp_path, "a/1", "a/2", "b", "c")
    with pytest.raises(outdir.FolderError, match="holds over 3 entries: not a results folder"):
        list(outdir.walk(tmp_path, limit=3))
    walked = []
    entries = (walked.append(e) or e for e in outdir.walk(tmp_path))
    assert outdir.foreign(entries, Owned()) == Entry("a", "dir") and len(walked) == 1, "--out ~ at its first"
