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
SPECBENCH = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


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
    return row["turns"][0] if "turns" in row else row["messages"][-1]["content"]


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
        if "turns" in row:  # SpecBench's own row shape, a conversation
            assert row["turns"] and all(isinstance(t, str) and t.strip() for t in row["turns"])
            continue
        assert row["messages"] and all(m["role"] in ("system", "user", "assistant") for m in row["messages"])
        assert row["messages"][-1]["role"] == "user"
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in row["messages"])
        assert isinstance(row["max_tokens"], int) and row["max_tokens"] > 0


def test_ids_are_unique_across_all_sets_and_files_stay_small():
    ids = [r["id"] for cls in build.CLASSES for r in committed(cls)]
    assert len(set(ids)) == len(ids)
    for cls in build.CLASSES:
        assert (PROMPTS / f"{cls}.jsonl").stat().st_size < 300_000
    assert sum((PROMPTS / f"{cls}.jsonl").stat().st_size for cls in build.CLASSES) < 1_000_000  # the wheel


def test_two_builds_on_one_machine_are_identical_and_reproduce_the_committed_files(tmp_path):
    subprocess.run([sys.executable, str(PROMPTS / "build.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    again = build.build_sets(build.default_sources())  # in this process: another interpreter, same bytes
    for cls in build.CLASSES:
        assert (tmp_path / f"{cls}.jsonl").read_text(encoding="utf-8") == build.render(again[cls]), cls
    if (tmp_path / "SOURCES.json").read_bytes() != (PROMPTS / "SOURCES.json").read_bytes():
        pytest.skip("this machine's Python/Debian texts differ from those the committed sets were built from")
    for cls in build.CLASSES:
        assert (tmp_path / f"{cls}.jsonl").read_bytes() == (PROMPTS / f"{cls}.jsonl").read_bytes(), cls


def test_without_debian_texts_every_class_still_reaches_50_from_the_standard_library(tmp_path):
    src = build.Sources(stdlib=build.default_sources().stdlib, licenses=tmp_path, docs=tmp_path,
                        locale=tmp_path)
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


# SpecBench's six tasks: each set mirrors its task in what drives acceptance (how much of the answer the
# conversation already holds), with 60 to 80 prompts as SpecBench's 80.


@pytest.mark.parametrize("cls", SPECBENCH)
def test_specbench_sets_hold_60_to_80_prompts(cls):
    assert 60 <= len(committed(cls)) <= 80


def test_mt_bench_is_ten_two_turn_conversations_of_each_mt_bench_category_reworking_the_first_answer():
    rows = committed("mt_bench")
    assert {r["category"] for r in rows} == {"writing", "roleplay", "reasoning", "math", "coding",
                                             "extraction", "stem", "humanities"}
    assert all(sum(r["category"] == c for r in rows) == 10 for c in {r["category"] for r in rows})
    for row in rows:
        first, second = row["turns"]
        assert re.search(r"your previous (answer|response)", second), row["id"]


def test_summarization_asks_for_a_summary_of_a_passage_it_carries():
    for row in committed("summarization"):
        instruction, passage = split(row)
        assert instruction.startswith("Summarize the following"), row["id"]
        assert len(passage.split()) >= 120, row["id"]


def test_translation_gives_running_text_to_put_into_another_language():
    sources = set()
    for row in committed("translation"):
        instruction, passage = split(row)
        found = re.fullmatch(r"Translate the following (German )?text into (\w+)\.", instruction)
        assert found, row["id"]
        assert found.group(2) != "English" or found.group(1), row["id"]
        assert len(passage.split()) >= 20, row["id"]
        sources.add(found.group(1) or "English")
    assert sources == {"German ", "English"}  # Debian's German catalogs here; the Python reference anywhere


def test_qa_asks_one_short_factual_question_without_context():
    for row in committed("qa"):
        content = text(row)
        assert "\n" not in content and len(content.split()) <= 45, row["id"]
        assert re.search(r"Answer (with the [\w ]+ only|in a few words)\.$", content), row["id"]
        assert str(row["answer"]).strip() and len(str(row["answer"]).split()) <= 5, row["id"]


def evaluate(expression: str) -> int:
    """a OP b of integers, by the AST (no eval)."""
    node = ast.parse(expression, mode="eval").body
    assert isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant) and isinstance(node.right,
                                                                                              ast.Constant)
    a, b = node.left.value, node.right.value
    ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
    if isinstance(node.op, ast.Div):
        assert a % b == 0, expression  # the problems divide evenly
        return a // b
    return ops[type(node.op)]


def test_math_reasoning_answers_follow_from_the_problem_step_by_step():
    for row in committed("math_reasoning"):
        instruction, problem = split(row)
        assert "step by step" in instruction and "Answer:" in instruction
        known = {int(n) for n in re.findall(r"\d+", problem)}
        result = None
        for step in row["steps"]:
            expression, _, stated = step.partition(" = ")
            operands = [int(n) for n in re.findall(r"\d+", expression)]
            assert all(n in known or n == 100 for n in operands), (row["id"], step)  # 100: a percentage
            result = evaluate(expression)
            assert result == int(stated) and result >= 0, (row["id"], step)
            known.add(result)
        assert result == row["answer"], row["id"]


def test_rag_gives_three_passages_one_of_which_holds_the_answer():
    for row in committed("rag"):
        content = text(row)
        passages = re.findall(r"Passage \d:\n(.*?)(?=\n\nPassage \d:|\n\nQuestion: )", content, flags=re.S)
        assert len(passages) == 3, row["id"]
        assert content.rsplit("\n\n", 1)[1].startswith("Question: "), row["id"]
        assert sum(row["answer"] in p for p in passages) >= 1, row["id"]
