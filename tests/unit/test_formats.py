"""Prompt files in the field's public formats read as they are, with filters, and one line per bad row."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from locust_spec.ab import cli as ab
from locust_spec.core import formats, prompts
from locust_spec.core.formats import PromptError, Selection, content_id, read_prompts
from locust_spec.core.prompts import PromptFiles, PromptSampler, describe_sets, load_prompt_set

# SpecBench's question.jsonl: MT-Bench's categories (two turns) beside SpecBench's own tasks (one turn).
QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post about Hawaii.",
                                                         "Rewrite your previous response, every sentence "
                                                         "starting with the letter A."]},
    {"question_id": 101, "category": "reasoning", "turns": ["You pass the second person in a race. Where "
                                                            "are you?", "And if you pass the last person?"]},
    {"question_id": 161, "category": "translation", "turns": ["Translate German to English: Guten Morgen."]},
    {"question_id": 241, "category": "summarization", "turns": ["Summarize: " + "a long article. " * 40]},
    {"question_id": 321, "category": "qa", "turns": ["Who wrote Faust?"]},
    {"question_id": 401, "category": "math_reasoning", "turns": ["Tom has 3 apples and buys 4. How many?"]},
    {"question_id": 441, "category": "rag", "turns": ["Passage: the sky is blue. Question: what colour?"]},
]
SHAREGPT = [
    {"id": "a1", "conversations": [{"from": "human", "value": "What is TCP?"},
                                   {"from": "gpt", "value": "A transport protocol."},
                                   {"from": "human", "value": "And UDP?"},
                                   {"from": "gpt", "value": "Another one."}]},
    {"id": "a2", "conversations": [{"from": "system", "value": "Be terse."},
                                   {"from": "human", "value": "Name a prime."},
                                   {"from": "gpt", "value": "7"}]},
    {"id": "a3", "conversations": [{"from": "gpt", "value": "an answer with no question"}]},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def by_id(prompts):
    return {p.id: p for p in prompts}


def test_specbench_questions_run_every_turn_and_group_mt_bench_as_specbench_reports_it(tmp_path):
    prompts = by_id(read_prompts(write_jsonl(tmp_path / "question.jsonl", QUESTIONS)))
    assert {p.cls for p in prompts.values()} == {"mt_bench", "translation", "summarization", "qa",
                                                 "math_reasoning", "rag"}
    writing = prompts["81"]
    assert writing.messages == ({"role": "user", "content": QUESTIONS[0]["turns"][0]},)
    assert writing.followups == (QUESTIONS[0]["turns"][1],)
    assert (writing.cls, writing.category) == ("mt_bench", "writing")
    assert prompts["321"].followups == ()


def test_mt_bench_alone_keeps_its_eight_categories_as_classes(tmp_path):
    prompts = read_prompts(write_jsonl(tmp_path / "mt.jsonl", QUESTIONS[:2]))
    assert [p.cls for p in prompts] == ["writing", "reasoning"]


def test_category_filter_matches_the_class_or_the_files_own_category(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", QUESTIONS)
    assert [p.id for p in read_prompts(path, Selection.of(["mt_bench"]))] == ["81", "101"]
    assert [p.id for p in read_prompts(path, Selection.of(["reasoning,rag"]))] == ["101", "441"]
    assert read_prompts(path, Selection.of(["nosuch"])) == []


def test_first_turn_only_drops_the_later_turns(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", QUESTIONS)
    assert all(p.followups == () for p in read_prompts(path, Selection(turns="first")))


def test_sharegpt_replays_the_human_turns_and_skips_conversations_without_one(tmp_path, caplog):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT, indent=2))
    prompts = by_id(read_prompts(path))
    assert set(prompts) == {"a1", "a2"}
    assert prompts["a1"].messages == ({"role": "user", "content": "What is TCP?"},)
    assert prompts["a1"].followups == ("And UDP?",)  # the recorded answers are another model's: not sent
    assert prompts["a2"].messages == ({"role": "system", "content": "Be terse."},
                                      {"role": "user", "content": "Name a prime."})
    assert {p.cls for p in prompts.values()} == {"sharegpt"}
    assert "1 conversations without a human turn" in caplog.text
    assert by_id(read_prompts(path, Selection(turns="first")))["a1"].followups == ()


def test_openai_chat_lines_are_sent_as_recorded_without_the_target_answer(tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
                      {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"},
                      {"role": "assistant", "content": "the answer to train on"}]},
    ])
    (prompt,) = read_prompts(path)
    assert [m["content"] for m in prompt.messages] == ["s", "q1", "a1", "q2"]
    assert (prompt.id, prompt.cls) == (f"chat-1-{content_id(json.loads(path.read_text()))}", "chat")


def test_prompts_without_ids_in_two_files_of_one_name_have_keys_of_their_own(tmp_path):
    """Two folders' prompts.jsonl without ids shared keys: priming sent 20 of 40, the answer gate mixed
    them."""
    rows = {"a": [{"prompt": "first a"}, {"prompt": "second a"}],
            "b": [{"prompt": "first b"}, {"prompt": "x"}],
            "c": [{"prompt": "first a"}, {"prompt": "second a"}]}
    for name in rows:
        (tmp_path / name).mkdir()
    ids = {name: [p.id for p in read_prompts(write_jsonl(tmp_path / name / "prompts.jsonl", r))]
           for name, r in rows.items()}
    assert not set(ids["a"]) & set(ids["b"]) and len(set(ids["a"])) == 2
    assert ids["a"][0].startswith("prompts-1-")
    assert ids["c"] == ids["a"]  # the same rows, the same keys


def test_csv_with_a_prompt_column_and_optional_class_id_and_max_tokens(tmp_path):
    path = tmp_path / "traffic.csv"
    path.write_text('id,prompt,category,max_tokens\nr1,"Quote this, verbatim:\n""a line""",quote,64\n'
                    "r2,plain question,,\n", newline="")
    first, second = read_prompts(path)
    assert (first.id, first.cls, first.max_tokens) == ("r1", "quote", 64)
    assert first.messages[0]["content"] == 'Quote this, verbatim:\n"a line"'
    assert (second.id, second.cls, second.max_tokens) == ("r2", "traffic", None)


