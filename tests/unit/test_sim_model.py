"""Target model, tokenizer and drafters: deterministic, copy-aware, with real n-gram lookup."""

import pytest

from locust_spec.sim import model as M
from locust_spec.sim.drafters import NgramIndex, draft_model_proposal, parse_spec_config

TEXT = ("The Python Software Foundation License allows use, copying and distribution of the software. "
        "Redistributions must retain the copyright notice, this list of conditions and the disclaimer. "
        ) * 3


def target_for(instruction: str, seed_text: str = TEXT,
               ignore_eos: bool = True) -> tuple[list[int], M.Target]:
    tok = M.tokenizer()
    user = f"{instruction}\n{seed_text}"
    prompt = tok.encode(M.render_prompt([{"role": "user", "content": user}]))
    style = M.style_for(user)
    source = tok.encode(M.copy_source(user))
    return prompt, M.Target(prompt, source, style, M.request_seed([user]), ignore_eos)


def ngram_acceptance(instruction: str, k: int = 5, tokens: int = 200) -> tuple[float, list[int], int]:
    prompt, target = target_for(instruction)
    index = NgramIndex(list(prompt), 2, 4)
    drafted = accepted = g = 0
    per_pos = [0] * k
    while g < tokens:
        drafts = index.propose(k)
        a = 0
        while a < len(drafts) and drafts[a] == target.token(g + a):
            per_pos[a] += 1
            a += 1
        drafted += len(drafts)
        accepted += a
        for i in range(a + 1):
            index.append(target.token(g + i))
        g += a + 1
    return accepted / max(1, drafted), per_pos, accepted


def test_tokenizer_round_trips_any_text():
    tok = M.tokenizer()
    text = "Zoë's naïve café — 42 × π ≈ 131.9\n\tdef f(x): return x"
    assert tok.decode(tok.encode(text)) == text


def test_instruction_words_choose_copying_or_novel_styles():
    assert M.style_for("Quote verbatim the lines below").name == "quote"
    assert M.style_for("Rename the variables in this function").name == "edit"
    assert M.style_for("Extract the fields as JSON").name == "extract"
    assert M.style_for("Write a poem about the sea").name == "novel"
    assert M.style_for("What is a context manager?").name == "novel"
    assert M.style_for("Describe the copyright file").name == "novel"


def test_specbench_task_instructions_choose_their_style_whatever_the_passage_says():
    passage = "Everyone is permitted to copy and distribute verbatim copies of this license."
    assert M.style_for(f"Summarize the following text in three sentences.\n\n{passage}").name == "digest"
    assert M.style_for(f"Translate the following German text into English.\n\n{passage}").name == "translate"
    assert M.style_for(f"Answer the question using only the passages below.\n\n{passage}").name == "retrieve"
    assert M.style_for(f"Solve the following problem step by step.\n\n{passage}").name == "reason"
    assert M.style_for("Which module converts to JSON? Answer with the module name only.").name == "novel"


def test_a_turn_that_reworks_the_previous_answer_copies_the_assistants_message():
    messages = [{"role": "user", "content": "Write about tides."}, {"role": "assistant", "content": "TIDES"},
                {"role": "user", "content": "Rewrite your previous response as a bulleted list."}]
    assert M.copy_source_of(messages) == "TIDES"
    unrelated = [*messages[:2], {"role": "user", "content": "Rewrite:\nthis text"}]
    assert M.copy_source_of(unrelated) == "this text"


def test_specbench_tasks_rank_as_in_specbench_copy_heavy_above_math_above_translation():
    summary, _, _ = ngram_acceptance("Summarize the following text in three sentences.")
    retrieved, _, _ = ngram_acceptance("Answer the question using only the passages below.")
    reasoned, _, _ = ngram_acceptance("Solve the following problem step by step.")
    translated, _, _ = ngram_acceptance("Translate the following text into French.")
    assert min(summary, retrieved) > 0.5 > reasoned > translated


