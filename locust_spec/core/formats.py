"""Prompt files in the formats the field publishes, read as they are: one parser per row shape, one error
line (file and line) per malformed row, and the filters a run selects with.

Row shapes, in a JSONL file (one object a line) or a JSON file (an array of objects):

- SpecBench / MT-Bench `question.jsonl`: `{"question_id", "category", "turns": [...]}`. Every turn is sent as
  a conversation: the model's own answer to a turn goes into the next (`Prompt.followups`).
- ShareGPT: `{"id", "conversations": [{"from": "human" | "gpt" | "system", "value"}, ...]}`. The human turns
  are replayed with the model's own answers (or only the first, `--turns first`); the recorded answers are
  the other model's, so they are not sent.
- OpenAI chat: `{"messages": [{"role", "content"}, ...]}`: one request as recorded; trailing assistant
  messages (a fine-tuning file's target answer) are dropped.
- plain: `{"prompt": "..."}`.

Any of them may carry `class` or `category` (the prompt class: a row of Locust's stats and the per-task
verdict), `id` and `max_tokens`. A CSV file needs a `prompt` column (optional `class` or `category`, `id`,
`max_tokens`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

TURNS = ("all", "first")
# MT-Bench's eight categories, which SpecBench's question.jsonl keeps and its evaluation reports as one task.
MT_BENCH_CATEGORIES = frozenset(
    ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"))
SPECBENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
HUMAN = frozenset(("human", "user"))
MODEL = frozenset(("gpt", "assistant", "chatgpt", "bard", "model", "bing"))


class PromptError(ValueError):
    """A prompt set that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Prompt:
    id: str
    cls: str
    messages: tuple[dict, ...]
    max_tokens: int | None
    followups: tuple[str, ...] = ()
    """User turns sent after the first, in order; each request carries the conversation so far with the
    model's own answers (a SpecBench / MT-Bench second turn, a ShareGPT conversation's later human turns)."""
    category: str = ""
    """The file's own category where it differs from the class (an MT-Bench category inside SpecBench's
    `mt_bench` task): `--category` matches either."""

    @property
    def chars(self) -> int:
        """The length of the first request's text, which `--min/--max-prompt-chars` filter on."""
        return sum(len(str(m.get("content") or "")) for m in self.messages)


@dataclass(frozen=True)
class Selection:
    """Which prompts of each set a run sends: the options `--category`, `--prompt-limit`,
    `--min-prompt-chars`, `--max-prompt-chars` and `--turns`. The limit takes the first rows, in file order,
    that pass the rest."""

    categories: tuple[str, ...] = ()
    limit: int | None = None
    min_chars: int | None = None
    max_chars: int | None = None
    turns: str = "all"

    def __post_init__(self) -> None:
        if self.turns not in TURNS:
            raise PromptError(f"--turns must be one of {', '.join(TURNS)}, not {self.turns!r}")
        for name, value in (("--prompt-limit", self.limit), ("--min-prompt-chars", self.min_chars),
                            ("--max-prompt-chars", self.max_chars)):
            if value is not None and value < (1 if name == "--prompt-limit" else 0):
                raise PromptError(f"{name} must be a positive number, not {value}")

    @classmethod
    def of(cls, categories: Iterable[str] = (), limit: int | None = None, min_chars: int | None = None,
           max_chars: int | None = None, turns: str = "all") -> Selection:
        """From option values: categories repeated and/or comma-separated."""
        named = tuple(dict.fromkeys(c.strip() for item in categories for c in item.split(",") if c.strip()))
        return cls(named, limit, min_chars, max_chars, turns or "all")

    def keeps(self, prompt: Prompt) -> bool:
        if self.categories and prompt.cls not in self.categories and prompt.category not in self.categories:
            return False
        if self.min_chars is not None and prompt.chars < self.min_chars:
            return False
        return self.max_chars is None or prompt.chars <= self.max_chars

    def describe(self) -> str:
        parts = [f"category {', '.join(self.categories)}"] if self.categories else []
        parts += [f"at least {self.min_chars} characters"] if self.min_chars is not None else []
        parts += [f"at most {self.max_chars} characters"] if self.max_chars is not None else []
        return "; ".join(parts) or "none"

    def args(self) -> list[str]:
        """The Locust options that select the same prompts (spec-ab and spec-tune pass them on)."""
        out = ["--category", ",".join(self.categories)] if self.categories else []
        for option, value in (("--prompt-limit", self.limit), ("--min-prompt-chars", self.min_chars),
                              ("--max-prompt-chars", self.max_chars)):
            if value is not None:
                out += [option, str(value)]
        return out + (["--turns", self.turns] if self.turns != "all" else [])


