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
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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


CHUNK_BYTES = 1 << 20
"""A prompt file is read this much at a time: memory holds a chunk and the row being read, whatever the
file's size (a ShareGPT dump is 700 MB)."""
MAX_ROW_BYTES = 64 << 20
"""The longest row (a JSONL line, a JSON array element) read; longer is refused, so a file with no line
breaks cannot fill the memory."""
MAX_DEPTH = 64
"""How deeply a JSON array's row may nest: every supported shape needs four levels; more is no prompt (and
Python's json parser, used before, overflowed its stack on a deeply nested file). orjson refuses a JSONL
row nested beyond 1,024 levels itself."""
_BRACKET = re.compile(rb"[\[\]{}]")
_SPACE = re.compile(rb"[^ \t\r\n]")
BOM = b"\xef\xbb\xbf"


def _loads(path: Path, line: int, data: bytes | bytearray) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise PromptError(f"{path}:{line + getattr(e, 'lineno', 1) - 1}: not JSON ({e})") from None


def _jsonl_rows(path: Path, handle: BinaryIO) -> Iterator[tuple[int, object]]:
    lineno = 0
    while line := handle.readline(MAX_ROW_BYTES + 1):
        lineno += 1
        if lineno == 1:
            line = line.removeprefix(BOM)  # a byte-order mark, as some editors save UTF-8
        if len(line) > MAX_ROW_BYTES and not line.endswith(b"\n"):
            raise PromptError(f"{path}:{lineno}: a line longer than {MAX_ROW_BYTES >> 20} MiB")
        if line.strip():
            yield lineno, _loads(path, lineno, line)


def _string_end(data: bytes | bytearray, start: int) -> int:
    """The index after the closing quote of the string whose opening quote is at `start`, -1 when it does
    not end within the data (memchr-fast: a string's text is never looked at byte by byte)."""
    at = start + 1
    while (quote := data.find(b'"', at)) >= 0:
        slash = quote
        while data[slash - 1] == 0x5C:  # a quote after an odd number of backslashes is escaped
            slash -= 1
        if (quote - slash) % 2 == 0:
            return quote + 1
        at = quote + 1
    return -1


def value_end(data: bytes | bytearray, where: str) -> int | None:
    """Where the JSON object or array at the start of `data` ends, or None when it does not end within
    it (read more). PromptError when it nests deeper than MAX_DEPTH."""
    depth, at = 0, 0
    while True:
        quote = data.find(b'"', at)
        for m in _BRACKET.finditer(data, at, len(data) if quote < 0 else quote):
            if data[m.start()] in b"[{":
                depth += 1
                if depth > MAX_DEPTH:
                    raise PromptError(f"{where}: nested deeper than {MAX_DEPTH} levels: not a prompt row")
            else:
                depth -= 1
                if depth <= 0:
                    return m.end()
        if quote < 0 or (at := _string_end(data, quote)) < 0:
            return None


class _Buffer:
    """A file read a chunk at a time: `data` holds what is not yet consumed, `line` the line its first
    byte is on."""

    def __init__(self, path: Path, handle: BinaryIO) -> None:
        self.path, self.handle = path, handle
        self.data = bytearray(handle.read(CHUNK_BYTES).removeprefix(BOM))
        self.line = 1

    def more(self) -> bool:
        """Read on: at least a chunk, and as much as is held (a long row is scanned again as often as
        the data doubles, not once a chunk)."""
        chunk = self.handle.read(max(CHUNK_BYTES, len(self.data)))
        self.data += chunk
        return bool(chunk)

    def consume(self, n: int) -> None:
        self.line += self.data.count(b"\n", 0, n)
        del self.data[:n]

    def next_byte(self) -> int | None:
        """The next byte that is not white space (consuming the space before it), None at the end."""
        while True:
            m = _SPACE.search(self.data)
            if m is not None:
                self.consume(m.start())
                return self.data[0]
            self.consume(len(self.data))
            if not self.more():
                return None

    def element(self) -> bytes:
        """The JSON object or array starting at the buffer's start, whole (it is consumed)."""
        while (end := value_end(self.data, f"{self.path}:{self.line}")) is None:
            if len(self.data) > MAX_ROW_BYTES:
                raise PromptError(f"{self.path}:{self.line}: a row longer than {MAX_ROW_BYTES >> 20} MiB")
            if not self.more():
                raise PromptError(f"{self.path}:{self.line}: not JSON (the file ends inside a row)")
        if end > MAX_ROW_BYTES:
            raise PromptError(f"{self.path}:{self.line}: a row longer than {MAX_ROW_BYTES >> 20} MiB")
        found = bytes(self.data[:end])
        self.consume(end)
        return found


