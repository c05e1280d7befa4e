"""Corrupt or partial inputs: spec-verdict exits 2 with one clear line on stderr, never a traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from locust_spec.analysis.cli import run

from tests.data.run_builder import ArmSpec, write_run
from tests.support import BIN


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("good")
    small = {"levels": (1,), "requests_per_user": {1: 12}}
    base = write_run(root / "off" / "run", ArmSpec(speculative=False, **small))
    cand = write_run(root / "on" / "run", ArmSpec(speculative=True, **small))
    return base, cand


def _copy(prefix: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for f in prefix.parent.glob(prefix.name + "_*"):
        shutil.copy(f, dest / f.name)
    return dest / prefix.name


def _fails_with_one_line(capsys, argv, fragment: str) -> None:
    code = run([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("spec-verdict: ")
    assert fragment in lines[0]
    assert "Traceback" not in captured.out + captured.err


def _edit_text(path: Path, edit) -> None:
    path.write_text(edit(path.read_text()))


def _replace_cell(text: str, column: str, value: str) -> str:
    lines = text.splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[3].rstrip("\n").split(",")
    cells[header.index(column)] = value
    lines[3] = ",".join(cells) + "\n"
    return "".join(lines)


def _set(path: Path, column: str, value: str) -> None:
    _edit_text(path, lambda t: _replace_cell(t, column, value))


def _drop_column(text: str, column: str) -> str:
    rows = [line.split(",") for line in text.splitlines()]
    i = rows[0].index(column)
    return "\n".join(",".join(r[:i] + r[i + 1:]) for r in rows) + "\n"


LAG = {"samples": 100, "late_samples": 2, "late_share": 0.01, "max_lag_ms": 12.0}


def _with_lag(path: Path, by_level: object) -> None:
    """The summary with `client.generators.by_level` replaced."""
    data = orjson.loads(path.read_bytes())
    data["client"] = {"generators": {"by_level": by_level}}
    path.write_bytes(orjson.dumps(data))


CORRUPTIONS = {
    "empty": ("_requests.csv", lambda p: p.write_bytes(b""), "empty file"),
    "header only": ("_requests.csv", lambda p: _edit_text(p, lambda t: t.splitlines(keepends=True)[0]),
                    "no request rows"),
    "truncated": ("_requests.csv", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2 + 7]),
                  "truncated"),
    "wrong columns": ("_requests.csv", lambda p: _edit_text(p, lambda t: _drop_column(t, "ttft_ms")),
                      "wrong columns: missing ttft_ms"),
    "text in numeric": ("_requests.csv",
                        lambda p: _edit_text(p, lambda t: _replace_cell(t, "e2e_ms", "fast")),
                        "column e2e_ms row 3 is not a number: 'fast'"),
    "infinite start": ("_requests.csv", lambda p: _set(p, "start_unix_s", "inf"),
                       "column start_unix_s row 3 is inf, outside 0..1e+10"),
    "absurd tokens": ("_requests.csv",
                      lambda p: _set(p, "output_tokens", "-1e308"),
                      "column output_tokens row 3 is -1e+308, outside 0..1e+09"),
    "infinite level": ("_requests.csv", lambda p: _set(p, "level_users", "inf"),
                       "column level_users row 3 is inf, outside 0..1e+07"),
    "negative ttft": ("_requests.csv", lambda p: _set(p, "ttft_ms", "-Infinity"),
                      "column ttft_ms row 3 is -inf, outside 0..1e+09"),
    "no level": ("_requests.csv", lambda p: _edit_text(p, lambda t: _replace_cell(t, "level_users", "")),
                 "row 3 has no level_users"),
    "foreign csv": ("_requests.csv",
                    lambda p: p.write_text("Type,Name,Request Count,Failure Count\nGET,/,1,0\n"),
                    "not a locust-spec requests CSV"),
    "binary": ("_requests.csv", lambda p: p.write_bytes(b"\xff\xfe\x00garbage\x80\n"), "not a text CSV"),
    "latency truncated": ("_latency.json", lambda p: p.write_bytes(p.read_bytes()[:100]), "not valid JSON"),
    "latency schema": ("_latency.json", lambda p: p.write_bytes(orjson.dumps({"schema": 2})),
                       "unknown schema 2"),
    "bad hdr": ("_latency.json", lambda p: _edit_text(p, lambda t: t.replace('"hdr":"', '"hdr":"AAAA')),
                "bad HDR histogram"),
    "null hdr": ("_latency.json",
                 lambda p: _edit_text(p, lambda t: re.sub(r'"hdr":"[^"]*"', '"hdr":null', t)),
                 "has no encoded HDR data"),
    "crosscheck": ("_summary.json", lambda p: p.write_bytes(b'{"schema": 1, "crosscheck": [1]}'),
                   "'crosscheck' is not an object"),
    "metrics columns": ("_server_metrics.csv", lambda p: p.write_text("a,b\n1,2\n"),
                        "not a server metrics CSV"),
    "metrics value": ("_server_metrics.csv",
                      lambda p: _edit_text(p, lambda t: t.replace(",0.0\n", ",zero\n", 1)),
                      "bad server metrics row"),
    "metrics empty": ("_server_metrics.csv", lambda p: p.write_bytes(b""), "empty file"),
    "summary": ("_summary.json", lambda p: p.write_bytes(b'{"schema": 1, "warnings": "one"}'),
                "'warnings' is not a list"),
    "lag per level not an object": ("_summary.json", lambda p: _with_lag(p, [0.2]),
                                    "'client.generators.by_level' is not an object of levels"),
    "lag level not users": ("_summary.json", lambda p: _with_lag(p, {"all": LAG}),
                            "by_level' has a level 'all' that is not a user count"),
    "lag entry not an object": ("_summary.json", lambda p: _with_lag(p, {"64": 0.2}),
                                "by_level'[64] is not an object"),
    "lag share as text": ("_summary.json", lambda p: _with_lag(p, {"64": {**LAG, "late_share": "20%"}}),
                          "by_level'[64].late_share is not a number: '20%'"),
    "lag samples fractional": ("_summary.json", lambda p: _with_lag(p, {"1": {**LAG, "samples": 2.5}}),
                               "by_level'[1].samples is not a count"),
    "lag share above one": ("_summary.json", lambda p: _with_lag(p, {"1": {**LAG, "late_share": 20}}),
                            "by_level'[1].late_share is 20, above 1"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_candidate_file_exits_2_with_one_line(good, tmp_path, capsys, case):
    suffix, corrupt, fragment = CORRUPTIONS[case]
    cand = _copy(good[1], tmp_path / "on")
    corrupt(Path(f"{cand}{suffix}"))
    _fails_with_one_line(capsys, [good[0], cand], fragment)


def test_missing_run(good, tmp_path, capsys):
    _fails_with_one_line(capsys, [good[0], tmp_path / "nothing"], "no such run")


def test_empty_folder(good, tmp_path, capsys):
    _fails_with_one_line(capsys, [good[0], tmp_path], "folder holds no run")


def test_arms_with_no_common_level(good, tmp_path, capsys):
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, levels=(64,)))
    _fails_with_one_line(capsys, [good[0], cand], "share no concurrency level (baseline: 1; candidate: 64)")


def test_unknown_output_suffix(good, tmp_path, capsys):
    _fails_with_one_line(capsys, [*good, "-o", tmp_path / "r.pdf"], "unknown output suffix")


def test_usage_error_is_one_line(capsys):
    _fails_with_one_line(capsys, ["one", "two", "three"], "Got unexpected extra argument (three)")
    # one argument that is not spec-ab's folder: what to give instead (test_messages: one that is)
    _fails_with_one_line(capsys, ["only-one"],
                         "only-one: no such file or folder (give BASELINE and CANDIDATE")


@pytest.mark.parametrize("case", ["truncated", "text in numeric", "foreign csv"])
def test_console_script_exits_2_with_one_line(good, tmp_path, case):
    suffix, corrupt, fragment = CORRUPTIONS[case]
    cand = _copy(good[1], tmp_path / "on")
    corrupt(Path(f"{cand}{suffix}"))
    result = subprocess.run([str(BIN / "spec-verdict"), str(good[0]), str(cand)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and fragment in result.stderr
    assert result.stdout == ""


HEADER = ("start_unix_s,level_users,prompt_class,prompt_id,prompt_tokens,output_tokens,tokens_estimated,"
          "chunks,max_tokens_per_chunk,ttft_ms,tpot_ms,e2e_ms,itl_p50_ms,itl_p99_ms,chunk_gap_p50_ms,finish_reason,"
          "spec_accepted_tokens,spec_draft_tokens,error,warmup\n")
GARBAGE = st.one_of(st.text(max_size=400), st.text(max_size=400).map(lambda t: HEADER + t),
                    st.binary(max_size=400).map(lambda b: b.decode("latin-1")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffix=st.sampled_from(["_requests.csv", "_latency.json", "_server_metrics.csv", "_summary.json"]),
       garbage=GARBAGE)
def test_garbage_never_gives_a_traceback(good, tmp_path_factory, capsys, suffix, garbage):
    cand = _copy(good[1], tmp_path_factory.mktemp("garbage"))
    Path(f"{cand}{suffix}").write_bytes(garbage.encode("utf-8", "surrogatepass"))
    code = run([str(good[0]), str(cand), "--format", "json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert code in (0, 2)
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(("content", "fragment"), [
    (b'{"schema": 1, "answers": [{"prompt_class": "c"}]}', "answers must be a list of objects with"),
    (b'{"schema": 1, "answers": 7}', "answers must be a list of objects with"),
    (b'{"schema": 9, "answers": []}', "unknown schema 9"),
    (b'{"schema": 1, "answers": [', "not valid JSON"),
])
def test_a_bad_baseline_self_check_is_one_line(good, tmp_path, capsys, content, fragment):
    base = _copy(good[0], tmp_path / "baseline")
    (tmp_path / "baseline" / "self_check.json").write_bytes(content)
    _fails_with_one_line(capsys, [base, good[1]], f"self_check.json: {fragment}")
