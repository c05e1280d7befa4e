"""spec-verdict on real vLLM runs at 1 user: speculation off against each speculative arm."""

import json
import logging
import subprocess

import pytest

from tests.support import BIN
from tests.vllm.prompts import PROMPTS

# The first test of a module also waits for a server start (and, on a fresh machine, the install).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
log = logging.getLogger(__name__)

# Short runs at one user on a busy 2-core machine (an unrelated draft decodes ~15 tok/s here): fewer
# requests and tokens than the defaults ask for.
EVIDENCE = ("--min-requests", "3", "--min-tokens", "120")
SHIP_AT, OFF_AT = 2 / 3, 0.5


def verdict(arm_runs, candidate: str) -> dict:
    base, cand = arm_runs.get("off"), arm_runs.get(candidate)
    done = subprocess.run([str(BIN / "spec-verdict"), str(base.prefix), str(cand.prefix), "--format", "json",
                           *EVIDENCE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    level = doc["levels"][0]
    log.info("off vs %s: verdict %s, acceptance %s, per position %s, change %% %s, reasons %s, diagnoses %s",
             candidate, level["verdict"], level["acceptance"], level["per_position"],
             {k: m["change_pct"] for k, m in level["metrics"].items()},
             level["reasons"], [d["kind"] for d in level["diagnoses"]])
    assert [lv["users"] for lv in doc["levels"]] == [1]
    log.info("off vs %s: what ran %s", candidate, doc["speculation"])
    # vLLM serves no speculative config over HTTP: what ran is inferred from the counters (every arm here
    # drafts 4 tokens at batch 1; the baseline exposes no speculative counters)
    assert doc["speculation"]["baseline"]["inferred"]["drafted"] is False
    assert doc["speculation"]["candidate"]["inferred"]["k"] == 4
    return level


def test_an_unrelated_draft_is_switched_off_because_draft_and_target_disagree(arm_runs):
    level = verdict(arm_runs, "draft-unrelated")
    assert level["verdict"] == "off"
    assert level["acceptance"] == 0.0
    assert "draft_disagrees" in {d["kind"] for d in level["diagnoses"]}


def test_a_copy_draft_is_accepted_in_full(arm_runs):
    level = verdict(arm_runs, "draft-copy")
    # an identical draft is accepted almost always, not always: see test_c_drafts (vLLM's numerics)
    assert level["acceptance"] >= 0.95
    assert min(level["per_position"]) >= 0.9
    assert level["metrics"]["tokens_per_chunk"]["candidate"] > 3
    assert "draft_disagrees" not in {d["kind"] for d in level["diagnoses"]}


def test_ngram_gets_the_verdict_its_numbers_support(arm_runs):
    level = verdict(arm_runs, "ngram")
    acceptance, (lo, hi) = level["acceptance"], level["acceptance_ci95"] or [level["acceptance"]] * 2
    metrics = level["metrics"]

    def clears(key: str, sign: int) -> bool:  # the whole 95% interval beyond the 2% band, in that direction
        ci = metrics[key]["ci95_pct"] or [metrics[key]["change_pct"]] * 2
        return min(ci) > 2 if sign > 0 else max(ci) < -2

    assert 0 < acceptance < 1
    # The answer gate at temperature 0 (Locust's default): n-gram with the standard verifier is lossless, so
    # its answers are the baseline's up to the numerical noise of its differently shaped verification steps.
    answers = level["answers"]
    log.info("off vs ngram at temperature 0: %s of %s answers identical (baseline vs itself %s over %s "
             "prompts, shortfall 95%% %s), %s differing, first at characters %s: %s",
             *(answers[k] for k in ("identical_share", "compared", "baseline_self_share", "self_prompts",
                                    "shortfall_ci95", "differing", "first_difference_chars", "status")))
    assert answers["compared"] > 0 and 1 <= answers["prompts"] <= len(PROMPTS)
    assert answers["status"] != "differ", "the gate held back vLLM's lossless n-gram"
    assert answers["noise_floor_from"] is not None, "the baseline's noise floor was measured"
    if hi < OFF_AT:
        assert level["verdict"] == "off"
    elif lo >= SHIP_AT and clears("output_tok_s", +1) and clears("tpot_p50_ms", -1):
        assert level["verdict"] == "ship"
    elif lo >= OFF_AT and clears("output_tok_s", -1) and clears("tpot_p50_ms", +1):
        assert level["verdict"] == "off"
    else:
        assert level["verdict"] in {"ship", "off", "tradeoff", "inconclusive"}
