"""The built-in prompt sets: well-formed, large enough, reproducible, and honest about their class."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
COPYING = ("json", "code", "quote", "boilerplate")
OPEN = ("chat", "creative")


def load_build():
    spec = importlib.util.spec_from_file_location("prompt_build", PROMPTS / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = load_build()


def committed(cls: str) -> list[dict]:
    return [json.loads(line) for line in (PROMPTS / f"{cls}.jsonl").read_text(encoding="utf-8").splitlines()]


def text(row: dict) -> str:
    return row["messages"][-1]["content"]


def split(row: dict) -> tuple[str, str]:
    instruction, _, context = text(row).partition("\n\n")
    return instruction, context


@pytest.mark.parametrize("cls", build.CLASSES)
def test_each_set_parses_into_at_least_50_well_formed_prompts_of_its_class(cls):
    rows = committed(cls)
    assert len(rows) >= 50
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    for row in rows:
        assert re.fullmatch(rf"{cls}-\d{{3}}", row["id"])
        assert row["class"] == cls
        assert row["messages"] and all(m["role"] in ("system", "user", "assistant") for m in row["messages"])
        assert row["messages"][-1]["role"] == "user"
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in row["messages"])
        assert isinstance(row["max_tokens"], int) and row["max_tokens"] > 0


def test_ids_are_unique_across_all_sets_and_files_stay_small():
    ids = [r["id"] for cls in build.CLASSES for r in committed(cls)]
    assert len(set(ids)) == len(ids)
    for cls in build.CLASSES:
        assert (PROMPTS / f"{cls}.jsonl").stat().st_size < 300_000


def test_rebuilding_from_the_same_sources_reproduces_the_committed_files_byte_for_byte(tmp_path):
    subprocess.run([sys.executable, str(PROMPTS / "build.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    if (tmp_path / "SOURCES.json").read_bytes() != (PROMPTS / "SOURCES.json").read_bytes():
        pytest.skip("this machine's Python/Debian texts differ from those the committed sets were built from")
    for cls in build.CLASSES:
        assert (tmp_path / f"{cls}.jsonl").read_bytes() == (PROMPTS / f"{cls}.jsonl").read_bytes(), cls


def test_two_builds_on_one_machine_are_identical():
    first = build.build_sets(build.default_sources())
    second = build.build_sets(build.default_sources())
    assert {c: build.render(r) for c, r in first.items()} == {c: build.render(r) for c, r in second.items()}


def test_without_debian_texts_every_class_still_reaches_50_from_the_standard_library(tmp_path):
    src = build.Sources(stdlib=build.default_sources().stdlib, licenses=tmp_path, docs=tmp_path)
    sets = build.build_sets(src)
    assert {cls: len(rows) >= 50 for cls, rows in sets.items()} == {cls: True for cls in build.CLASSES}
    assert all(h is None for key, h in src.seen.items() if not key.startswith("stdlib:"))


@pytest.mark.parametrize("cls", COPYING)
def test_copying_prompts_ask_to_copy_and_carry_their_context(cls):
    for row in committed(cls):
        instruction, context = split(row)
        assert build.has_any(instruction, build.COPY_WORDS), row["id"]
        assert len(context.split()) >= 20, row["id"]


def test_code_prompts_carry_a_real_python_function():
    for row in committed("code"):
        _, context = split(row)
        source = re.fullmatch(r"```python\n(.*)\n```", context, flags=re.S).group(1)
        tree = ast.parse(source)
        assert isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)), row["id"]


def test_quote_prompts_name_a_word_their_passage_contains():
    for row in committed("quote"):
        instruction, passage = split(row)
        assert len(passage.split()) >= 250, row["id"]
        named = re.search(r'"([a-z]+)"', instruction)
        if named:
            assert re.search(rf"\b{named.group(1)}\b", passage), row["id"]


@pytest.mark.parametrize("cls", OPEN)
def test_open_prompts_are_short_without_context_or_copying_words(cls):
    for row in committed(cls):
        content = text(row)
        assert "\n" not in content and len(content.split()) <= 60, row["id"]
        assert not build.has_any(content, build.COPY_WORDS), row["id"]


def test_creative_prompts_ask_for_novel_writing_and_chat_prompts_ask_questions():
    assert all(build.has_any(text(r), (*build.NOVEL_WORDS, "write", "tell")) for r in committed("creative"))
    assert all(text(r).rstrip().endswith("?") for r in committed("chat"))
    assert not any(build.has_any(text(r), build.NOVEL_WORDS) for r in committed("chat"))