def test_limit_and_length_filters_take_the_first_rows_that_pass(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "x" * n} for n in (5, 50, 500, 60, 70)])
    chars = [p.chars for p in read_prompts(path, Selection(min_chars=40, max_chars=100))]
    assert chars == [50, 60, 70]
    assert [p.chars for p in read_prompts(path, Selection(min_chars=40, max_chars=100, limit=2))] == [50, 60]


def test_a_limit_stops_reading_a_large_conversation_dump(tmp_path):
    rows = SHAREGPT[:2] * 3
    path = tmp_path / "big.json"
    path.write_text(json.dumps(rows)[:-1] + ", {oops}]")
    assert len(read_prompts(path, Selection(limit=4))) == 4
    with pytest.raises(PromptError, match=r"big.json:1: not JSON"):
        read_prompts(path)


@pytest.mark.parametrize("name, content, message", [
    ("q.jsonl", '{"turns": ["fine"]}\n{"turns": []}\n', r"q.jsonl:2: turns must be a non-empty list"),
    ("q.jsonl", '{"turns": ["fine"]}\n\n{"turns": ["a", 3]}\n', r"q.jsonl:3: every turn must be non-empty"),
    ("s.json", '[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"conversations": "no"}\n]',
     r"s.json:3: conversations must be a list"),
    ("s.json", '[\n {"conversations": [{"from": "robot", "value": "hi"}]}\n]', r"s.json:2: unknown speaker"),
    ("s.json", '{"conversations": []}', r"s.json:1: a JSON prompt file must be an array"),
    ("s.json", '[\n {"prompt": "a"}\n {"prompt": "b"}\n]', r"s.json:3: expected ',' or '\]'"),
    ("m.jsonl", '{"messages": [{"role": "assistant", "content": "only"}]}\n',
     r"m.jsonl:1: messages hold only"),
    ("t.csv", "text\nhello\n", r"t.csv:1: a CSV prompt file needs a 'prompt' column"),
    ("t.csv", "prompt,class\nfine,a\ntoo,many,fields\n", r"t.csv:3: more fields than the header"),
    ("t.csv", "prompt,max_tokens\nfine,many\n", r"t.csv:2: max_tokens must be a positive integer"),
    ("b.jsonl", b'{"prompt": "fine"}\n{"prompt": "\xff"}\n', r"b.jsonl:2: not JSON"),
])
def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(PromptError, match=message) as raised:
        read_prompts(path)
    assert "\n" not in str(raised.value)


def test_specbench_names_the_six_built_in_tasks_and_filters_apply_per_set():
    prompts = load_prompt_set("specbench")
    assert {p.cls for p in prompts} == {"mt_bench", "translation", "summarization", "qa", "math_reasoning",
                                        "rag"}
    limited = load_prompt_set("specbench", Selection(limit=3))
    assert len(limited) == 18
    writing = load_prompt_set("mt_bench", Selection.of(["writing"]))  # MT-Bench's category, kept per row
    assert len(writing) == 10 and {(p.cls, p.category) for p in writing} == {("mt_bench", "writing")}


def test_a_sampler_sends_the_sets_the_filters_leave_and_refuses_when_none_is_left(tmp_path):
    sampler = PromptSampler(["specbench", "code"], 1, Selection.of(["rag"]))
    assert sampler.classes == ["rag"]
    with pytest.raises(PromptError, match="no prompt of specbench, code passes the filters"):
        PromptSampler(["specbench", "code"], 1, Selection.of(["nosuch"]))


def test_selection_round_trips_through_the_options_it_passes_on():
    chosen = Selection.of(["qa", "rag,qa"], 10, 5, 900, "first")
    assert chosen.categories == ("qa", "rag")
    assert chosen.args() == ["--category", "qa,rag", "--prompt-limit", "10", "--min-prompt-chars", "5",
                             "--max-prompt-chars", "900", "--turns", "first"]
    with pytest.raises(PromptError, match="--turns"):
        Selection(turns="some")


