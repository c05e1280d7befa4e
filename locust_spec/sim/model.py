"""The deterministic target "model": copies spans of its context when asked to, else writes Markov text."""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from locust_spec.sim.tokenizer import Tokenizer, corpus

EOS = -1
# Rank decay of the successor choice: rank r is chosen with probability ~ exp(-decay*r).
SUCCESSOR_DECAY = 1.0


@dataclass(frozen=True)
class Style:
    """How a continuation relates to its context: copied spans, novel insertions between them, skips."""

    name: str
    span: tuple[int, int]
    insert: tuple[int, int]
    skip: tuple[int, int]
    copies: bool = True


NOVEL = Style("novel", (0, 0), (0, 0), (0, 0), copies=False)
# Keyword -> style, first match wins, checked in the last user message (lower-cased). Copy-heavy
# instructions produce long copied spans (high n-gram acceptance); edits and extraction interleave
# short copies with new tokens; open and creative requests are novel text.
# Quoting copies whole sentences and skips between them; templates copy their frame and fill slots; code
# edits copy runs between changed identifiers; extraction copies short values between JSON syntax.
QUOTE = Style("quote", (12, 60), (0, 2), (0, 40))
TEMPLATE = Style("template", (6, 30), (1, 4), (0, 4))
EDIT = Style("edit", (4, 24), (1, 3), (0, 3))
EXTRACT = Style("extract", (2, 8), (2, 5), (0, 30))
SUMMARY = Style("summary", (2, 5), (4, 12), (0, 60))
# SpecBench's tasks (prompts/build.py words their instructions so): a summary of a given passage lifts long
# stretches of it, an answer from retrieved passages copies the span that holds it, arithmetic reasoning
# repeats the problem's numbers and phrases between steps of its own, a translation shares little more
# than names and numbers with its source. A short factual answer is new text.
DIGEST = Style("digest", (10, 40), (1, 4), (5, 120))
RETRIEVE = Style("retrieve", (8, 30), (2, 6), (0, 300))
REASON = Style("reason", (2, 5), (4, 10), (0, 20))
TRANSLATE = Style("translate", (1, 2), (6, 16), (0, 8))
KEYWORDS: tuple[tuple[re.Pattern[str], Style], ...] = tuple(
    (re.compile(r"\b(?:" + words + r")\b"), style) for words, style in (
        # first: their instruction decides, whatever words the passage after it holds
        (r"summari[sz]e the following", DIGEST),
        (r"answer the question using only the passages", RETRIEVE),
        (r"step by step", REASON),
        (r"translate the following", TRANSLATE),
        (r"answer with the [\w ]+ only|answer in a few words", NOVEL),
        (r"verbatim|quote|copy|repeat|reproduce", QUOTE),
        (r"fill in|template|boilerplate|form", TEMPLATE),
        (r"refactor|rename|rewrite|fix|edit|add type hints|convert|port", EDIT),
        (r"json|extract|table|yaml|csv", EXTRACT),
        (r"summari[sz]e|explain", SUMMARY),
        (r"poem|story|imagine|invent|creative|haiku|song|limerick", NOVEL),
    )
)


def style_for(text: str, has_response_format: bool = False) -> Style:
    low = text.lower()
    for pattern, style in KEYWORDS:
        if pattern.search(low):
            return style
    return EXTRACT if has_response_format else NOVEL


def copy_source(text: str) -> str:
    """The material a copying request works on: what follows the instruction line (or colon)."""
    for sep in ("\n", ":"):
        head, found, rest = text.partition(sep)
        if found and rest.strip():
            return rest
    return text


PREVIOUS_ANSWER = re.compile(r"\byour (?:previous |last |earlier )?(?:answer|response|reply)\b")


def copy_source_of(messages: list[dict]) -> str:
    """What a request copies from: a later turn that reworks "your previous answer" (MT-Bench's second
    turns) works on the assistant's last message; any other, on its own text after the instruction."""
    user = last_user_text(messages)
    if PREVIOUS_ANSWER.search(user.lower()):
        for m in reversed(messages):
            if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip():
                return m["content"]
    return copy_source(user)


@functools.lru_cache(maxsize=1)
def _chain() -> tuple[dict[tuple[int, int], tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """Successors of each corpus bigram and token, most frequent first."""
    _, toks = corpus()
    order2: dict[tuple[int, int], list[int]] = defaultdict(list)
    order1: dict[int, list[int]] = defaultdict(list)
    for a, b, c in zip(toks, toks[1:], toks[2:], strict=False):
        order2[a, b].append(c)
        order1[b].append(c)

    def ranked(succ: list[int]) -> tuple[int, ...]:
        return (succ[0],) if len(succ) == 1 else tuple(t for t, _ in Counter(succ).most_common())

    return ({k: ranked(v) for k, v in order2.items()}, {k: ranked(v) for k, v in order1.items()})


def _markov(rng: random.Random, a: int, b: int) -> Iterator[int]:
    """Low-entropy text like greedy decoding: mostly the likeliest successor, sometimes a less likely one."""
    order2, order1 = _chain()
    _, toks = corpus()
    while True:
        succ = order2.get((a, b)) or order1.get(b)
        if succ:
            c = succ[min(len(succ) - 1, int(rng.expovariate(SUCCESSOR_DECAY)))]
        else:
            c = toks[rng.randrange(len(toks))]
        yield c
        a, b = b, c


def _copying(rng: random.Random, source: list[int], style: Style, a: int, b: int) -> Iterator[int]:
    pos = 0
    while True:
        span = rng.randint(*style.span)
        for t in source[pos:pos + span]:
            yield t
            a, b = b, t
        pos += span
        if pos >= len(source):
            yield EOS
            pos = rng.randrange(len(source))
        novel = _markov(rng, a, b)
        for _ in range(rng.randint(*style.insert)):
            t = next(novel)
            yield t
            a, b = b, t
        pos += rng.randint(*style.skip)


def _novel(rng: random.Random, a: int, b: int) -> Iterator[int]:
    length = rng.randint(60, 500)
    for i, t in enumerate(_markov(rng, a, b)):
        if i == length:
            yield EOS
        yield t


def request_seed(parts: list[str]) -> int:
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Target:
    """The target's output for one request, produced lazily; `token(i)` is the i-th output token or EOS.

    The sequence depends only on the request (messages, seed, temperature), never on speculation, so
    greedy output is identical with speculation on and off.
    """

    def __init__(self, prompt: list[int], source: list[int], style: Style, seed: int, ignore_eos: bool):
        rng = random.Random(seed)
        a, b = (prompt[-2], prompt[-1]) if len(prompt) >= 2 else (0, 0)
        gen = _copying(rng, source, style, a, b) if style.copies and source else _novel(rng, a, b)
        self._gen = (t for t in gen if t != EOS) if ignore_eos else gen
        self._out: list[int] = []
        self.style = style

    def token(self, i: int) -> int:
        out = self._out
        while len(out) <= i:
            out.append(next(self._gen))
        return out[i]


def render_prompt(messages: list[dict]) -> str:
    """A chat template in the spirit of Llama's: role headers around each message's text."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content or ''}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def last_user_text(messages: list[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def tokenizer() -> Tokenizer:
    return corpus()[0]


def warm() -> None:
    """Build the vocabulary and the Markov chain now, so no request pays for it."""
    _chain()
