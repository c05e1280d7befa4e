"""A trace row's prompt (core/trace_text.py): real text at the row's length, shared blocks where the row
shares hash_ids, the same bytes from the same seed in every process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from locust_spec.ab.preflight import estimated_tokens
from locust_spec.core.prompts import load_prompt_set
from locust_spec.core.trace_text import BYTES_PER_TOKEN, Corpus, block_starts, builtin_corpus, trace_prompt
from locust_spec.core.traces import TraceRow, read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
CORPUS = builtin_corpus()


def content(prompt) -> bytes:
    return prompt.messages[0]["content"].encode()


@pytest.mark.parametrize("tokens", [100, 511, 512, 1500, 16_000])
def test_a_prompt_is_as_long_as_the_row_by_the_projects_estimate(tokens):
    prompt = trace_prompt(TraceRow(7, 0.0, tokens, 33), CORPUS)
    assert abs(len(content(prompt)) - tokens * BYTES_PER_TOKEN) <= 3 * (tokens // 512 + 1)
    # a character cut at a block's edge goes (up to 3 bytes a block): the text is 4 bytes a token, as
    # spec-ab's preflight estimates a prompt with no tokenizer at hand (it counts the message's JSON)
    assert estimated_tokens(prompt) >= tokens - 1
    assert prompt.max_tokens == 33 and prompt.id == "trace-7" and prompt.cls == "trace"


def test_the_text_is_the_corpus_own_words():
    text = content(trace_prompt(TraceRow(0, 0.0, 300, 5), CORPUS))
    assert text[:200] in CORPUS.text


def test_rows_sharing_hash_ids_share_those_blocks_of_text_and_no_more():
    rows = read_trace(DATA / "mooncake.jsonl").rows  # ids [0,1,2], [0,1,3], [4,5], [0,1,2,6]
    first, second, other, longer = (content(trace_prompt(r, CORPUS, seed=3)) for r in rows)
    block = 512 * BYTES_PER_TOKEN
    assert first[:2 * block - 8] == second[:2 * block - 8]
    assert first[2 * block + 8:2 * block + 200] != second[2 * block + 8:2 * block + 200]
    assert longer[:len(first) - 8] == first[:-8]  # its third block is the whole of first's partial one
    assert other[:200] != first[:200]


def test_distinct_ids_and_rows_without_ids_never_start_at_one_place():
    # drawn places would collide (the birthday bound: about 16 pairs among 5,000 in a 776 kB corpus)
    with_ids = {block_starts(TraceRow(0, 0.0, 10, 1, (i,)), CORPUS, 9, 1)[0] for i in range(5000)}
    without = {block_starts(TraceRow(i, 0.0, 10, 1), CORPUS, 9, 1)[0] for i in range(5000)}
    assert len(with_ids) == 5000 and len(without) == 5000


def test_rows_without_hash_ids_share_nothing():
    a, b = (content(trace_prompt(TraceRow(i, 0.0, 1000, 5), CORPUS, seed=1)) for i in (0, 1))
    assert a[:200] != b[:200]


def test_the_seed_names_the_text_and_block_size_is_an_option():
    row = TraceRow(0, 0.0, 600, 5, (1, 2))
    assert trace_prompt(row, CORPUS, seed=5) == trace_prompt(row, CORPUS, seed=5)
    five, six = (content(trace_prompt(row, CORPUS, seed=seed)) for seed in (5, 6))
    assert five[:200] != six[:200]
    small = trace_prompt(row, CORPUS, seed=5, block_tokens=16)
    assert abs(len(content(small)) - 600 * BYTES_PER_TOKEN) <= 3 * (600 // 16 + 1)
    with pytest.raises(ValueError, match="at least one token"):
        trace_prompt(row, CORPUS, block_tokens=0)


def test_another_process_with_another_hash_seed_builds_the_same_bytes():
    code = ("from locust_spec.core.trace_text import builtin_corpus, trace_prompt;"
            "from locust_spec.core.traces import TraceRow;"
            "import sys; sys.stdout.write(trace_prompt(TraceRow(4, 0.0, 900, 5, (8, 9)), builtin_corpus(),"
            " seed=11).messages[0]['content'])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60, check=True)
    here = trace_prompt(TraceRow(4, 0.0, 900, 5, (8, 9)), CORPUS, seed=11).messages[0]["content"]
    assert out.stdout.decode() == here


def test_a_corpus_is_the_prompts_text_and_must_hold_a_block():
    corpus = Corpus.of(load_prompt_set("chat"))
    assert b"platform module" in corpus.text
    with pytest.raises(ValueError, match="at least"):
        Corpus(b"too short")
