"""The report's plots: axes fitted to the data, on/off ratios per level, acceptance per class, and a plot
without data left out with its reason instead of an empty image."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from locust_spec.analysis.api import render, verdict_for
from locust_spec.analysis.report import html, plots

from tests.data.run_builder import ArmSpec, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    shape = {"levels": (1, 64), "requests_per_user": {1: 40, 64: 3}, "classes": ("json", "code", "creative")}
    base = write_run(root / "off" / "run", ArmSpec(speculative=False, **shape))
    cand = write_run(root / "on" / "run", ArmSpec(speculative=True, **shape))
    bare = write_run(root / "bare" / "run", ArmSpec(speculative=True, per_request_stats=False, **shape))
    return base, cand, bare


def test_the_cdf_axis_spans_the_tokens_not_the_empty_decades_below_them():
    near_zero = ((0.001, 0.09), (2.0, 0.10), (3.0, 0.5), (9.0, 0.999), (80.0, 1.0))
    plain = ((1.5, 0.2), (4.0, 0.6), (20.0, 1.0))
    lo, hi = plots.cdf_axis([near_zero, plain])
    assert (lo, hi) == (1.5, 20.0)  # tokens at the floor (ITL ~0) are the curve's starting height
    assert plots.cdf_axis([((0.001, 1.0),)]) == (plots.NEAR_ZERO_MS, plots.NEAR_ZERO_MS * 10)


def test_the_ratio_plot_and_the_class_plot_are_drawn_from_per_request_stats(runs):
    base, cand, _ = runs
    verdict = verdict_for([base], [cand])
    for draw in (plots.ratios, plots.per_class, plots.itl_cdf, plots.per_position, plots.against_concurrency):
        assert draw(verdict).startswith(b"\x89PNG"), draw.__name__
    classes = {c["class"] for c in plots.class_acceptance(verdict)}
    assert classes == {"json", "code", "creative"}


def test_the_report_shows_acceptance_per_class_beside_the_verdict(runs):
    base, cand, _ = runs
    verdict = verdict_for([base], [cand])
    page = render(verdict, "html")
    # several classes: the verdict per task and level (analysis/tasks.py), acceptance first among its numbers
    table = page[page.index("<h2>Per task</h2>"):page.index("<h2>1 user")]
    for task in verdict.tasks:
        for lv in task.levels:
            assert (f"<td>{task.task}</td><td>{lv.users}</td><td class='v {lv.verdict}'>{lv.verdict}</td>"
                    f"<td>{lv.acceptance:.2f} [") in table
    assert {t.task for t in verdict.tasks} == {c["class"] for c in plots.class_acceptance(verdict)}
    assert "alt='Per task: acceptance, TPOT and throughput, speculation on vs off'" in page
    assert len(re.findall(r"src='data:image/png;base64,", page)) == len(plots.FIGURES)
    assert "not drawn" not in page


def test_a_plot_without_data_is_left_out_with_one_line_saying_why(runs):
    base, _, bare = runs
    verdict = verdict_for([base], [bare])
    omitted = plots.per_class(verdict)
    assert isinstance(omitted, plots.Omitted) and "--per-request-spec-decode-metrics" in omitted.reason
    page = render(verdict, "html")
    assert "Acceptance per prompt class: not drawn, the candidate sent no per-request" in page
    assert "<h2>Acceptance per prompt class</h2>" not in page
    assert len(re.findall(r"src='data:image/png;base64,", page)) == len(plots.FIGURES) - 1


def test_an_interval_ending_a_float_error_short_of_its_estimate_is_still_drawn(runs):
    # an A/A run's per-task interval had its upper end 2e-14 below its estimate: matplotlib refused yerr
    base, cand, _ = runs
    verdict = verdict_for([base], [cand])
    task = verdict.tasks[0]
    level = task.levels[0]
    tpot = level.changes["tpot_p50_ms"]
    bent = replace(level, changes={**level.changes, "tpot_p50_ms": replace(tpot, hi=tpot.estimate - 2e-14)})
    verdict = replace(verdict, tasks=(replace(task, levels=(bent, *task.levels[1:])), *verdict.tasks[1:]))
    assert plots.per_task(verdict).startswith(b"\x89PNG")


def test_a_plot_that_fails_costs_its_figure_never_the_report(runs, monkeypatch):
    base, cand, _ = runs
    verdict = verdict_for([base], [cand])

    def refuses(_verdict):
        raise ValueError("'yerr' must not contain negative values")

    monkeypatch.setattr(html, "FIGURES", (("Refused", refuses), *plots.FIGURES[1:]))
    page = render(verdict, "html")
    assert "Refused: not drawn, the plot failed (ValueError: &#x27;yerr&#x27; must not contain" in page
    assert len(re.findall(r"src='data:image/png;base64,", page)) == len(plots.FIGURES) - 1
    assert f"<span class='v {verdict.verdict}'>" in page
