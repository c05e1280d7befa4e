"""spec-tune per task: the k each task of a mix would choose alone, beside the mix's schedule, in every
report; a task's rate is per stream (its own requests over their own time)."""

from __future__ import annotations

import json

import pandas as pd

from locust_spec.tune import choose, measure, report
from locust_spec.tune.result import SCHEMA
from tests.data.run_builder import ArmSpec, write_run
from tests.unit.test_tune_choose import tokens
from tests.unit.test_tune_report import result


def test_a_tasks_sample_is_its_own_requests_over_their_own_seconds(tmp_path):
    prefix = write_run(tmp_path / "run", ArmSpec(speculative=True, classes=("rag", "translation")))
    found = measure.task_samples([prefix], 4, "throughput", None, [None, "rag", "translation"])
    rows = pd.read_csv(f"{prefix}_requests.csv")
    rag = rows[(rows.prompt_class == "rag") & (rows.warmup == 0) & (rows.level_users == 1)]
    sample = found["rag"][1]
    assert sample.requests == len(rag) and sample.values.sum() == rag.output_tokens.sum()
    assert abs(sample.seconds.sum() - rag.e2e_ms.sum() / 1000.0) < 1e-6  # per stream, over its blocks
    assert found[None][1].requests == found["rag"][1].requests + found["translation"][1].requests


def test_every_format_shows_each_tasks_own_k_beside_the_mixs():
    r = result()
    copy_heavy = choose.choose([tokens(0, 100), tokens(4, 260)], "throughput")
    translation = choose.choose([tokens(0, 100), tokens(4, 60)], "throughput")
    r = type(r)(**{**r.__dict__, "tasks": (("rag", (copy_heavy,)), ("translation", (translation,)))})
    text = report.render(r, "text")
    assert "translation  1      " in text and "the schedule is the mix's" in text
    data = json.loads(report.render(r, "json"))
    assert data["schema"] == SCHEMA == "locust-spec/tune/3"
    assert [(t["task"], t["decisions"][0]["k"]) for t in data["tasks"]] == [("rag", 4), ("translation", 0)]
    assert "| task | users | k=0 | k=4 | task's k | mix's k |" in report.render(r, "markdown")
    assert "<h2>Per task</h2>" in report.render_html(r, b"png")
