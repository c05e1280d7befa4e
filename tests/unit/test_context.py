"""Prompts that cannot fit the server's context: bounds on their tokens and which are left out, counted
by a real tokenizer (spec-sim's, chat template included) or, without one, by the lower bound."""

from __future__ import annotations

import pytest

from locust_spec.client.context import lower_bound, too_long, upper_bound, warning
from locust_spec.core.prompts import Prompt, PromptError, PromptSampler
from locust_spec.sim.model import render_prompt, tokenizer


def prompt(pid: str, words: int, max_tokens: int | None = None) -> Prompt:
    text = " ".join(f"word{i} and more" for i in range(words))
    return Prompt(pid, "c", ({"role": "system", "content": "Be brief."}, {"role": "user", "content": text}),
                  max_tokens)


def server_count(p: Prompt) -> int:
    return len(tokenizer().encode(render_prompt(list(p.messages))))


@pytest.mark.parametrize("words", [0, 5, 200, 2000])
def test_the_bounds_hold_the_tokenizers_count(words):
    p = prompt("p", words)
    assert lower_bound(p) <= server_count(p) <= upper_bound(p)


def test_a_prompt_is_left_out_when_its_tokens_plus_its_max_tokens_exceed_the_context():
    short, long_, long_but_small_reply = prompt("s", 5), prompt("l", 400), prompt("m", 400, max_tokens=1)
    limit = server_count(long_) + 10

    def max_tokens(own: int | None) -> int:
        return own if own is not None else 64

    found = too_long([short, long_, long_but_small_reply], limit, max_tokens, server_count)
    assert [(f.prompt.id, f.max_tokens) for f in found] == [("l", 64)]
    assert found[0].tokens == server_count(long_)
    line = warning(found, 3, limit, counted=True)
    assert line.startswith("1 of 3 prompts left out") and "/tokenize" in line and str(limit) in line


def test_without_a_tokenizer_only_prompts_that_surely_do_not_fit_are_left_out():
    p = prompt("l", 400)
    limit = server_count(p)  # does not fit with any max_tokens, yet the lower bound says it might
    assert too_long([p], limit, lambda own: 16, lower_bound) == []
    assert too_long([p], lower_bound(p), lambda own: 16, lower_bound)[0].prompt is p
    assert "estimated without a /tokenize" in warning(too_long([p], 1, lambda own: 16, lower_bound), 1, 1,
                                                      counted=False)


def test_the_sampler_never_draws_a_prompt_left_out(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(f'{{"id": "{i}", "prompt": "x{i}"}}\n' for i in range(4)))
    sampler = PromptSampler([str(path)], seed=1)
    gone = [p for p in sampler.prompts if p.id in ("1", "2")]
    sampler.leave_out(gone)
    assert {sampler.next().id for _ in range(20)} == {"0", "3"}
    with pytest.raises(PromptError):
        sampler.leave_out(sampler.prompts)
