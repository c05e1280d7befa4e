"""Per-task verdicts: each prompt class judged by the verdict's rules on its own requests, so a mixed
workload says where speculation pays (copying tasks) and where it does not (a task the draft never hits)."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from locust_spec.analysis import aa, api
from locust_spec.analysis.report import plots
from locust_spec.analysis.tasks import summary

from tests.data.run_builder import ArmSpec, write_pair, write_run


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """json and code copy their context; creative's drafts are never accepted (as translation's are not)."""
    base, cand = write_pair(tmp_path_factory.mktemp("mixed"), rejecting_classes=("creative",))
    return api.verdict_for([base], [cand])


def task(verdict, name):
    return next(t for t in verdict.tasks if t.task == name)


def at(found, users):
    return next(lv for lv in found.levels if lv.users == users)


def test_every_task_is_judged_at_every_level_on_its_own_requests(mixed):
    assert [t.task for t in mixed.tasks] == ["code", "creative", "json"]
    assert all([lv.users for lv in t.levels] == [1, 64] for t in mixed.tasks)
    level_requests = {lv.users: lv.candidate.requests for lv in mixed.levels}
    for users in (1, 64):
        assert sum(at(t, users).candidate.requests for t in mixed.tasks) == level_requests[users]


def test_the_task_the_draft_never_hits_is_off_while_the_copying_tasks_ship_at_one_user(mixed):
    creative = task(mixed, "creative")
    assert creative.acceptance_measured
    assert all(lv.verdict == "off" and lv.acceptance == 0.0 for lv in creative.levels)
    for name in ("code", "json"):
        one = at(task(mixed, name), 1)
        assert one.verdict == "ship"
        assert one.acceptance_ci.lo < one.acceptance < one.acceptance_ci.hi
        assert one.changes["tpot_p50_ms"].hi < 0  # faster per token, by its whole interval
    assert ("Per task (exploratory, Benjamini-Hochberg FDR at 0.05), at 1 user: ship on code and json; off "
            "on creative") in mixed.summary
    # the level mixes creative's slower streams in: its tail got worse, so the level is a tradeoff
    one = at(mixed, 1)
    assert one.verdict == "tradeoff" and "TPOT p90 +21.0% [+20.8, +21.3] worse beyond its 5% margin" in \
        one.reasons[0]
    assert all(lv.exploratory and lv.tests["tpot_p50_ms"]["p_adjusted"] is not None
               for t in mixed.tasks for lv in t.levels)


def test_a_tasks_throughput_is_its_streams_own_not_the_share_of_a_window_the_others_shortened(mixed):
    # At one user the copying tasks finish sooner, so creative's tokens over the level's window rise;
    # creative's own streams got slower, and that is what its verdict reads.
    level = next(lv for lv in mixed.levels if lv.users == 1)
    assert level.changes["output_tok_s"].lo > 0
    creative = at(task(mixed, "creative"), 1)
    assert creative.changes["output_tok_s"].hi < 0 and creative.changes["tpot_p50_ms"].lo > 0


def test_without_per_request_stats_tpot_and_throughput_decide_and_the_summary_says_so(tmp_path):
    base, cand = write_pair(tmp_path, per_request_stats=False)
    verdict = api.verdict_for([base], [cand])
    assert verdict.tasks and not any(t.acceptance_measured for t in verdict.tasks)
    one = at(task(verdict, "json"), 1)
    assert one.acceptance is None and one.verdict == "ship"
    assert one.reasons[0].startswith("TPOT p50 -61.") and "is better beyond the +-2% band" in one.reasons[0]
    assert "not measured per request: TPOT and throughput decide" in verdict.summary


def test_a_single_task_gets_no_per_task_section(tmp_path):
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, classes=("json",)))
    cand = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, classes=("json",)))
    verdict = api.verdict_for([base], [cand])
    assert verdict.tasks == () and "Per task" not in verdict.summary
    assert "Per task" not in api.render(verdict, "text")
    assert summary(()) == ""


def test_the_reports_carry_the_per_task_table_and_verdict_json_its_schema_6_entries(mixed):
    doc = orjson.loads(api.render(mixed, "json"))
    assert doc["schema"] == 7
    by_task = {t["task"]: t for t in doc["tasks"]}
    assert set(by_task) == {"code", "creative", "json"}
    creative_64 = by_task["creative"]["levels"][1]
    assert creative_64["users"] == 64 and creative_64["verdict"] == "off"
    assert creative_64["metrics"]["output_tok_s"]["ci95_pct"][1] < 0
    tpot = creative_64["metrics"]["tpot_p50_ms"]
    assert tpot["exploratory"] is True and tpot["p_adjusted"] <= 0.05  # a Benjamini-Hochberg q-value
    # (the HTML report's table and figure: tests/unit/test_report_plots.py, which renders it anyway)
    assert "| creative | 64 | off |" in api.render(mixed, "markdown")
    assert "Per task (exploratory, false discovery rate controlled; acceptance from per-request" in \
        api.render(mixed, "text")
    assert plots.per_task(mixed)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_self_test_counts_every_tasks_intervals_and_words_as_its_own_layer(mixed):
    found = aa.self_test(mixed)
    assert len(found.layer(aa.LEVELS)) == 2 * 4 and len(found.layer(aa.TASKS)) == 3 * 2 * 4
    said = sum(lv.verdict != "inconclusive" for t in mixed.tasks for lv in t.levels)
    assert found.words[aa.TASKS] == (said, 6) and found.words[aa.HEADLINE] == (1, 1)
    creative = [q for q in found.layer(aa.TASKS) if q.task == "creative" and q.users == 64]
    assert all(q.claimed for q in creative if q.metric in ("tpot_p50_ms", "output_tok_s"))
    assert "tasks: intervals excluding 0 " in aa.render_text(found)


def test_an_inconclusive_task_says_in_a_few_words_which_interval_held_it_back(mixed):
    code = task(mixed, "code")
    level = at(code, 1)
    held = replace(level, verdict="inconclusive",
                   reasons=("TPOT p50 -60% [-63, -58] is better beyond the +-2% band, but a loss cannot be "
                            "ruled out on TPOT p90 +1% [-20, +30] (past the 5% margin)",))
    said = summary((replace(code, levels=(held,)),))
    assert "at 1 user: inconclusive on code (a guard's interval reaches past its margin)" in said