def test_target_output_depends_only_on_the_request():
    _, a = target_for("Write a story about licenses")
    _, b = target_for("Write a story about licenses")
    assert [a.token(i) for i in range(100)] == [b.token(i) for i in range(100)]


def test_quoting_copies_the_context_and_creative_writing_does_not():
    quote, _, _ = ngram_acceptance("Quote verbatim the text below.")
    story, _, _ = ngram_acceptance("Write a story inspired by this text.")
    assert quote > 0.5 > story


def test_per_position_acceptance_falls_and_sums_to_the_accepted_total():
    _, per_pos, accepted = ngram_acceptance("Rewrite this text with clearer wording.")
    assert sum(per_pos) == accepted
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))


def test_ngram_index_proposes_what_followed_the_latest_match_never_the_suffix_itself():
    index = NgramIndex([1, 2, 3, 4, 1, 2, 5, 1, 2], 2, 3)
    assert index.propose(3) == [5, 1, 2]
    assert NgramIndex([7, 8, 9], 2, 2).propose(3) == []


def test_draft_model_agreement_is_deterministic_and_follows_p():
    prompt, target = target_for("Write a poem")
    perfect = draft_model_proposal(target.token, 1, 0, 4, 1.0)
    assert perfect == [target.token(i) for i in range(4)]
    hits = sum(draft_model_proposal(target.token, 7, pos, 1, 0.3)[0] == target.token(pos)
               for pos in range(400))
    assert 80 < hits < 160
    again = draft_model_proposal(target.token, 7, 3, 4, 0.5)
    assert draft_model_proposal(target.token, 7, 3, 4, 0.5) == again


def test_spec_config_accepts_vllm_keys_and_rejects_nonsense():
    cfg = parse_spec_config({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
                             "prompt_lookup_min": 1})
    assert (cfg.prompt_lookup_max, cfg.prompt_lookup_min) == (3, 1)
    assert parse_spec_config({"method": "draft_model", "model": "x", "num_speculative_tokens": 3,
                              "vocab_mismatch": True}).agreement < 0.05
    for bad in ({"method": "ngram"}, {"method": "magic", "num_speculative_tokens": 2}):
        try:
            parse_spec_config(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_spec_config_says_which_methods_vllm_removed_and_checks_synthetic_acceptance_as_vllm():
    messages = {}
    for bad in ({"method": "medusa", "num_speculative_tokens": 2},
                {"method": "mlp_speculator", "num_speculative_tokens": 2},
                {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic"},
                {"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_length": 2.0},
                {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                 "synthetic_acceptance_length": 3.5},
                {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                 "synthetic_acceptance_rates": [0.5, 0.7]},
                {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "fly"}):
        try:
            parse_spec_config(bad)
        except ValueError as e:
            messages[str(bad)] = str(e)
            continue
        raise AssertionError(f"accepted {bad}")
    said = list(messages.values())
    assert said[0] == ("speculative method 'medusa' was removed in vLLM 0.33 (with 'mlp_speculator'): use "
                       "eagle, eagle3, mtp, draft_model or ngram")
    assert "'mlp_speculator' was removed in vLLM 0.33" in said[1]
    assert "requires exactly one of" in said[2] and "only valid with" in said[3]
    assert "[1, 3]" in said[4] and "non-increasing" in said[5] and "'fly' is not simulated" in said[6]
    explicit = parse_spec_config({"method": "ngram", "num_speculative_tokens": 3,
                                  "rejection_sample_method": "synthetic",
                                  "synthetic_acceptance_rates": [0.9, 0.5, 0.5]})
    assert explicit.synthetic_rates == (0.9, 0.5, 0.5)
    for length, rates in ((2.6, (1.0, 0.6, 0.0)), (1.0, (0.0, 0.0, 0.0)), (4.0, (1.0, 1.0, 1.0))):
        synthetic = {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": length}
        config = parse_spec_config({"method": "mtp", "num_speculative_tokens": 3, **synthetic})
        assert config.synthetic_rates == pytest.approx(rates)
