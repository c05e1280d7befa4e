"""Run files handed to spec-verdict that are not what the run wrote: refused with one line (exit 2).

Before: a requests CSV cut exactly at a line end was read as a whole run (11 of 128 rows analysed, no
warning) though latency.json counted every successful request, and a column the contract does not know was
read past, though docs/contracts.md says readers reject unknown headers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import orjson
import pytest
from locust_spec.analysis.cli import run

from tests.data.run_builder import ArmSpec, write_run

SMALL = {"levels": (1,), "requests_per_user": {1: 24}}


@pytest.fixture
def arms(tmp_path) -> tuple[Path, Path]:
    return (write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, **SMALL)),
            write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, **SMALL)))


ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


def verdict(capsys, base: Path, cand: Path) -> tuple[int, str]:
    code = run([str(base), str(cand), "--format", "json"])
    return code, capsys.readouterr().err.strip()


def keep_lines(path: Path, n: int) -> None:
    """The file cut after its header and `n` rows, exactly at a line end."""
    path.write_text("".join(path.read_text().splitlines(keepends=True)[: n + 1]))


def test_a_requests_csv_cut_at_a_line_end_is_refused_by_latency_json_counts(arms, capsys):
    base, cand = arms
    assert verdict(capsys, base, cand)[0] == 0
    keep_lines(Path(f"{cand}_requests.csv"), 11)
    code, err = verdict(capsys, base, cand)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "truncated: 11 successful request rows, but run_latency.json counts 24" in err


def test_a_requests_csv_cut_at_a_line_end_is_refused_by_the_summary_count(arms, capsys):
    base, cand = arms
    Path(f"{cand}_latency.json").unlink()
    summary = Path(f"{cand}_summary.json")
    summary.write_bytes(orjson.dumps({**orjson.loads(summary.read_bytes()), "client": {"requests": 24}}))
    keep_lines(Path(f"{cand}_requests.csv"), 20)
    code, err = verdict(capsys, base, cand)
    assert code == 2 and "truncated: 20 request rows, but run_summary.json counts 24" in err, err


def test_a_column_the_contract_does_not_know_is_refused(arms, capsys):
    base, cand = arms
    path = Path(f"{cand}_requests.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",surprise"] + [line + ",1" for line in lines[1:]]) + "\n")
    code, err = verdict(capsys, base, cand)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "unknown column surprise" in err


def test_a_counter_that_falls_in_the_candidates_metrics_is_named_in_the_verdict(arms, capsys):
    base, cand = arms
    path = Path(f"{cand}_server_metrics.csv")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    accepted = [r for r in rows if r["metric"] == ACCEPTED]
    accepted[2]["value"] = repr(float(accepted[1]["value"]) - 1)  # _created unchanged: no restart
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    assert run([str(base), str(cand), "--format", "json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    [line] = [w for w in warnings if "counter_decrease" in w]
    assert line.startswith("candidate's server counters at 1 users: server counter anomaly")
    assert ACCEPTED in line
