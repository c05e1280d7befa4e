"""Build the built-in workload prompt sets (prompts/*.jsonl) from text that ships with Python and Debian.

Run `python prompts/build.py` to rewrite the sets in place, or `--out DIR` to write them elsewhere.
Every source is read from a fixed list of paths in a fixed order and every choice uses a seeded
generator, so the same sources give the same bytes. A missing file is skipped; the standard library
(always present) backs every class, so each set still reaches its size on another machine.
`SOURCES.json` beside the sets records the hash of every file the build tried to read, which tells a
later rebuild whether it should reproduce the committed files exactly.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gzip
import hashlib
import json
import random
import re
import struct
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import TypeVar

SEED = 20240601
MAX_TOKENS = {"json": 192, "code": 256, "quote": 128, "boilerplate": 192, "chat": 192, "creative": 256,
              # SpecBench's six tasks (Xia et al., 2024), mirrored in what drives acceptance
              "mt_bench": 256, "translation": 192, "summarization": 192, "qa": 64, "math_reasoning": 256,
              "rag": 128}
CLASSES = tuple(MAX_TOKENS)
SPECBENCH = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
# SpecBench has 80 prompts a task; the two whose prompts carry long passages keep 60: the wheel stays small.
SIZES = {cls: 60 for cls in CLASSES} | {"mt_bench": 80, "translation": 80, "qa": 80, "math_reasoning": 80}

# Instruction words that make a server (and spec-sim) treat a request as copying its context.
COPY_WORDS = (
    "quote", "verbatim", "extract", "json", "rewrite", "refactor", "rename", "fill in", "template", "copy",
)
NOVEL_WORDS = ("poem", "story", "imagine", "invent")

STDLIB_MODULES = (
    "argparse.py", "ast.py", "base64.py", "bisect.py", "calendar.py", "colorsys.py", "configparser.py",
    "csv.py", "dataclasses.py", "difflib.py", "email/utils.py", "enum.py", "fnmatch.py", "fractions.py",
    "functools.py", "gettext.py", "glob.py", "heapq.py", "http/cookies.py", "inspect.py", "ipaddress.py",
    "json/decoder.py", "json/encoder.py", "locale.py", "mimetypes.py", "netrc.py", "os.py", "platform.py",
    "plistlib.py", "posixpath.py", "pprint.py", "quopri.py", "random.py", "sched.py", "secrets.py",
    "selectors.py", "shlex.py", "shutil.py", "smtplib.py", "socketserver.py", "statistics.py", "string.py",
    "tarfile.py", "tempfile.py", "textwrap.py", "tokenize.py", "typing.py", "urllib/parse.py", "uuid.py",
    "zipfile.py", "zipfile/__init__.py",
)
STDLIB_TOPICS = "pydoc_data/topics.py"
STDLIB_LICENSE = "LICENSE.txt"
VENV_SCRIPTS = ("venv/scripts/common/activate", "venv/scripts/posix/activate.fish",
                "venv/scripts/posix/activate.csh")
LICENSES = ("Apache-2.0", "Artistic", "BSD", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
            "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0")
# Debian's required/important packages: present on every Debian system, most with DEP-5 copyright files.
DEBIAN_PACKAGES = (
    "apt", "base-passwd", "bash", "bsdutils", "bzip2", "ca-certificates", "coreutils", "curl", "dash",
    "debconf", "debianutils", "diffutils", "dpkg", "e2fsprogs", "findutils", "git", "gpgv", "grep", "gzip",
    "hostname", "init-system-helpers", "less", "libacl1", "libattr1", "libaudit1", "libbz2-1.0", "libcap2",
    "libgmp10", "liblz4-1", "liblzma5", "libpam0g", "libpcre2-8-0", "libssl3", "libsystemd0", "libtinfo6",
    "libzstd1", "login", "make", "mawk", "mount", "ncurses-bin", "openssl", "passwd", "perl-base", "procps",
    "sed", "sysvinit-utils", "tar", "util-linux", "xz-utils", "zlib1g",
)


@dataclass
class Sources:
    """Where the build reads from; every read is recorded (hash, or None when missing)."""

    stdlib: Path
    licenses: Path = Path("/usr/share/common-licenses")
    docs: Path = Path("/usr/share/doc")
    locale: Path = Path("/usr/share/locale")
    seen: dict[str, str | None] = field(default_factory=dict)
    memo: dict[str, object] = field(default_factory=dict, repr=False)

    def read_bytes(self, root: str, rel: str) -> bytes | None:
        base = {"stdlib": self.stdlib, "licenses": self.licenses, "docs": self.docs,
                "locale": self.locale}[root]
        key = f"{root}:{rel}"
        path = base / rel
        try:
            data = path.read_bytes()
        except OSError:
            self.seen[key] = None
            return None
        self.seen[key] = hashlib.sha256(data).hexdigest()
        return gzip.decompress(data) if path.suffix == ".gz" else data

    def read(self, root: str, rel: str) -> str | None:
        data = self.read_bytes(root, rel)
        return None if data is None else data.decode("utf-8", errors="replace")


def default_sources() -> Sources:
    return Sources(stdlib=Path(sysconfig.get_paths()["stdlib"]))


T = TypeVar("T")


def per_source(fn: Callable[[Sources], T]) -> Callable[[Sources], T]:
    """Parse each source once per build: several classes draw on the same modules."""

    @functools.wraps(fn)
    def wrapper(src: Sources) -> T:
        if fn.__name__ not in src.memo:
            src.memo[fn.__name__] = fn(src)
        return src.memo[fn.__name__]  # type: ignore[return-value]

    return wrapper


# ---------------------------------------------------------------- text helpers


def words(text: str) -> int:
    return len(text.split())


def paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


def chunks(text: str, low: int, high: int) -> Iterator[str]:
    """Consecutive paragraphs grouped into passages of low..high words (longer paragraphs dropped)."""
    group: list[str] = []
    for para in paragraphs(text):
        if words(para) > high:
            group = []
            continue
        if group and words("\n\n".join([*group, para])) > high:
            if words("\n\n".join(group)) >= low:
                yield "\n\n".join(group)
            group = []
        group.append(para)
    if group and words("\n\n".join(group)) >= low:
        yield "\n\n".join(group)


def sentences(text: str) -> list[str]:
    flat = re.sub(r"\s+", " ", text)
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"“(])", flat) if s]


def has_any(text: str, vocabulary: Iterable[str]) -> bool:
    low = text.lower()
    return any(w in low for w in vocabulary)


def interleave(*streams: Iterable[dict]) -> Iterator[dict]:
    """Round-robin over sources so a set mixes them, and a missing source is simply absent."""
    for row in zip_longest(*streams):
        yield from (item for item in row if item is not None)


def take(items: Iterable[dict], cls: str, limit: int | None = None) -> list[dict]:
    """The first `limit` distinct items as rows. An item is its prompt (`content`), or a conversation's
    `turns` (SpecBench's own row shape); any other keys (a checkable `answer`, ...) are kept."""
    limit = SIZES[cls] if limit is None else limit
    out: list[dict] = []
    seen: set[str] = set()
    for item in items:
        turns = item.get("turns")
        key = "\x00".join(turns) if turns else item["content"]
        if key in seen:
            continue
        seen.add(key)
        prompt = {"turns": turns} if turns else {"messages": [{"role": "user", "content": item["content"]}]}
        extra = {k: v for k, v in item.items() if k not in ("content", "turns")}
        out.append({"id": f"{cls}-{len(out) + 1:03d}", "class": cls, **prompt, "max_tokens": MAX_TOKENS[cls],
                    **extra})
        if len(out) == limit:
            break
    return out


# ---------------------------------------------------------------- standard-library readers


@dataclass(frozen=True)
class Function:
    module: str
    name: str
    source: str
    docstring: str | None
    params: tuple[str, ...]
    defaults: tuple[tuple[str, str], ...] = ()
    """(parameter, default as written) for defaults written on one line."""


def signature_defaults(node: ast.FunctionDef | ast.AsyncFunctionDef,
                       lines: list[str]) -> tuple[tuple[str, str], ...]:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    out = []
    for arg, default in pairs:
        if arg.arg in ("self", "cls") or default.lineno != default.end_lineno:
            continue
        line = lines[default.lineno - 1].encode()  # the offsets count UTF-8 bytes
        out.append((arg.arg, line[default.col_offset:default.end_col_offset].decode()))
    return tuple(out)


@per_source
def stdlib_modules(src: Sources) -> list[tuple[str, ast.Module, str]]:
    out = []
    for rel in STDLIB_MODULES:
        text = src.read("stdlib", rel)
        if text is None:
            continue
        try:
            out.append((rel, ast.parse(text), text))
        except SyntaxError:
            continue
    return out


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


@per_source
def functions(src: Sources) -> dict[str, list[Function]]:
    by_module: dict[str, list[Function]] = {}
    for rel, tree, text in stdlib_modules(src):
        found = []
        lines = text.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            segment = "\n".join(lines[node.lineno - 1:node.end_lineno]) + "\n"
            params = tuple(a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                           if a.arg not in ("self", "cls"))
            found.append(Function(module_name(rel), node.name, textwrap.dedent(segment),
                                  ast.get_docstring(node), params, signature_defaults(node, lines)))
        by_module[rel] = sorted(found, key=lambda f: f.source)
    return by_module


@per_source
def module_summaries(src: Sources) -> list[tuple[str, str]]:
    """(module, first sentence of its docstring) for the fixed module list."""
    out = []
    for rel, tree, _ in stdlib_modules(src):
        doc = ast.get_docstring(tree)
        if not doc:
            continue
        first = re.sub(r"\s+", " ", paragraphs(doc)[0]).strip()
        if words(first) > 16:
            first = first.split(". ")[0]
        first = first.rstrip(".")
        if 3 <= words(first) <= 16 and first.count("(") == first.count(")") and not first.startswith("Here"):
            out.append((module_name(rel), first))
    return out


@per_source
def pydoc_topics(src: Sources) -> dict[str, str]:
    text = src.read("stdlib", STDLIB_TOPICS)
    if text is None:
        return {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "topics" for t in node.targets):
            return dict(sorted(ast.literal_eval(node.value).items()))
    return {}


@per_source
def license_texts(src: Sources) -> list[tuple[str, str]]:
    out, seen = [], set()
    for name in LICENSES:
        text = src.read("licenses", name)
        if text is not None and text not in seen:
            seen.add(text)
            out.append((name, text))
    return out


def debian_docs(src: Sources, filename: str) -> list[tuple[str, str]]:
    out, seen = [], set()
    for pkg in DEBIAN_PACKAGES:
        text = src.read("docs", f"{pkg}/{filename}")
        if text is not None and text not in seen:
            seen.add(text)
            out.append((pkg, text))
    return out


# ---------------------------------------------------------------- json: structured extraction


def json_from_copyright(src: Sources) -> Iterator[dict]:
    for pkg, text in debian_docs(src, "copyright"):
        if not text.startswith("Format:"):
            continue
        passage = next(chunks(text, 40, 320), None)
        if passage is None:
            continue
        yield {"content": (
            f"Extract the upstream name, the source URL and every copyright holder (with years) from the "
            f"Debian copyright file of {pkg} below as JSON with keys \"upstream_name\", \"source\" and "
            f"\"holders\" (a list of objects with keys \"name\" and \"years\"). Reply with the JSON only.\n\n"
            f"{passage}")}


def json_from_changelog(src: Sources) -> Iterator[dict]:
    for _, text in debian_docs(src, "changelog.Debian.gz"):
        entries = re.findall(r"^\S.*?\n -- .*?$", text, flags=re.M | re.S)[:3]
        passage = "\n\n".join(entries)
        if not entries or words(passage) > 400:
            entries = entries[:1]
            passage = "\n\n".join(entries)
        if not entries or words(passage) > 400:
            continue
        yield {"content": (
            "Extract every release in the changelog below as JSON: a list of objects with keys \"version\", "
            "\"distribution\", \"urgency\", \"maintainer\", \"date\" and \"changes\" (a list of strings, "
            f"copied as written). Reply with the JSON only.\n\n{passage}")}


def json_from_docstrings(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED)
    pool = [f for fs in functions(src).values() for f in fs
            if f.docstring and f.params and 30 <= words(f.docstring) <= 300]
    rng.shuffle(pool)
    for f in pool:
        signature = f.source.split(":\n", 1)[0].strip()
        yield {"content": (
            f"Extract the interface documented below as JSON with keys \"function\", \"summary\", "
            f"\"parameters\" (a list of objects with keys \"name\" and \"description\") and \"returns\". "
            f"Use the wording of the text. Reply with the JSON only.\n\n{signature}:\n    \"\"\"\n"
            f"{textwrap.indent(f.docstring, '    ')}\n    \"\"\"")}


def json_from_topics(src: Sources) -> Iterator[dict]:
    for name, text in pydoc_topics(src).items():
        passage = next(chunks(text, 120, 450), None)
        if passage is None:
            continue
        yield {"content": (
            f"Extract from the Python reference text below (topic \"{name}\") as JSON with keys \"title\", "
            "\"keywords\" (the Python keywords, functions and names it mentions, in quotes as written) and "
            f"\"rules\" (one short string per rule it states). Reply with the JSON only.\n\n{passage}")}


def build_json(src: Sources) -> list[dict]:
    return take(interleave(json_from_copyright(src), json_from_changelog(src), json_from_docstrings(src),
                           json_from_topics(src)), "json")


# ---------------------------------------------------------------- code: edits that copy their input

CODE_TASKS: tuple[Callable[[Function], str], ...] = (
    lambda f: ("Rename the local variables in the following Python function to clearer names. Keep the "
               "behaviour identical and return the whole rewritten function."),
    lambda f: ("Rewrite the following Python function with type hints on every parameter and on the return "
               "value. Change nothing else; return the full function."),
    lambda f: (f"Refactor the following Python function `{f.name}` from the {f.module} module for "
               "readability without changing its behaviour. Return the complete refactored code."),
    lambda f: (f"Rename the function below from `{f.name}` to `{f.name.strip('_')}_v2` and update any "
               "recursive calls. Copy the rest of the code unchanged."),
    lambda f: ("Rewrite the following Python function, adding a short comment above each non-obvious "
               "statement. Keep every line of code exactly as it is."),
    lambda f: ("Refactor the following Python function to use f-strings wherever it builds strings, and "
               "return the whole function; leave everything else as written."),
)


def build_code(src: Sources) -> list[dict]:
    rng = random.Random(SEED + 1)
    queues = []
    for fs in functions(src).values():
        fit = [f for f in fs if 12 <= f.source.count("\n") <= 60 and len(f.source) <= 2400]
        rng.shuffle(fit)
        queues.append(fit)

    def items() -> Iterator[dict]:
        for n, f in enumerate(interleave(*queues)):
            task = CODE_TASKS[n % len(CODE_TASKS)](f)
            yield {"content": f"{task}\n\n```python\n{f.source.rstrip()}\n```"}

    return take(items(), "code")


# ---------------------------------------------------------------- quote: answers that quote a long context

STOP = frozenset((
    "against", "because", "between", "further", "through", "whether", "without", "another", "however",
))


def quote_prompt(passage: str, rng: random.Random, n: int) -> dict | None:
    sents = sentences(passage)
    if len(sents) < 4:
        return None
    counts: dict[str, int] = {}
    for s in sents:
        for w in set(re.findall(r"\b[a-z]{7,}\b", s)):
            counts[w] = counts.get(w, 0) + 1
    rare = sorted(w for w, c in counts.items() if c <= 2 and w not in STOP)
    if n % 5 == 4 or not rare:
        instruction = ("Quote verbatim the first two sentences and the last sentence of the text below, "
                       "each on its own line, exactly as written.")
    else:
        word = rng.choice(rare)
        instruction = (
            f"Quote verbatim the sentence(s) of the text below that mention \"{word}\". Reproduce them "
            "exactly, with no commentary.",
            f"Copy out, word for word, every sentence in the text below that contains the word \"{word}\".",
            f"Which sentences of the text below mention \"{word}\"? Quote them verbatim, in order.",
            f"Quote verbatim the sentence of the text below that uses the word \"{word}\", and then the "
            "sentence that follows it.",
        )[n % 4]
    return {"content": f"{instruction}\n\n{passage}"}


def quote_passages(texts: Iterable[str], low: int, high: int) -> Iterator[str]:
    for text in texts:
        yield from chunks(text, low, high)


def build_quote(src: Sources) -> list[dict]:
    rng = random.Random(SEED + 2)
    licenses = quote_passages((t for _, t in license_texts(src)), 250, 650)
    topics = quote_passages(pydoc_topics(src).values(), 250, 650)

    def items() -> Iterator[dict]:
        for n, passage in enumerate(interleave(({"p": p} for p in licenses), ({"p": p} for p in topics))):
            prompt = quote_prompt(passage["p"], rng, n)
            if prompt is not None:
                yield prompt

    return take(items(), "quote")


# ---------------------------------------------------------------- boilerplate: templated text

PLACEHOLDER = re.compile(r"<year>|19yy|\[yyyy\]|YEAR  YOUR NAME|<signature of")
YEARS = tuple(range(2016, 2026))


def template_blocks(text: str) -> Iterator[str]:
    """The indented how-to-apply blocks around each placeholder line of a license text."""
    lines = text.splitlines()
    used: set[int] = set()
    for i, line in enumerate(lines):
        if i in used or not PLACEHOLDER.search(line):
            continue
        indent = len(line) - len(line.lstrip())
        start = i
        while start > 0 and (not lines[start - 1].strip()
                             or len(lines[start - 1]) - len(lines[start - 1].lstrip()) == indent):
            start -= 1
        end = i
        while end + 1 < len(lines) and (not lines[end + 1].strip()
                                        or len(lines[end + 1]) - len(lines[end + 1].lstrip()) >= indent):
            end += 1
        used.update(range(start, end + 1))
        block = textwrap.dedent("\n".join(lines[start:end + 1])).strip("\n")
        if 10 <= words(block) <= 400:
            yield block


def fill_values(src: Sources) -> list[tuple[str, str]]:
    """(program, what it does) pairs from the stdlib's own module summaries."""
    return [(name, summary) for name, summary in module_summaries(src)]


def boilerplate_from_licenses(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 3)
    values = fill_values(src)
    blocks = [(name, b) for name, text in license_texts(src) for b in template_blocks(text)]
    for round_ in range(4):
        for name, block in blocks:
            program, summary = rng.choice(values) if values else ("example", "An example program")
            year = YEARS[(round_ * 7 + len(block)) % len(YEARS)]
            yield {"content": (
                f"Fill in the template below (from the {name} license) for the program \"{program}\" "
                f"({summary}), copyright {year} by the {program} contributors. Replace every placeholder "
                f"and keep all other text exactly as it is.\n\n{block}")}


def dep5_template(text: str) -> str | None:
    """A DEP-5 header and first Files stanza with placeholders, then a standalone License stanza verbatim."""
    paras = paragraphs(text)
    if len(paras) < 3 or not paras[0].startswith("Format:"):
        return None
    out = []
    for line in "\n\n".join(paras[:2]).splitlines():
        key, sep, _ = line.partition(":")
        if sep and re.fullmatch(r"[A-Za-z-]+", key) and key != "Format":
            out.append(f"{key}: <{key.lower()}>")
        elif not line.startswith((" ", "\t")):
            out.append(line)
    licence = next((p for p in reversed(paras) if p.startswith("License:") and 20 <= words(p) <= 250), None)
    if licence is None:
        return None
    return "\n".join(out) + "\n\n" + licence


def boilerplate_from_dep5(src: Sources) -> Iterator[dict]:
    for pkg, text in debian_docs(src, "copyright"):
        template = dep5_template(text)
        if template is None:
            continue
        yield {"content": (
            f"Fill in the template below to start the Debian copyright file of the package \"{pkg}\": put "
            f"the right value in each <placeholder> and copy every other line exactly.\n\n{template}")}


def boilerplate_from_venv(src: Sources) -> Iterator[dict]:
    values = fill_values(src)
    for n, rel in enumerate(VENV_SCRIPTS):
        text = src.read("stdlib", rel)
        if text is None or words(text) > 700:
            continue
        for program, _ in values[n::len(VENV_SCRIPTS) * 4][:3]:
            yield {"content": (
                f"Fill in the template below for a virtual environment in /srv/{program}/.venv with the "
                f"prompt \"({program})\": replace each __VENV_*__ placeholder and keep the rest of the "
                f"script verbatim.\n\n{text.strip()}")}


def boilerplate_from_docstrings(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 4)
    pool = [f for fs in functions(src).values() for f in fs if f.docstring and 2 <= len(f.params) <= 6]
    rng.shuffle(pool)
    for f in pool:
        summary = re.sub(r"\s+", " ", paragraphs(f.docstring)[0]).strip()
        args = "\n".join(f"        {p}: <what {p} is>" for p in f.params)
        template = (f"def {f.name}({', '.join(f.params)}):\n    \"\"\"<one-line summary>\n\n"
                    f"    Args:\n{args}\n\n    Returns:\n        <what it returns>\n\n"
                    f"    Raises:\n        <exceptions, or None>\n    \"\"\"")
        yield {"content": (
            f"Fill in the template below for `{f.module}.{f.name}`, whose documentation begins "
            f"\"{summary}\". Replace each <placeholder>, and keep the layout of the template.\n\n{template}")}


def build_boilerplate(src: Sources) -> list[dict]:
    return take(interleave(boilerplate_from_licenses(src), boilerplate_from_dep5(src),
                           boilerplate_from_venv(src), boilerplate_from_docstrings(src)), "boilerplate")


# ---------------------------------------------------------------- chat and creative: open, novel text

CHAT_FRAMES = (
    "What is the {m} module in Python ({s}) used for, and when would you reach for it?",
    "What are the most common mistakes people make with Python's {m} module ({s})?",
    "Why does Python's standard library include {m} ({s})? What problem does it solve?",
    "How would you explain Python's {m} module ({s}) to someone new to programming?",
    "What alternatives to Python's {m} module ({s}) exist, and how do they compare?",
)
TOPIC_CHAT_FRAMES = (
    "In Python, what should a programmer know about {t}, and what tends to surprise beginners?",
    "Can you explain {t} in Python in a few sentences?",
    "What is a practical example where understanding {t} in Python matters?",
)
CREATIVE_FRAMES = (
    "Write a short poem about Python's {m} module ({s}).",
    "Tell a story about a programmer whose whole week depends on Python's {m} module ({s}).",
    "Imagine Python's {m} module ({s}) were a person. Describe their personality and one day in their life.",
    "Invent a myth that explains where Python's {m} module ({s}) came from.",
    "Write a sonnet in which {m} ({s}) argues with its users.",
    "Imagine a city where {s} is the main industry. Describe a morning there.",
)
TOPIC_CREATIVE_FRAMES = (
    "Write a poem whose lines are inspired by {t} in Python.",
    "Tell a bedtime story whose hero is a young programmer learning about {t} in Python.",
    "Invent a board game whose rules are based on {t} in Python, and describe one turn.",
)


def topic_titles(src: Sources) -> list[str]:
    out = []
    for text in pydoc_topics(src).values():
        title = text.split("\n", 1)[0].strip()
        if 1 <= words(title) <= 6:
            out.append(title.lower() if not title.isupper() else title)
    return sorted(set(out))


def open_prompts(src: Sources, module_frames: tuple[str, ...], topic_frames: tuple[str, ...],
                 seed: int) -> Iterator[dict]:
    banned = (*COPY_WORDS, *NOVEL_WORDS)
    rng = random.Random(seed)
    summaries = [(m, s) for m, s in module_summaries(src) if not has_any(f"{m} {s}", banned)]
    titles = [t for t in topic_titles(src) if not has_any(t, banned)]
    rng.shuffle(summaries)
    rng.shuffle(titles)
    by_module = ({"content": module_frames[n % len(module_frames)].format(m=m, s=s)}
                 for n, (m, s) in enumerate(summaries))
    by_topic = ({"content": topic_frames[n % len(topic_frames)].format(t=t)} for n, t in enumerate(titles))
    return interleave(by_module, by_topic)


def build_chat(src: Sources) -> list[dict]:
    return take(open_prompts(src, CHAT_FRAMES, TOPIC_CHAT_FRAMES, SEED + 5), "chat")


def build_creative(src: Sources) -> list[dict]:
    return take(open_prompts(src, CREATIVE_FRAMES, TOPIC_CREATIVE_FRAMES, SEED + 6), "creative")


# ---------------------------------------------------------------- SpecBench's six tasks
# Each set mirrors its SpecBench task (Xia et al., 2024) in what decides acceptance: how much of the answer
# is already in the conversation. Summaries and retrieval answers copy from the passages given; a
# translation shares little with its source; arithmetic reasoning writes new steps around the problem's
# numbers; short factual answers are new text; a conversation's second turn reworks the model's own first
# answer.

LOCALE_DOMAINS = ("coreutils", "bash", "dpkg", "apt", "git", "gnupg2", "tar", "grep", "findutils",
                  "diffutils", "libc", "wget")
TARGET_LANGUAGES = ("French", "German", "Spanish", "Italian", "Portuguese")
MO_MAGIC = 0x950412DE


def mo_messages(data: bytes) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of a GNU gettext .mo catalog: singular entries, context dropped; [] when the
    bytes are not a catalog."""
    for order in ("<", ">"):
        try:
            magic, _, count, originals, translations = struct.unpack_from(order + "5I", data)
        except struct.error:
            return []
        if magic == MO_MAGIC:
            break
    else:
        return []
    out = []
    try:
        for i in range(count):
            olen, ooff = struct.unpack_from(order + "2I", data, originals + 8 * i)
            tlen, toff = struct.unpack_from(order + "2I", data, translations + 8 * i)
            msgid = data[ooff:ooff + olen]
            if msgid and b"\x00" not in msgid:
                out.append((msgid.split(b"\x04")[-1].decode("utf-8", "replace"),
                            data[toff:toff + tlen].split(b"\x00")[0].decode("utf-8", "replace")))
    except struct.error:
        return out
    return out


def reflow(text: str) -> str:
    """Paragraphs with their line wrapping undone."""
    return "\n\n".join(" ".join(p.split()) for p in paragraphs(text))


def is_prose(text: str, low: int, high: int) -> bool:
    """Running text of low..high words: no option table, code block or format string dominates it."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not low <= words(text) <= high or "%" in text or "\t" in text:
        return False
    return sum(line[:1] in " -*|>" for line in lines) <= len(lines) // 5


@per_source
def german_messages(src: Sources) -> list[list[str]]:
    """Per message catalog, the German translations of its longer prose messages (sorted, distinct)."""
    out = []
    for domain in LOCALE_DOMAINS:
        data = src.read_bytes("locale", f"de/LC_MESSAGES/{domain}.mo")
        if data is None:
            continue
        texts = {reflow(msgstr) for msgid, msgstr in mo_messages(data)
                 if msgstr and msgstr != msgid and is_prose(msgstr, 20, 110)}
        out.append(sorted(texts))
    return out


def prose_passages(src: Sources, low: int, high: int) -> list[str]:
    """Prose paragraphs of the Python reference (pydoc topics), reflowed."""
    return [reflow(p) for text in pydoc_topics(src).values() for p in chunks(text, low, high)
            if is_prose(p, low, high)]


def translation_from_locale(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 7)
    catalogs = [rng.sample(texts, len(texts)) for texts in german_messages(src)]
    for text in interleave(*[({"t": t} for t in texts) for texts in catalogs]):
        yield {"content": f"Translate the following German text into English.\n\n{text['t']}"}


def translation_from_stdlib(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 8)
    passages = prose_passages(src, 30, 100)
    rng.shuffle(passages)
    for n, passage in enumerate(passages):
        language = TARGET_LANGUAGES[n % len(TARGET_LANGUAGES)]
        yield {"content": f"Translate the following text into {language}.\n\n{passage}"}


def build_translation(src: Sources) -> list[dict]:
    return take(interleave(translation_from_locale(src), translation_from_stdlib(src)), "translation")


SUMMARY_FRAMES = (
    "Summarize the following text in three sentences.",
    "Summarize the following passage for a busy reader in about 60 words.",
    "Summarize the following {what} in one short paragraph.",
    "Summarize the following {what}: its main points, in order.",
)


def build_summarization(src: Sources) -> list[dict]:
    rng = random.Random(SEED + 9)
    docstrings = (ast.get_docstring(tree) or "" for _, tree, _ in stdlib_modules(src))
    sources = (
        ("section of the Python reference", quote_passages(pydoc_topics(src).values(), 120, 320), 120),
        ("license text", quote_passages((t for _, t in license_texts(src)), 200, 450), 200),
        ("module documentation", quote_passages(docstrings, 150, 450), 150),
        ("function documentation", (f.docstring for f in public_functions(src)), 120),
    )

    def labelled(what: str, passages: Iterable[str], low: int) -> Iterator[dict]:
        return ({"what": what, "p": p} for p in passages if is_prose(p, low, 450))

    streams = [labelled(*source) for source in sources]

    def items() -> Iterator[dict]:
        for n, found in enumerate(interleave(*streams)):
            frame = SUMMARY_FRAMES[(n + rng.randrange(2)) % len(SUMMARY_FRAMES)].format(what=found["what"])
            yield {"content": f"{frame}\n\n{found['p']}"}

    return take(items(), "summarization")


def informative(default: str) -> bool:
    """A default worth asking about: short, and not the None that most optional parameters share."""
    return len(default) <= 20 and default != "None"


def public_functions(src: Sources) -> list[Function]:
    """Documented public functions, in a fixed order."""
    return [f for fs in functions(src).values() for f in fs if not f.name.startswith("_") and f.docstring]


def qa_from_modules(src: Sources) -> Iterator[dict]:
    for module, summary in module_summaries(src):
        yield {"content": f"Which module of Python's standard library has this description: \"{summary}\"? "
                          "Answer with the module name only.", "answer": module}


def qa_from_defaults(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 10)
    pool = [(f, p, d) for f in public_functions(src) for p, d in f.defaults[:1] if informative(d)]
    rng.shuffle(pool)
    for f, param, default in pool:
        yield {"content": f"What is the default value of the `{param}` parameter of `{f.module}.{f.name}()` "
                          "in Python's standard library? Answer with the value only.", "answer": default}


def dep5_licenses(text: str) -> list[tuple[str, str]]:
    """(Files pattern, License name) of each stanza of a DEP-5 copyright file."""
    out = []
    for para in paragraphs(text):
        files = re.search(r"^Files:\s*(.+)$", para, flags=re.M)
        licence = re.search(r"^License:\s*(\S.*)$", para, flags=re.M)
        if files and licence:
            out.append((files.group(1).strip(), licence.group(1).strip()))
    return out


def qa_from_debian(src: Sources) -> Iterator[dict]:
    trailers = {pkg: m.group(1) for pkg, text in debian_docs(src, "changelog.Debian.gz")
                if (m := re.search(r"^ -- (.+?) <", text, flags=re.M))}
    for pkg, text in debian_docs(src, "copyright"):
        stanzas = dep5_licenses(text) if text.startswith("Format:") else []
        if stanzas and stanzas[0][0] == "*":
            yield {"content": f"Under which license is the Debian package {pkg} distributed? Answer in a few "
                              "words.", "answer": stanzas[0][1]}
        if pkg in trailers:
            yield {"content": f"Who made the latest upload of the Debian package {pkg} recorded in its "
                              "changelog? Answer with the name only.", "answer": trailers[pkg]}


def build_qa(src: Sources) -> list[dict]:
    return take(interleave(qa_from_modules(src), qa_from_defaults(src), qa_from_debian(src)), "qa")


# Arithmetic word problems in the manner of GSM8K: every step an operation on the problem's numbers or
# an earlier step's result, so the answer can be checked (tests/unit/test_prompt_sets.py does).
NAMES = ("Ada", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemal", "Lena",
         "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara")
ITEMS = ("apples", "pencils", "stickers", "marbles", "books", "cookies", "cards", "stamps", "shells")
MATH_INSTRUCTION = ("Solve the following problem step by step, then give the final answer on its own line "
                    "as \"Answer: <number>\".")
Step = tuple[int, str, int]


def _problem(rng: random.Random, kind: int) -> tuple[str, list[Step]]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    r = rng.randint
    if kind == 0:
        a, b, c = r(5, 40), r(2, 9), r(3, 12)
        d = r(1, a + b * c - 1)
        return (f"{name} has {a} {item}. {name} buys {b} packs of {c} {item} each and then gives {d} {item} "
                f"to a friend. How many {item} does {name} have now?",
                [(b, "*", c), (a, "+", b * c), (a + b * c, "-", d)])
    if kind == 1:
        a, b, c, d = r(40, 110), r(2, 6), r(30, 90), r(1, 5)
        return (f"A train travels at {a} km per hour for {b} hours, then at {c} km per hour for {d} hours. "
                "How many kilometres does it travel in total?",
                [(a, "*", b), (c, "*", d), (a * b, "+", c * d)])
    if kind == 2:
        a, b, c = r(12, 40), r(10, 40), r(2, 8)
        d = r(10, a * b * c - 1)
        return (f"{name} earns ${a} an hour and works {b} hours a week. After {c} weeks {name} spends ${d} "
                "on a new bicycle. How many dollars are left?",
                [(a, "*", b), (a * b, "*", c), (a * b * c, "-", d)])
    if kind == 3:
        a, b = r(2, 15), r(2, 9)
        c = 20 * (a * b // 20 + r(1, 3))
        return (f"A shop sells {item} at ${a} each. {name} buys {b} of them and pays with ${c}. How much "
                f"change does {name} get, in dollars?", [(a, "*", b), (c, "-", a * b)])
    if kind == 4:
        a, b, d = r(3, 12), r(6, 24), r(2, 9)
        total = a * b
        c = total % d + d * r(0, 2)
        if c >= total:
            c = total % d
        return (f"A baker bakes {a} trays of {b} rolls. She keeps {c} rolls for the shop's staff and packs "
                f"the rest equally into {d} bags. How many rolls go into each bag?",
                [(a, "*", b), (total, "-", c), (total - c, "/", d)])
    if kind == 5:
        a, c = r(8, 40), r(3, 12)
        b = a * c + r(10, 200)
        return (f"A book has {b} pages. {name} reads {a} pages every day. How many pages are left to read "
                f"after {c} days?", [(a, "*", c), (b, "-", a * c)])
    if kind == 6:
        p = rng.choice((10, 20, 25, 40, 50, 75))
        a = 20 * r(2, 30)
        return (f"A school has {a} pupils. {p}% of them walk to school and the others come by bus. How many "
                "pupils come by bus?", [(a, "*", p), (a * p, "/", 100), (a, "-", a * p // 100)])
    b, minutes, c = r(2, 15), r(3, 30), r(0, 200)
    a = c + b * minutes
    return (f"A tank holds {a} litres of water when full. It now holds {c} litres, and a pump adds {b} "
            "litres a minute. How many minutes does it take to fill the tank?",
            [(a, "-", c), (a - c, "/", b)])


PROBLEM_KINDS = 8


def apply(step: Step) -> int:
    a, op, b = step
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]


def word_problems(seed: int) -> Iterator[dict]:
    rng = random.Random(seed)
    for n in range(10_000):
        text, steps = _problem(rng, n % PROBLEM_KINDS)
        yield {"problem": text, "steps": [f"{a} {op} {b} = {apply((a, op, b))}" for a, op, b in steps],
               "answer": apply(steps[-1])}


def build_math_reasoning(src: Sources) -> list[dict]:
    del src  # written from templates, not read: the numbers are what the task is about
    return take(({"content": f"{MATH_INSTRUCTION}\n\n{p['problem']}", "answer": p["answer"],
                  "steps": p["steps"]} for p in word_problems(SEED + 11)), "math_reasoning")


RAG_INSTRUCTION = ("Answer the question using only the passages below. Answer in one or two sentences and "
                   "say which passage holds the answer.")


def function_passage(f: Function) -> str:
    signature = f.source.split(":\n", 1)[0].strip().removeprefix("def ").removeprefix("async def ")
    doc = " ".join(" ".join(paragraphs(f.docstring)[:2]).split())
    return f"{f.module}.{signature}\n{' '.join(doc.split()[:120])}"


def rag_items(pool: list[tuple[str, str, str]], rng: random.Random) -> Iterator[dict]:
    """(passage, question, answer) triples as prompts with two other passages of the same kind beside the
    one that holds the answer."""
    for i, (gold, question, answer) in enumerate(pool):
        others = [p for j, (p, _, a) in enumerate(pool) if j != i and answer not in p]
        if len(others) < 2:
            continue
        passages = [gold, *rng.sample(others, 2)]
        rng.shuffle(passages)
        body = "\n\n".join(f"Passage {n}:\n{p}" for n, p in enumerate(passages, 1))
        yield {"content": f"{RAG_INSTRUCTION}\n\n{body}\n\nQuestion: {question}", "answer": answer}


def rag_from_functions(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 12)
    pool = []
    for f in public_functions(src):
        found = [(p, d) for p, d in f.defaults if informative(d)]
        if found and words(f.docstring) >= 15:
            param, default = found[0]
            pool.append((function_passage(f), f"What is the default value of `{param}` in "
                         f"`{f.module}.{f.name}`?", default))
    rng.shuffle(pool)
    return rag_items(pool[:400], rng)


def rag_from_debian(src: Sources) -> Iterator[dict]:
    rng = random.Random(SEED + 13)
    pool = []
    for pkg, text in debian_docs(src, "copyright"):
        if not text.startswith("Format:"):
            continue
        for para in paragraphs(text)[1:4]:
            found = dep5_licenses(para)
            if found and 20 <= words(para) <= 200:
                files, licence = found[0]
                pool.append((f"Debian package {pkg}, copyright file:\n{para}",
                             f"Which license covers the files `{files}` of the Debian package {pkg}?",
                             licence))
    rng.shuffle(pool)
    return rag_items(pool, rng)


def build_rag(src: Sources) -> list[dict]:
    return take(interleave(rag_from_debian(src), rag_from_functions(src)), "rag")


MT_BENCH_FRAMES = {
    "writing": ("Write a short blog post (about 200 words) introducing Python's {m} module ({s}) to working "
                "programmers.",
                "Rewrite your previous response as one paragraph short enough for a newsletter sidebar."),
    "roleplay": ("Pretend you are a senior engineer whose team relies on Python's {m} module ({s}). A new "
                 "colleague asks why. Answer in character.",
                 "Stay in character: your colleague did not follow your previous answer. Explain it again, "
                 "more simply."),
    "coding": ("Write a Python function `{f}` that does the following: {d}",
               "Rewrite your previous answer with type hints, a docstring and two doctest examples."),
    "stem": ("Explain {t} in Python to a first-year computer science student, with one short example.",
             "Summarize your previous answer in three bullet points."),
    "humanities": ("Discuss the ideas behind the {l} license: what it asks of the people who share software "
                   "under it, and why its authors chose that.",
                   "Write a short poem that captures the main argument of your previous answer."),
    "humanities_stdlib": ("Discuss the design philosophy behind Python's {m} module ({s}): which trade-offs "
                          "its authors made, and why.",
                          "Write a short poem that captures the main argument of your previous answer."),
    "extraction": ("Extract every version, its date and its uploader from the changelog below as a Markdown "
                   "table.\n\n{c}",
                   "Convert your previous answer to JSON: a list of objects with keys \"version\", \"date\" "
                   "and \"uploader\"."),
    "extraction_stdlib": ("Extract the parameters of the function below and what each one does as a Markdown "
                          "table.\n\n{c}",
                          "Convert your previous answer to JSON: a list of objects with keys \"parameter\" "
                          "and \"meaning\"."),
    "math": ("{p}",
             "Now double every number in the problem and solve it again. How does your previous answer "
             "change?"),
}
ORDERINGS = (
    ("{a} is taller than {b}, and {b} is taller than {c}. {d} is shorter than {c}. Who is the tallest, and "
     "who is the shortest?", "Now suppose {d} is taller than {a}. Does your previous answer change? Explain "
     "why."),
    ("In a race, {a} finishes ahead of {b} but behind {c}. {d} finishes last. In which place does {a} "
     "finish?", "If {b} overtakes {a} just before the line, rewrite your previous answer with the new "
     "order."),
    ("{a} is older than {b}. {c} is younger than {b} but older than {d}. List the four from oldest to "
     "youngest.", "Explain how you reached your previous answer, checking each statement in turn."),
)


def mt_bench_category(src: Sources, category: str, rng: random.Random) -> Iterator[dict]:
    """Conversations of one MT-Bench category: an open first turn, and a second that reworks the answer."""
    def frame(key: str, **values: str) -> dict:
        first, second = MT_BENCH_FRAMES[key]
        return {"turns": [first.format(**values), second.format(**values)], "category": category}

    modules = [(m, s) for m, s in module_summaries(src)]
    rng.shuffle(modules)
    if category in ("writing", "roleplay"):
        yield from (frame(category, m=m, s=s) for m, s in modules)
    elif category == "humanities":
        yield from (frame("humanities", l=name) for name, _ in license_texts(src))
        yield from (frame("humanities_stdlib", m=m, s=s) for m, s in modules)
    elif category == "stem":
        yield from (frame("stem", t=t) for t in rng.sample(topic_titles(src), len(topic_titles(src))))
    elif category == "coding":
        pool = [f for f in public_functions(src) if f.params and 8 <= words(paragraphs(f.docstring)[0]) <= 40]
        rng.shuffle(pool)
        for f in pool:
            summary = " ".join(paragraphs(f.docstring)[0].split())
            yield frame("coding", f=f"{f.name}({', '.join(f.params)})", d=summary)
    elif category == "extraction":
        for _, text in debian_docs(src, "changelog.Debian.gz"):
            entries = re.findall(r"^\S.*?\n -- .*?$", text, flags=re.M | re.S)[:2]
            if entries and words("\n\n".join(entries)) <= 220:
                yield frame("extraction", c="\n\n".join(entries))
        for f in rng.sample(public_functions(src), len(public_functions(src))):
            if len(f.params) >= 2 and 30 <= words(f.docstring) <= 160:
                yield frame("extraction_stdlib", c=function_passage(f))
    elif category == "math":
        yield from (frame("math", p=f"{MATH_INSTRUCTION}\n\n{p['problem']}")
                    for p in word_problems(SEED + 14))
    else:  # reasoning
        for n in range(1000):
            a, b, c, d = rng.sample(NAMES, 4)
            first, second = ORDERINGS[n % len(ORDERINGS)]
            yield {"turns": [first.format(a=a, b=b, c=c, d=d), second.format(a=a, b=b, c=c, d=d)],
                   "category": category}


MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                       "humanities")


def build_mt_bench(src: Sources) -> list[dict]:
    """Ten conversations of each of MT-Bench's eight categories, taken in turn."""
    rng = random.Random(SEED + 15)
    return take(interleave(*(mt_bench_category(src, c, rng) for c in MT_BENCH_CATEGORIES)), "mt_bench")


# ---------------------------------------------------------------- assembly

BUILDERS: dict[str, Callable[[Sources], list[dict]]] = {
    "json": build_json, "code": build_code, "quote": build_quote,
    "boilerplate": build_boilerplate, "chat": build_chat, "creative": build_creative,
    "mt_bench": build_mt_bench, "translation": build_translation, "summarization": build_summarization,
    "qa": build_qa, "math_reasoning": build_math_reasoning, "rag": build_rag,
}


def build_sets(src: Sources) -> dict[str, list[dict]]:
    return {cls: BUILDERS[cls](src) for cls in CLASSES}


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def render_sources(src: Sources) -> str:
    return json.dumps({"seed": SEED, "files": dict(sorted(src.seen.items()))}, indent=1) + "\n"


def write_sets(out_dir: Path, src: Sources) -> dict[str, list[dict]]:
    sets = build_sets(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    for cls, rows in sets.items():
        (out_dir / f"{cls}.jsonl").write_text(render(rows), encoding="utf-8", newline="\n")
    (out_dir / "SOURCES.json").write_text(render_sources(src), encoding="utf-8", newline="\n")
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder to write the sets into (default: this script's folder)")
    args = parser.parse_args(argv)
    sets = write_sets(args.out, default_sources())
    short = [cls for cls, rows in sets.items() if len(rows) < 50]
    for cls, rows in sets.items():
        size = (args.out / f"{cls}.jsonl").stat().st_size
        print(f"{cls:12} {len(rows):3d} prompts {size / 1024:6.1f} KiB")
    if short:
        print(f"error: fewer than 50 prompts for {', '.join(short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