def sharegpt_dump(path, conversations: int, words: int = 400):
    """A ShareGPT-shaped JSON array, written a row at a time."""
    with path.open("w") as out:
        out.write("[\n")
        for i in range(conversations):
            text = " ".join(["token"] * words) + f' {i} "quoted" [x] {{y}} \\'
            out.write((",\n" if i else "") + json.dumps(
                {"id": f"c{i}", "conversations": [{"from": "human", "value": text},
                                                  {"from": "gpt", "value": text}]}))
        out.write("\n]\n")
    return path


def test_a_large_dump_is_read_a_chunk_at_a_time_and_a_limit_stops_the_reading(tmp_path):
    path = sharegpt_dump(tmp_path / "dump.json", 2_000)  # 5 MB
    tracemalloc.start()
    try:
        started = time.perf_counter()
        limited = read_prompts(path, Selection(limit=200))
        limited_s = time.perf_counter() - started
        _, limited_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        # every row read, none kept: memory holds a chunk and a row, not the file (before: the file's bytes
        # and its text, about three times its size)
        assert read_prompts(path, Selection(max_chars=10)) == []
        _, whole_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [p.id for p in limited] == [f"c{i}" for i in range(200)]
    assert limited_peak < 3e6 and whole_peak < 3e6, (limited_peak, whole_peak)
    assert limited_s < 1.0


def test_rows_split_across_reads_parse_as_json_does(tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "CHUNK_BYTES", 7)  # every row, string and escape split between reads
    rows = [{"prompt": 'a \\" [ { ] } \\\\', "id": "x"}, {"prompt": "\\\\", "max_tokens": 3},
            {"messages": [{"role": "user", "content": "]}],\n[{"}], "id": 7}]
    path = tmp_path / "tricky.json"
    path.write_text("\ufeff[\n" + ",\n\n".join(json.dumps(r) for r in rows) + "\n]")
    got = read_prompts(path)
    assert [p.messages[0]["content"] for p in got] == [json.loads(json.dumps(r)).get("prompt") or "]}],\n[{"
                                                      for r in rows]
    # the second row starts on line 4 (and has no id: keyed by its line and content, formats.content_id)
    assert [p.id for p in got] == ["x", f"tricky-4-{content_id(rows[1])}", "7"]


def test_a_deeply_nested_or_endless_row_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text("[" + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]")  # before: RecursionError
    with pytest.raises(PromptError, match=r"deep.json:1: nested deeper than 64 levels: not a prompt row"):
        read_prompts(deep)
    deep_lines = tmp_path / "deep.jsonl"
    deep_lines.write_text('{"prompt": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(PromptError, match=r"deep.jsonl:2: not JSON \(depth limit exceeded"):
        read_prompts(deep_lines)
    monkeypatch.setattr(formats, "MAX_ROW_BYTES", 1000)
    (tmp_path / "one.jsonl").write_text('{"prompt": "' + "a" * 5000 + '"}')
    with pytest.raises(PromptError, match=r"one.jsonl:1: a line longer than"):
        read_prompts(tmp_path / "one.jsonl")
    (tmp_path / "one.json").write_text('[{"prompt": "' + "a" * 5000 + '"}]')
    with pytest.raises(PromptError, match=r"one.json:1: a row longer than"):
        read_prompts(tmp_path / "one.json")
    (tmp_path / "cut.json").write_text('[{"prompt": "a"},\n {"prompt": "b')
    with pytest.raises(PromptError, match=r"cut.json:2: not JSON \(the file ends inside a row\)"):
        read_prompts(tmp_path / "cut.json")


@pytest.fixture
def reads(monkeypatch) -> list:
    """The prompt files parsed (read_prompts, the parser itself, run as it is), in order."""
    parsed: list = []

    def counted(*args):
        parsed.append(args[0])
        return read_prompts(*args)

    monkeypatch.setattr(prompts, "read_prompts", counted)
    return parsed


def test_a_process_reads_each_prompt_file_once_whatever_reads_it(tmp_path, reads):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"prompt": f"p{i}"} for i in range(50)])
    files, limited = PromptFiles(), Selection(limit=5)
    # the sampler at start, the one of each test, and PREFIX_run.json's description (before: three reads,
    # the last ignoring the limit)
    PromptSampler([str(path)], 1, limited, files)
    PromptSampler([str(path)], 2, limited, files)
    assert describe_sets([str(path)], limited, files)[0]["prompts"] == 5
    assert reads == [path]
    write_jsonl(path, [{"prompt": "changed"}])
    assert [p.messages[0]["content"] for p in files.read(path, limited)] == ["changed"]
    assert len(reads) == 2


def test_spec_ab_reads_each_prompt_file_once_for_its_preflight_and_every_arms_priming(tmp_path, reads):
    path = write_jsonl(tmp_path / "ab.jsonl", [{"prompt": f"p{i}"} for i in range(20)])
    load = ab.Load((str(path),), None, False, 0, "m", 1)
    assert [len(ab.load_prompts(load)) for _ in range(3)] == [20, 20, 20]
    assert reads == [path]
