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
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import TypeVar

PER_CLASS = 60
SEED = 20240601
MAX_TOKENS = {"json": 192, "code": 256, "quote": 128, "boilerplate": 192, "chat": 192, "creative": 256}
CLASSES = tuple(MAX_TOKENS)

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
    seen: dict[str, str | None] = field(default_factory=dict)
    memo: dict[str, object] = field(default_factory=dict, repr=False)

    def read(self, root: str, rel: str) -> str | None:
        base = {"stdlib": self.stdlib, "licenses": self.licenses, "docs": self.docs}[root]
        key = f"{root}:{rel}"
        path = base / rel
        try:
            data = path.read_bytes()
        except OSError:
            self.seen[key] = None
            return None
        self.seen[key] = hashlib.sha256(data).hexdigest()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        return data.decode("utf-8", errors="replace")


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


def take(items: Iterable[dict], cls: str, limit: int = PER_CLASS) -> list[dict]:
    out: list[dict] = []
    seen: set[str] = set()
    for item in items:
        content = item["content"]
        if content in seen:
            continue
        seen.add(content)
        out.append({
            "id": f"{cls}-{len(out) + 1:03d}",
            "class": cls,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": MAX_TOKENS[cls],
        })
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
                                  ast.get_docstring(node), params))
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


# ---------------------------------------------------------------- assembly

BUILDERS: dict[str, Callable[[Sources], list[dict]]] = {
    "json": build_json, "code": build_code, "quote": build_quote,
    "boilerplate": build_boilerplate, "chat": build_chat, "creative": build_creative,
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