def _json_rows(path: Path, handle: BinaryIO) -> Iterator[tuple[int, object]]:
    """The elements of a JSON array one at a time, each with the line it starts on, read a chunk at a time:
    a malformed element names its line, and a row limit stops reading there (ShareGPT dumps are hundreds
    of MB)."""
    buf = _Buffer(path, handle)
    if buf.next_byte() != ord("["):
        raise PromptError(f"{path}:{buf.line}: a JSON prompt file must be an array of objects "
                          "(ShareGPT's layout); one object a line is .jsonl")
    buf.consume(1)
    if buf.next_byte() == ord("]"):
        return
    while True:
        if buf.next_byte() not in (ord("{"), ord("[")):
            raise PromptError(f"{path}:{buf.line}: expected an object")
        line = buf.line
        yield line, _loads(path, line, buf.element())
        after = buf.next_byte()
        if after == ord(","):
            buf.consume(1)
        elif after == ord("]"):
            return
        else:
            raise PromptError(f"{path}:{buf.line}: expected ',' or ']' between rows")


def _csv_rows(path: Path, handle: BinaryIO) -> Iterator[tuple[int, object]]:
    text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
    reader = csv.DictReader(text, restkey="\x00extra")
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
    except UnicodeDecodeError:
        raise PromptError(f"{path}:{reader.line_num + 1}: not UTF-8 text") from None


def rows(path: Path) -> Iterator[tuple[int, object]]:
    """(line, parsed row) of a prompt file: `.json` an array, `.csv` a table, anything else JSONL; read a
    chunk at a time, so a caller that stops early reads no further."""
    try:
        handle = path.open("rb")
    except OSError as e:
        raise PromptError(f"{path}: cannot read ({e.strerror})") from None
    suffix = path.suffix.lower()
    reader = _json_rows if suffix == ".json" else _csv_rows if suffix == ".csv" else _jsonl_rows
    with handle:
        try:
            yield from reader(path, handle)
        except OSError as e:
            raise PromptError(f"{path}: cannot read ({e.strerror})") from None


def _grouped(prompts: list[Prompt], classes: set[str]) -> list[Prompt]:
    """SpecBench's question.jsonl keeps MT-Bench's eight categories, and its evaluation reports them as one
    task, `mt_bench`: in a file that also holds SpecBench's other tasks (`classes`, every row's) they become
    that class."""
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
    file and line) on the first malformed row or an empty file; a file the filters empty gives []. Rows
    the filters leave out are not held (memory grows with what is kept, not with the file)."""
    held: list[Prompt] = []
    classes: set[str] = set()
    skipped = kept = 0
    questions = False
    for lineno, obj in rows(path):
        prompt = parse_row(obj, f"{path}:{lineno}", f"{path.stem}-{lineno}-{content_id(obj)}", path.stem,
                           selection.turns)
        if prompt is None:
            skipped += 1
            continue
        classes.add(prompt.cls)
        kept += selection.keeps(prompt)
        # an MT-Bench category may become `mt_bench` (_grouped): such a row's category is judged at the end
        if selection.keeps(prompt) or (prompt.cls in MT_BENCH_CATEGORIES and selection.keeps(
                Prompt(prompt.id, "mt_bench", prompt.messages, None, (), prompt.cls))):
            held.append(prompt)
        # A question file's classes depend on all its categories (_grouped): it is read to the end. Other
        # files stop once the limit is reached (a ShareGPT dump holds about 90,000 conversations).
        questions = questions or (isinstance(obj, dict) and "turns" in obj)
        if selection.limit is not None and kept >= selection.limit and not questions:
            break
    if skipped:
        log.warning("locust-spec: %s: %d conversations without a human turn left out", path, skipped)
    if not classes:
        raise PromptError(f"{path}: no prompts")
    chosen = [p for p in _grouped(held, classes) if selection.keeps(p)]
    return chosen[:selection.limit] if selection.limit is not None else chosen
