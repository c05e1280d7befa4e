"""Prompt sets: JSONL formats, validation with one clear line, weights and a seeded order."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from locust_spec.core.prompts import (
    PromptError,
    PromptSampler,
    load_prompt_set,
    parse_weighted,
    prompt_specs,
    stream_seed,
)


@pytest.fixture
def sets(tmp_path):
    a = tmp_path / "alpha.jsonl"
    a.write_text('{"id": "a1", "class": "json", "prompt": "p1", "max_tokens": 32}\n\n'
                 '{"messages": [{"role": "user", "content": "p2"}]}\n')
    b = tmp_path / "beta.jsonl"
    b.write_text("".join(f'{{"prompt": "b{i}"}}\n' for i in range(5)))
    return a, b


def test_prompt_and_messages_lines_load_with_class_and_id_defaults(sets):
    a, _ = sets
    first, second = load_prompt_set(str(a))
    assert (first.id, first.cls, first.max_tokens) == ("a1", "json", 32)
    assert first.messages == ({"role": "user", "content": "p1"},)
    assert (second.id.rsplit("-", 1)[0], second.cls, second.max_tokens) == ("alpha-3", "alpha", None)
    assert len(second.id.rsplit("-", 1)[1]) == 6  # its content's digest (formats.content_id)


@pytest.mark.parametrize("line, message", [
    ("{oops", "not JSON"),
    ('{"text": "x"}', "needs 'turns', 'conversations', 'messages' or a string 'prompt'"),
    ('{"messages": []}', "messages must be"),
    ('{"prompt": "x", "max_tokens": 0}', "max_tokens"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(PromptError, match=rf"bad.jsonl:2: .*{message}"):
        load_prompt_set(str(path))


def test_unknown_set_name_lists_builtins():
    with pytest.raises(PromptError, match="no prompt set 'nosuchset'"):
        load_prompt_set("nosuchset")


def test_weight_suffix_is_parsed_and_paths_keep_their_colons():
    assert parse_weighted("code:3") == ("code", 3.0)
    assert parse_weighted("code") == ("code", 1.0)
    assert parse_weighted("/tmp/a:b.jsonl") == ("/tmp/a:b.jsonl", 1.0)
    with pytest.raises(PromptError):
        parse_weighted("code:0")


def test_same_seed_same_order_and_weights_shape_the_mix(sets):
    a, b = sets
    specs = [f"{a}:1", f"{b}:3"]

    def draw(seed: int, n: int) -> list[str]:
        sampler = PromptSampler(specs, seed)
        return [sampler.next().id for _ in range(n)]

    assert draw(7, 50) == draw(7, 50) != draw(8, 50)
    ids = draw(1, 4000)
    by_set = Counter("beta" if i.startswith("beta") else "alpha" for i in ids)
    assert 2.5 < by_set["beta"] / by_set["alpha"] < 3.5


def test_each_set_cycles_through_all_its_prompts(sets):
    _, b = sets
    sampler = PromptSampler([str(b)], seed=3)
    assert sorted(sampler.next().id.rsplit("-", 1)[0] for _ in range(5)) == [f"beta-{i}" for i in range(1, 6)]


def test_worker_zero_draws_the_run_seed_and_the_others_the_documented_hash():
    assert stream_seed(7, 0) == 7
    assert stream_seed(7, 1) == int.from_bytes(hashlib.sha256(b"7:1").digest()[:8], "big")
    seeds = {stream_seed(run, worker) for run in range(20) for worker in range(1, 50)}
    assert len(seeds) == 20 * 49 and not seeds & set(range(20))
    with pytest.raises(ValueError, match="worker index"):
        stream_seed(7, -1)


def test_workers_of_one_run_send_different_sequences_each_reproducible():
    def stream(worker: int) -> list[str]:
        sampler = PromptSampler(["code"], stream_seed(7, worker))
        return [sampler.next().id for _ in range(20)]

    streams = [stream(w) for w in range(4)]
    assert streams == [stream(w) for w in range(4)]
    assert len({tuple(s) for s in streams}) == 4
    single_process = PromptSampler(["code"], 7)
    assert streams[0] == [single_process.next().id for _ in range(20)]


@pytest.mark.parametrize("value, specs", [
    (None, ["all"]),
    ([], ["all"]),
    (["code", "json:3"], ["code", "json:3"]),
    (["code,json:3", "quote"], ["code", "json:3", "quote"]),
    ("code", ["code"]),
    ("code, json:3 ,", ["code", "json:3"]),
    ("", ["all"]),
])
def test_prompt_option_from_the_command_line_or_the_web_form(value, specs):
    assert prompt_specs(value) == specs
