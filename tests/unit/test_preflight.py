"""The preflight's judgement (pure): what each observation means, in one line naming the fix."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

import pytest

from locust_spec.ab import preflight
from locust_spec.ab.preflight import Arm, Flags, Observed, Probe
from locust_spec.client.client import chat_body
from locust_spec.core.prompts import Prompt
from locust_spec.metrics.counters import parse_exposition_checked
from locust_spec.wiring.options import settings_from

BASE = Arm("baseline", "http://a:8000", None, False, "--baseline", "--metrics-url-baseline")
CAND = Arm("candidate", "http://b:8000", None, True, "--candidate", "--metrics-url-candidate")
PROMPTS = (Prompt("p-1", "chat", ({"role": "user", "content": "hi"},), None),
           Prompt("p-2", "code", ({"role": "user", "content": "x" * 4000},), None),
           Prompt("p-3", "json", ({"role": "user", "content": "y" * 100},), 3000))


def _metrics(generated: float, drafts: float | None = None) -> object:
    text = ("# TYPE vllm:generation_tokens counter\n"
            f"vllm:generation_tokens_total{{engine=\"0\"}} {generated}\n")
    if drafts is not None:
        text += ("# TYPE vllm:spec_decode_num_drafts counter\n"
                 f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {drafts}\n"
                 "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
                 f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {4 * drafts}\n"
                 "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
                 f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {2 * drafts}\n")
    return parse_exposition_checked(text)


def _seen(speculates: bool, **changes) -> Observed:
    ok = Observed(models=("m",), models_error=None, max_model_len=4096, model="m",
                  probes=(Probe("p-2", 16, None), Probe("p-3", 16, None)),
                  metrics_before=_metrics(10, 3 if speculates else None),
                  metrics_after=_metrics(42, 9 if speculates else None), metrics_error=None)
    return replace(ok, **changes)


def _judge(base: Observed | None = None, cand: Observed | None = None, model: str = "",
           arms: tuple[Arm, Arm] = (BASE, CAND), max_tokens: int | None = None,
           flags: Flags = preflight.SPEC_AB) -> list[preflight.Problem]:
    seen = (base or _seen(False), cand or _seen(True))
    return preflight.judge(arms, seen, model, PROMPTS, max_tokens, flags)


def _options(problem: preflight.Problem) -> set[str]:
    return set(re.findall(r"--[a-z-]+", problem.fix)) - {"--speculative-config"}


def test_two_healthy_arms_have_no_problem():
    assert _judge() == []
    assert _judge(model="m") == []


def test_a_dead_arm_is_one_line_naming_its_url_option_and_its_default_metrics_are_not_blamed_again():
    dead = _seen(True, models=None, models_error="[Errno 111] Connection refused", max_model_len=None,
                 model=None, probes=(), metrics_before=None, metrics_after=None,
                 metrics_error="[Errno 111] Connection refused")
    problems = _judge(cand=dead)
    assert [p.line() for p in problems] == [
        "preflight FAILED: candidate: cannot read http://b:8000/v1/models ([Errno 111] Connection refused); "
        "fix: start the server, or correct --candidate"]


def test_an_api_key_or_a_wrong_path_is_named_as_such():
    refused = _judge(base=_seen(False, models=None, models_error="HTTP 401: invalid key", model=None))
    assert refused[0].fix == "set OPENAI_API_KEY to the server's API key"
    missing = _judge(base=_seen(False, models=None, models_error="HTTP 404: Not Found", model=None))
    assert "root URL" in missing[0].fix and _options(missing[0]) == {"--baseline"}


def test_a_model_not_served_names_the_one_that_is():
    problems = _judge(model="other")
    assert [(p.arm, p.fix) for p in problems] == [("baseline", "pass --model m"),
                                                  ("candidate", "pass --model m")]


def test_arms_serving_different_models_are_refused_and_a_shared_one_is_suggested():
    base = _seen(False, models=("a", "shared"), model="a")
    cand = _seen(True, models=("b", "shared"), model="b")
    (problem,) = _judge(base, cand)
    assert problem.arm == "both" and "baseline a, candidate b" in problem.what
    assert problem.fix == "pass --model shared"
    (apart,) = _judge(_seen(False, models=("a",), model="a"), _seen(True, models=("b",), model="b"))
    assert apart.fix == "serve the same model on both arms"


def test_max_tokens_at_or_above_the_context_cannot_fit():
    problems = _judge(base=_seen(False, max_model_len=3000))
    assert len(problems) == 1 and "1 prompt(s) ask for up to 3000 tokens" in problems[0].what
    assert problems[0].fix == "pass --max-tokens below 3000"
    assert len(_judge(base=_seen(False, max_model_len=300), max_tokens=300)) == 1


def test_a_probe_the_server_refused_for_its_length_names_the_prompt_and_the_servers_reason():
    reason = "HTTP 400: This model's maximum context length is 4096 tokens; the prompt has 5000 tokens"
    problems = _judge(base=_seen(False, probes=(Probe("p-2", 0, reason, 400),)))
    assert len(problems) == 1 and "prompt 'p-2' does not fit the context (HTTP 400: This model's" in \
        problems[0].what
    assert problems[0].fix == ("leave that prompt out (--max-prompt-chars below its length) or its prompt "
                               "set (--prompts)")


@pytest.mark.parametrize(("reason", "fix"), [
    ("This model's maximum context length is 4096 tokens; the prompt has 4000 tokens and max_tokens is 256.",
     "pass --max-tokens 96 or less"),  # spec-sim
    ("This model's maximum context length is 4096 tokens. However, you requested 4352 tokens (4096 in the "
     "messages, 256 in the completion).",
     "leave that prompt out (--max-prompt-chars below its length) or its prompt set (--prompts)"),
    ("prompt too long for the context window", "lower --max-tokens, or leave out its prompt set (--prompts)"),
])
def test_the_fix_for_a_prompt_over_the_context_depends_on_what_overflows(reason, fix):
    (problem,) = _judge(base=_seen(False, probes=(Probe("p-2", 0, f"HTTP 400: {reason}", 400),)))
    assert problem.fix == fix


def test_a_probe_that_got_no_token_says_why():
    other = _judge(base=_seen(False, probes=(Probe("p-2", 0, "HTTP 500: boom", 500),)))
    assert "no streamed token for prompt 'p-2' (HTTP 500: boom)" in other[0].what
    silent = _judge(base=_seen(False, probes=(Probe("p-2", 0, None),)))
    assert "ended without a token" in silent[0].what
    timeout = _judge(base=_seen(False, probes=(Probe("p-2", 0, "timed out"),)))
    assert _options(timeout[0]) == {"--baseline"}


def test_a_candidate_metrics_url_without_speculation_counters_is_another_server():
    (problem,) = _judge(cand=_seen(False))
    assert problem.arm == "candidate" and "no speculative-decoding counters" in problem.what
    assert _options(problem) == {"--metrics-url-candidate"}


def test_baseline_draft_counters_that_move_mean_it_speculates():
    (problem,) = _judge(base=_seen(True))
    assert problem.arm == "baseline" and "draft counters" in problem.what and "moved" in problem.what
    assert _options(problem) == {"--metrics-url-baseline"}
    still = _seen(True, metrics_after=_metrics(42, 3))
    assert _judge(base=still) == [], "counters present but still: a shared exporter, not speculation"


def test_swapped_arms_are_one_line_asking_whether_they_were_swapped():
    (problem,) = _judge(base=_seen(True), cand=_seen(False))
    assert problem.arm == "both" and "the baseline (http://a:8000) drafted" in problem.what
    assert problem.fix.startswith("did you swap --baseline and --candidate?")
    # one arm wrong alone is not a swap: its own fix, as before
    assert "did you swap" not in _judge(base=_seen(True))[0].fix


def test_unreadable_metrics_name_the_option_or_the_token():
    gone = _judge(cand=_seen(True, metrics_after=None, metrics_error="HTTP 404: Not Found"))
    assert gone[0].fix == "pass --metrics-url-candidate URL of that server's /metrics"
    locked = _judge(base=_seen(False, metrics_after=None, metrics_error="HTTP 401"))
    assert locked[0].fix == "set LOCUST_SPEC_METRICS_TOKEN to its bearer token"
    html = _judge(base=_seen(False, metrics_before=parse_exposition_checked("<html>"),
                             metrics_after=parse_exposition_checked("<html>")))
    assert "is not Prometheus text" in html[0].what


def test_candidate_metrics_off_is_a_warning_not_a_failure():
    arms = (BASE, replace(CAND, metrics_url="off"))
    (problem,) = _judge(arms=arms, cand=_seen(True, metrics_before=None, metrics_after=None))
    assert not problem.fatal and problem.line().startswith("preflight warning: candidate:")


def test_one_server_or_one_metrics_url_for_both_arms_is_refused():
    same = _judge(arms=(BASE, replace(CAND, url="http://a:8000/")), cand=_seen(True))
    assert any(p.arm == "both" and "same server" in p.what for p in same)
    shared = _judge(arms=(BASE, replace(CAND, metrics_url="http://a:8000/metrics")))
    assert any("both arms scrape http://a:8000/metrics" in p.what for p in shared)


def test_a_callers_own_option_names_are_the_ones_in_the_fixes():
    flags = Flags(model="--served-model", prompts="--prompt-set", max_tokens="--limit")
    arms = (replace(BASE, url_flag="--off-url"), replace(CAND, url_flag="--on-url"))
    problems = _judge(model="x", arms=arms, flags=flags, base=_seen(False, max_model_len=100))
    assert {o for p in problems for o in _options(p)} == {"--served-model", "--limit"}


def test_the_probes_are_the_prompts_most_likely_to_overflow():
    assert [p.id for p in preflight.riskiest(PROMPTS, None)] == ["p-3", "p-2"]
    assert [p.id for p in preflight.riskiest(PROMPTS, 4000, k=1)] == ["p-2"]


def _texts(*pairs: tuple[str, str]) -> list[Prompt]:
    return [Prompt(pid, "c", ({"role": "user", "content": text},), None) for pid, text in pairs]


# bytes/4 ranks the English prompts first; the Cyrillic one (2 bytes a letter, a token each by some
# tokenizers) is the one that overflows a 2,048-token context
MIXED = _texts(("en-1", "word " * 1500), ("en-2", "word " * 1400), ("en-3", "word " * 1300),
               ("ru", "ж" * 2100), ("short", "hi"))


def _tokens(prompt: Prompt) -> int:
    """A tokenizer for the test: a token per word, or per letter of a word outside its vocabulary."""
    text = prompt.messages[0]["content"]
    return sum(1 if w.isascii() else len(w) for w in text.split()) + 8


def test_with_the_servers_tokenizer_the_probes_are_the_prompts_it_counts_longest():
    assert [p.id for p in preflight.riskiest(MIXED, 64)] == ["en-1", "en-2"], "by bytes/4"
    assert [p.id for p in preflight.riskiest(MIXED, 64, count=_tokens, max_model_len=2048)] == ["ru", "en-1"]
    # the context unknown: the prompts bytes/4 puts first are counted (all five here)
    assert preflight.riskiest(MIXED, 64, count=_tokens)[0].id == "ru"


def test_a_prompt_the_tokenizer_cannot_count_keeps_its_estimate():
    def fails_on_ru(prompt: Prompt) -> int:
        if prompt.id == "ru":
            raise OSError("HTTP 500")
        return _tokens(prompt)

    chosen = preflight.riskiest(MIXED, 64, count=fails_on_ru, max_model_len=2048)
    assert [p.id for p in chosen] == ["en-1", "en-2"]


def test_without_a_tokenizer_prompts_near_the_context_by_bytes_are_probed_too():
    # en-3's estimate (about 1,630 + 64) comes within 25% of a 2,048 context; "ru" (about 1,060) does not
    chosen = [p.id for p in preflight.riskiest(MIXED, 64, max_model_len=2048)]
    assert chosen == ["en-1", "en-2", "en-3"]
    assert [p.id for p in preflight.riskiest(MIXED, 64, max_model_len=8192)] == ["en-1", "en-2"]


def test_credentials_never_show_in_a_repr():
    text = repr(preflight.Credentials("sk-secret", "tok-secret"))
    assert "secret" not in text


def test_the_preflight_checks_the_max_tokens_that_is_sent():
    """#44: a prompt's own max_tokens 1024 under --max-tokens 128 is sent with 128; the preflight checked 1024
    against the context (and refused a 3,000-token one at a 3,000-token context) while 128 was sent."""
    own = Prompt("own", "json", ({"role": "user", "content": "x" * 2000},), 1024)
    options = argparse.Namespace(max_tokens="128", temperature=0.0, ignore_eos=False, response_format="",
                                 client="fast", request_timeout=1.0, connect_timeout=1.0,
                                 first_token_timeout=1.0, idle_timeout=1.0, max_line_bytes=65536,
                                 max_response_bytes=1 << 20)
    sent = chat_body(settings_from(options, "m"), own.messages, False, {"max_tokens": own.max_tokens})
    assert sent["max_tokens"] == preflight.max_tokens_of(own, 128) == 128
    assert preflight.unfit([own], 1200, 128, lambda p: 1000) == ()  # 1000 + 128 fits; + 1024 would not
    assert [f.max_tokens for f in preflight.unfit([own], 1100, 128, lambda p: 1000)] == [128]
    assert _judge(base=_seen(False, max_model_len=3000), max_tokens=128) == []  # p-3 asks 3000 of its own


def test_prompts_that_cannot_fit_the_context_are_left_out_with_a_note_naming_them():
    """The default prompt set against a 2,048-token context: json-025 (2,049 tokens) failed the preflight,
    whose fix ("lower --max-tokens") could not help; the runs leave it out, as a plain Locust run does."""
    long = Prompt("json-025", "json", ({"role": "user", "content": "z" * 9000},), None)
    prompts = (*PROMPTS[:2], long)

    def count(prompt: Prompt) -> int:
        return 2049 if prompt is long else 100

    left = preflight.unfit(prompts, 2048, None, count)
    assert [(f.prompt.id, f.tokens, f.max_tokens) for f in left] == [("json-025", 2049, 256)]
    seen = _seen(False, max_model_len=2048, left_out=left, counted=True)
    (note,) = preflight.judge((BASE, CAND), (seen, _seen(True)), "", prompts, None)
    assert not note.fatal and note.line().startswith("preflight warning: baseline: 1 of 3 prompts cannot fit "
                                                     "the model's context of 2048")
    assert "json-025 (2049 + 256 tokens)" in note.what and "counted by its /tokenize" in note.what
    assert note.fix.startswith("--max-prompt-chars 8999 leaves them out of the prompt sets")
    # none left: no run could send a request
    none_fit = _seen(False, max_model_len=300, left_out=preflight.unfit(prompts, 300, None, count))
    (fatal,) = preflight.judge((BASE, CAND), (none_fit, _seen(True)), "", prompts, None)
    assert fatal.fatal and "no prompt fits the model's context of 300" in fatal.what
    assert preflight.unfit(prompts, None, None, count) == ()  # the context unknown: every prompt is sent
