"""spec-verdict vocab: matching and mismatching tokenizers, from folders or single files."""

from __future__ import annotations

import json

import pytest
from locust_spec.analysis.cli import run


def tokenizer(vocab_size: int, specials: dict[str, int], merges=("a b",)) -> dict:
    vocab = {f"t{i}": i for i in range(vocab_size)}
    added = [{"id": i, "content": c, "special": True} for c, i in specials.items()]
    return {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": list(merges)},
            "added_tokens": added, "normalizer": None, "pre_tokenizer": None, "decoder": None}


def model_dir(root, name, vocab_size=100, specials=None, config_vocab=None, merges=("a b",)):
    folder = root / name
    folder.mkdir()
    specials = {"<s>": 100, "</s>": 101} if specials is None else specials
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer(vocab_size, specials, merges)))
    (folder / "config.json").write_text(json.dumps({"vocab_size": config_vocab or vocab_size + 2,
                                                    "bos_token_id": 100, "eos_token_id": 101}))
    return folder


def vocab(capsys, *args):
    code = run(["vocab", *map(str, args)])
    return code, capsys.readouterr()


def test_same_tokenizer_matches(tmp_path, capsys):
    code, out = vocab(capsys, model_dir(tmp_path, "target"), model_dir(tmp_path, "draft"))
    assert code == 0
    assert "MATCH" in out.out and "MISMATCH" not in out.out


@pytest.mark.parametrize(
    ("draft_kwargs", "problem"),
    [
        ({"vocab_size": 90}, "tokenizer vocabulary size differs: target 102, draft 92"),
        ({"config_vocab": 200}, "config vocab_size differs: target 102, draft 200"),
        ({"specials": {"<s>": 100, "</s>": 102}}, "special token </s> has id 101 in the target, 102"),
        ({"specials": {"<s>": 100, "</s>": 101, "<|im_end|>": 103}}, "special tokens in only one of them"),
        ({"merges": ("b c",)}, "tokenizer content differs"),
    ],
)
def test_mismatch_is_named_and_exits_1(tmp_path, capsys, draft_kwargs, problem):
    code, out = vocab(capsys, model_dir(tmp_path, "target"), model_dir(tmp_path, "draft", **draft_kwargs))
    assert code == 1
    assert "MISMATCH" in out.out and problem in out.out


def test_single_files_are_accepted(tmp_path, capsys):
    target, draft = model_dir(tmp_path, "target"), model_dir(tmp_path, "draft", vocab_size=50)
    code, out = vocab(capsys, target / "tokenizer.json", draft / "tokenizer.json")
    assert code == 1 and "tokenizer vocabulary size differs" in out.out
    code, out = vocab(capsys, target / "config.json", draft / "config.json")
    assert code == 1 and "config vocab_size differs" in out.out


@pytest.mark.parametrize("bad", ["missing", "empty-dir", "broken-json"])
def test_bad_model_paths_exit_2_with_one_line(tmp_path, capsys, bad):
    target = model_dir(tmp_path, "target")
    other = tmp_path / bad
    if bad == "empty-dir":
        other.mkdir()
    elif bad == "broken-json":
        other.write_text("{not json")
    code, out = vocab(capsys, target, other)
    assert code == 2 and len(out.err.strip().splitlines()) == 1
