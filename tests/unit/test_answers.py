"""The quality gate: an answer's fingerprint in the row, per level the share of identical answers beside
the baseline's own, and a candidate whose answers changed beyond that noise is not shipped."""

from __future__ import annotations

import pandas as pd
import pytest
from locust_spec.analysis import api
from locust_spec.analysis.answers import (
    DIFFER,
    NOISE_UNKNOWN,
    NOT_CHECKED,
    NOT_DETERMINISTIC,
    SAME,
    UNMEASURED_DIFFER,
    Floor,
    check_level,
)

from locust_spec.ab import self_check
from locust_spec.client.sse import EventSplitter, parse_payload
from locust_spec.client.timing import request_timing
from locust_spec.core.answers import BLOCK_CHARS, fingerprint, first_difference, whitespace_hash
from locust_spec.core.formats import Prompt
from tests.data.run_builder import ArmSpec, write_run
from tests.replay import load_capture

TEXT = "def parse(line):\n    return line.split(',')  # the same greedy answer, token by token " * 4


def test_the_fingerprint_depends_on_the_text_not_on_how_the_stream_chunked_it():
    one_token_each = fingerprint(list(TEXT))
    five_tokens_each = fingerprint([TEXT[i:i + 5] for i in range(0, len(TEXT), 5)])
    assert one_token_each == five_tokens_each == fingerprint([TEXT])
    digest, marks = one_token_each
    assert len(digest) == 16 and len(marks) == -(-len(TEXT) // BLOCK_CHARS)


def test_marks_locate_the_first_difference_to_its_block_but_once_in_64_to_the_next():
    digest, marks = fingerprint([TEXT])
    found = []
    for at in range(len(TEXT) - BLOCK_CHARS):  # a later block exists to show the difference
        other, changed = fingerprint([TEXT[:at] + "§" + TEXT[at + 1:]])
        assert other != digest
        found.append(first_difference(marks, changed) - at // BLOCK_CHARS * BLOCK_CHARS)
    assert set(found) <= {0, BLOCK_CHARS}
    assert found.count(0) >= 0.95 * len(found)


def test_an_answer_that_stops_early_differs_where_it_stopped():
    (_, full), (_, cut) = fingerprint([TEXT]), fingerprint([TEXT[:64]])
    assert first_difference(full, cut) == 64
    assert first_difference(full, full) is None


def test_a_real_vllm_stream_gets_the_fingerprint_of_its_content():
    splitter, events = EventSplitter(), []
    for t, data in load_capture("stream_ngram").reads:
        events += [(t, parse_payload(p)) for p in splitter.feed(data)]
    timing = request_timing(0.0, events, events[-1][0])
    text = "".join(chunk.text for _, chunk in events if hasattr(chunk, "text"))
    assert len(text) == 1040 and timing.output_tokens == 200
    assert (timing.output_hash, timing.output_marks) == fingerprint([text])


def frame(answers: dict[str, list[str]]) -> pd.DataFrame:
    """prompt -> its answers' texts, as the analysis reads them."""
    rows = [(p, whitespace_hash(text), *fingerprint([text]))
            for p, texts in answers.items() for text in texts]
    return pd.DataFrame(rows, columns=["prompt", "answer", "output_hash", "output_marks"])


def test_identical_answers_are_the_same_and_changed_ones_differ_beyond_the_baseline_noise():
    base = frame({f"p{i}": [f"answer {i} " * 20] * 4 for i in range(6)})
    same = check_level(base, frame({f"p{i}": [f"answer {i} " * 20] * 3 for i in range(6)}))
    assert (same.identical_share, same.baseline_self_share, same.status) == (1.0, 1.0, SAME)
    assert same.differing == 0 and same.first_difference is None and same.compared == 18
    lossy = check_level(base, frame({f"p{i}": [f"answer {i} " * 5 + "changed" + " x" * 40] * 3
                                     for i in range(6)}))
    assert lossy.identical_share == 0.0 and lossy.status == DIFFER and lossy.lossy
    assert lossy.differing == 18 and lossy.first_difference == (32, 32)  # character 45, in block 32-47
    assert lossy.shortfall_ci95 == (1.0, 1.0)


def test_a_baseline_that_disagrees_with_itself_sets_the_noise_the_candidate_may_have():
    """Sampling at temperature 0.7: the baseline answers each prompt two ways; the candidate no worse is
    the same. At temperature 0 the same baseline is named as not deterministic: it can check nothing."""
    noisy = {f"p{i}": [f"a{i} " * 20, f"a{i} " * 20, f"b{i} " * 20] for i in range(8)}
    check = check_level(frame(noisy), frame(noisy), temperature=0.7)
    assert check.baseline_self_share == pytest.approx(1 / 3)
    assert check.identical_share == pytest.approx(5 / 9)
    assert check.status == SAME and check.held is None
    greedy = check_level(frame(noisy), frame(noisy), temperature=0.0)
    assert greedy.status == NOT_DETERMINISTIC and greedy.held == "inconclusive"
    assert greedy.line().endswith("the baseline is not deterministic: its own answers to a prompt mostly "
                                  "differ")


def test_without_a_prompt_answered_twice_changed_answers_are_still_held_back():
    """The baseline answered every prompt once (a prompt set larger than a level's requests): no noise
    floor, but at temperature 0 a lossless candidate answers what the baseline answers."""
    base = frame({f"p{i}": [f"answer {i} " * 10] for i in range(20)})
    lossy = check_level(base, frame({f"p{i}": [f"answer {i} " * 3 + "else"] for i in range(20)}))
    assert lossy.identical_share == 0.0 and lossy.baseline_self_share is None
    assert lossy.status == UNMEASURED_DIFFER and lossy.lossy and lossy.held == "off"
    assert "its noise is unknown" in lossy.line()
    same = check_level(base, base)
    assert same.status == NOISE_UNKNOWN and same.held is None
    sampled = check_level(base, frame({f"p{i}": ["else"] for i in range(20)}), temperature=1.0)
    assert sampled.status == NOISE_UNKNOWN and not sampled.lossy  # sampling: no floor, nothing to hold
    assert check_level(base, frame({"other": ["x"]})) is None


def test_a_level_without_repeats_takes_the_baseline_floor_from_all_it_answered():
    base = frame({f"p{i}": [f"answer {i} " * 10] for i in range(20)})
    floor = Floor(0.9, 12, "all levels")
    half = check_level(base, frame({f"p{i}": [f"answer {i} " * 10 if i % 2 else "else"] for i in range(20)}),
                       floor)
    assert (half.status, half.floor_source, half.baseline_self_share) == (DIFFER, "all levels", 0.9)
    assert half.shortfall_ci95[0] > 0.05
    assert ("(baseline vs itself 90% over the 12 prompts it answered more than once, all levels)"
            in half.line())


def test_answers_that_differ_only_in_whitespace_are_identical_and_counted_apart():
    base = frame({f"p{i}": [f"answer {i}\n\nend of it"] * 2 for i in range(6)})
    spaced = check_level(base, frame({f"p{i}": [f"answer {i}\nend of it "] for i in range(6)}))
    assert (spaced.status, spaced.identical_share) == (SAME, 1.0)
    assert (spaced.whitespace_only, spaced.differing) == (6, 0)
    assert "6 differ from it in whitespace only (counted as identical)" in spaced.line()


def test_a_lossy_candidate_is_held_back_unless_allowed_and_a_lossless_one_ships(tmp_path):
    shape = {"levels": (1,), "requests_per_user": {1: 40}, "prompts_per_class": 4}
    base = write_run(tmp_path / "off" / "run", ArmSpec(speculative=False, **shape))
    lossless = write_run(tmp_path / "on" / "run", ArmSpec(speculative=True, seed=2, **shape))
    lossy = write_run(tmp_path / "lossy" / "run", ArmSpec(speculative=True, seed=2, changed_answers=0.5,
                                                          **shape))
    level = api.verdict_for([base], [lossless]).levels[0]
    assert level.verdict == "ship" and level.answers.status == SAME
    assert level.answers.identical_share == 1.0
    held = api.verdict_for([base], [lossy])
    level = held.levels[0]
    assert held.verdict == level.verdict == "off", level.reasons
    assert level.answers.status == DIFFER and level.answers.first_difference[0] == 96
    assert level.reasons[0].startswith("the answers changed: ")
    assert level.reasons[0].endswith("not shipped (--allow-lossy judges it on speed alone)")
    allowed = api.verdict_for([base], [lossy], allow_lossy=True).levels[0]
    assert allowed.verdict == "ship" and allowed.reasons[0].endswith("judged on speed alone (--allow-lossy)")
    assert "answers: " in api.render(held, "text") and '"status": "differ"' in api.render(held, "json")


SHAPE = {"levels": (1,), "requests_per_user": {1: 40}}


def test_every_answer_gate_case_on_built_runs(tmp_path):
    """Each case as spec-verdict reads it from run files: a lossy candidate against a baseline that answered
    no prompt twice, a baseline not deterministic, whitespace-only differences, a CSV without the answers."""
    def arm(name: str, speculative: bool, **spec) -> str:
        shape = {**SHAPE, "prompts_per_class": 4, **spec}
        return write_run(tmp_path / name / "run", ArmSpec(speculative=speculative, seed=1 + speculative,
                                                          **shape))

    once = {"prompt_per_request": True}  # the same 39 measured prompts in both arms, none answered twice
    held = api.verdict_for([arm("once", False, **once)], [arm("lossy", True, changed_answers=0.9, **once)])
    assert held.levels[0].answers.status == UNMEASURED_DIFFER and held.levels[0].verdict == "off"
    assert held.what_ran[1].signs == ("answers changed",)
    assert held.summary.startswith("The candidate's answers changed beyond the baseline's own noise at "
                                   "1 user")

    unsteady = api.verdict_for([arm("unsteady", False, unstable_answers=1.0)], [arm("on", True)])
    level = unsteady.levels[0]
    assert level.answers.status == NOT_DETERMINISTIC and level.verdict == "inconclusive"
    assert level.reasons[0].startswith("the baseline is not deterministic: 0% of its own answers")
    assert unsteady.summary.startswith("The baseline is not deterministic at 1 user")

    spaced = api.verdict_for([arm("off", False)], [arm("spaced", True, whitespace_answers=1.0)])
    level = spaced.levels[0]
    assert (level.verdict, level.answers.status, level.answers.identical_share) == ("ship", SAME, 1.0)
    assert level.answers.whitespace_only == level.answers.compared

    bare = api.verdict_for([arm("off", False)], [arm("bare", True, answer_columns=False)])
    assert bare.levels[0].answers.status == NOT_CHECKED
    text = api.render(bare, "text")
    assert "answers: not checked (the candidate's PREFIX_requests.csv holds no answers" in text


def test_the_baseline_self_check_gives_a_level_without_repeats_its_measured_noise_floor(tmp_path):
    """spec-ab's self-check (ab/self_check.py) answered prompts twice on purpose: a level whose requests
    never asked a prompt twice is judged against it, not 'noise unknown'."""
    def arm(name: str, speculative: bool, **spec) -> str:
        return write_run(tmp_path / name / "run", ArmSpec(speculative=speculative, seed=1 + speculative,
                                                          prompt_per_request=True, **SHAPE, **spec))

    base = arm("baseline", False)
    texts = {f"json-{i}": f"json-{i}: " + "the same greedy answer " * 12 for i in range(6)}
    twice = [self_check.record(Prompt(pid, "json", (), None), text) for pid, text in texts.items()] * 2
    self_check.write(tmp_path / "baseline" / self_check.FILE, twice, 0.0)
    same = api.verdict_for([base], [arm("same", True)]).levels[0]
    assert (same.answers.status, same.answers.baseline_self_share) == (SAME, 1.0)
    assert same.answers.floor_source == "all levels and the self-check" and same.verdict == "ship"
    lossy = api.verdict_for([base], [arm("lossy", True, changed_answers=0.9)]).levels[0]
    assert (lossy.answers.status, lossy.verdict) == (DIFFER, "off")