EVERYTHING = Selection()


# ---------------------------------------------------------------- one row -> one prompt


def _text(value: object, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PromptError(f"{where}: {what} must be non-empty text")
    return value


def _max_tokens(obj: dict, where: str) -> int | None:
    value = obj.get("max_tokens")
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PromptError(f"{where}: max_tokens must be a positive integer")
    return value


def _from_turns(obj: dict, where: str, turns: str) -> tuple[list[dict], list[str]]:
    given = obj["turns"]
    if not isinstance(given, list) or not given:
        raise PromptError(f"{where}: turns must be a non-empty list of strings")
    texts = [_text(t, where, "every turn") for t in given]
    return [{"role": "user", "content": texts[0]}], texts[1:] if turns == "all" else []


def _from_conversation(obj: dict, where: str, turns: str) -> tuple[list[dict], list[str]] | None:
    """ShareGPT: the system entry and the human turns; None for a conversation with no human text (real
    ShareGPT dumps hold some, and a replay skips them as vLLM's loader does)."""
    given = obj["conversations"]
    if not isinstance(given, list):
        raise PromptError(f"{where}: conversations must be a list of {{from, value}}")
    system, humans = [], []
    for entry in given:
        if not (isinstance(entry, dict) and isinstance(entry.get("from"), str)
                and isinstance(entry.get("value"), str)):
            raise PromptError(f"{where}: every conversation entry needs string 'from' and 'value'")
        who = entry["from"].lower()
        if who == "system" and not humans and entry["value"].strip():
            system.append({"role": "system", "content": entry["value"]})
        elif who in HUMAN and entry["value"].strip():
            humans.append(entry["value"])
        elif who not in HUMAN | MODEL | {"system"}:
            raise PromptError(f"{where}: unknown speaker {entry['from']!r} (human, gpt or system)")
    if not humans:
        return None
    return [*system, {"role": "user", "content": humans[0]}], humans[1:] if turns == "all" else []


def _from_messages(obj: dict, where: str) -> list[dict]:
    given = obj["messages"]
    if not (isinstance(given, list) and given
            and all(isinstance(m, dict) and "role" in m and "content" in m for m in given)):
        raise PromptError(f"{where}: messages must be a non-empty list of {{role, content}}")
    end = len(given)
    while end and given[end - 1]["role"] == "assistant":
        end -= 1  # the recorded answer (a fine-tuning file's target) is what the model is to write
    if not end:
        raise PromptError(f"{where}: messages hold only assistant messages, nothing to ask")
    return list(given[:end])


def _category(obj: dict) -> str:
    for key in ("class", "category"):
        value = obj.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""


def parse_row(obj: object, where: str, default_id: str, stem: str, turns: str = "all") -> Prompt | None:
    """One row of any supported shape as a Prompt (None: a conversation with nothing to ask)."""
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected an object")
    followups: list[str] = []
    if "turns" in obj:
        messages, followups = _from_turns(obj, where, turns)
    elif "conversations" in obj:
        found = _from_conversation(obj, where, turns)
        if found is None:
            return None
        messages, followups = found
    elif "messages" in obj:
        messages = _from_messages(obj, where)
    elif "prompt" in obj:
        messages = [{"role": "user", "content": _text(obj["prompt"], where, "prompt")}]
    else:
        raise PromptError(f"{where}: needs 'turns', 'conversations', 'messages' or a string 'prompt'")
    given_id = obj.get("id", obj.get("question_id"))
    usable = given_id not in (None, "") and not isinstance(given_id, dict | list)
    pid = str(given_id) if usable else default_id
    cls = _category(obj) or stem
    # a row with both (a built-in mt_bench conversation of MT-Bench's "writing") is found by either
    own = obj.get("category") if "class" in obj and isinstance(obj.get("category"), str) else ""
    return Prompt(pid, cls, tuple(messages), _max_tokens(obj, where), tuple(followups),
                  own if own != cls else "")


# ---------------------------------------------------------------- files -> rows


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise PromptError(f"{path}:{line}: not UTF-8 text") from None


def _jsonl_rows(path: Path, data: bytes) -> Iterator[tuple[int, object]]:
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as some editors save UTF-8
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield lineno, orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise PromptError(f"{path}:{lineno}: not JSON ({e})") from None


def _json_rows(path: Path, data: bytes) -> Iterator[tuple[int, object]]:
    """The elements of a JSON array one at a time, each with the line it starts on: a malformed element
    names its line, and a row limit stops reading there (ShareGPT dumps are hundreds of MB)."""
    text = _decode(path, data)
    decoder = json.JSONDecoder()
    pos, line, counted = 0, 1, 0

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, i)
        counted = i
        return line

    pos = skip(pos)
    if pos >= len(text) or text[pos] != "[":
        raise PromptError(f"{path}:{line_at(pos)}: a JSON prompt file must be an array of objects "
                          "(ShareGPT's layout); one object a line is .jsonl")
    pos = skip(pos + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        start = line_at(pos)
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise PromptError(f"{path}:{line_at(min(e.pos, len(text)))}: not JSON ({e.msg})") from None
        yield start, obj
        pos = skip(pos)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            raise PromptError(f"{path}:{line_at(min(pos, len(text)))}: expected ',' or ']' between rows")


def _csv_rows(path: Path, data: bytes) -> Iterator[tuple[int, object]]:
    reader = csv.DictReader(io.StringIO(_decode(path, data), newline=""), restkey="\x00extra")
    try:
        fields = [f.strip().lower() for f in reader.fieldnames or []]
        if "prompt" not in fields:
            raise PromptError(f"{path}:1: a CSV prompt file needs a 'prompt' column (found: "
                              f"{', '.join(fields) or 'no header'})")
        reader.fieldnames = fields
        for row in reader:
            if "\x00extra" in row:
                raise PromptError(f"{path}:{reader.line_num}: more fields than the header has")
            if None in row.values():
                raise PromptError(f"{path}:{reader.line_num}: fewer fields than the header has")
            yield reader.line_num, {k: v for k, v in row.items() if k in ("prompt", "class", "category", "id",
                                                                          "max_tokens") and v != ""}
    except csv.Error as e:
        raise PromptError(f"{path}:{reader.line_num}: not CSV ({e})") from None


def rows(path: Path) -> Iterator[tuple[int, object]]:
    """(line, parsed row) of a prompt file: `.json` an array, `.csv` a table, anything else JSONL."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PromptError(f"{path}: cannot read ({e.strerror})") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _json_rows(path, data)
    if suffix == ".csv":
        return _csv_rows(path, data)
    return _jsonl_rows(path, data)


def _grouped(prompts: list[Prompt]) -> list[Prompt]:
    """SpecBench's question.jsonl keeps MT-Bench's eight categories, and its evaluation reports them as one
    task, `mt_bench`: in a file that also holds SpecBench's other tasks they become that class."""
    classes = {p.cls for p in prompts}
    if not classes & set(SPECBENCH_TASKS[1:]) or not classes & MT_BENCH_CATEGORIES:
        return prompts
    return [Prompt(p.id, "mt_bench", p.messages, p.max_tokens, p.followups, p.cls)
            if p.cls in MT_BENCH_CATEGORIES else p for p in prompts]


def content_id(row: object) -> str:
    """6 hex digits of a row's content: a prompt without an id is keyed by its file's name, its line and
    this, so two files of one name (two folders' prompts.jsonl) never share keys unless they share rows
    (priming sends each key once; the answer gate compares answers by key)."""
    return hashlib.blake2b(repr(row).encode("utf-8", "surrogatepass"), digest_size=3).hexdigest()


def read_prompts(path: Path, selection: Selection = EVERYTHING) -> list[Prompt]:
    """Every prompt of a file that the selection keeps, in file order. PromptError (one line naming the
    file and line) on the first malformed row or an empty file; a file the filters empty gives []."""
    parsed: list[Prompt] = []
    skipped = kept = 0
    questions = False
    for lineno, obj in rows(path):
        prompt = parse_row(obj, f"{path}:{lineno}", f"{path.stem}-{lineno}-{content_id(obj)}", path.stem,
                           selection.turns)
        if prompt is None:
            skipped += 1
            continue
        parsed.append(prompt)
        kept += selection.keeps(prompt)
        # A question file's classes depend on all its categories (_grouped): it is read to the end. Other
        # files stop once the limit is reached (a ShareGPT dump holds about 90,000 conversations).
        questions = questions or (isinstance(obj, dict) and "turns" in obj)
        if selection.limit is not None and kept >= selection.limit and not questions:
            break
    if skipped:
        log.warning("locust-spec: %s: %d conversations without a human turn left out", path, skipped)
    if not parsed:
        raise PromptError(f"{path}: no prompts")
    chosen = [p for p in _grouped(parsed) if selection.keeps(p)]
    return chosen[:selection.limit] if selection.limit is not None else chosen
