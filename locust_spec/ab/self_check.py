"""The baseline's self-check: a sample of the prompts answered twice on purpose while spec-ab primes the
baseline, at the run's settings, so that the answer gate has the baseline's own noise floor at every level
(analysis/answers.py) even where a level's requests never asked a prompt twice (a prompt set larger than
a level's requests; one user on a slow server).

Each prompt of the sample is answered once, then the whole sample again, `CONCURRENCY` at a time: the two
answers of a prompt come from differently shaped batches, as the run's do. The answers' fingerprints, never
their text, go to `baseline/self_check.json` (docs/contracts.md).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from locust_spec.client import server_api
from locust_spec.core.answers import fingerprint, whitespace_hash
from locust_spec.core.max_tokens import effective_max_tokens
from locust_spec.core.prompts import Prompt
from locust_spec.recording.writes import write_whole

FILE = "self_check.json"
SCHEMA = 1
DEFAULT_PROMPTS = 8
CONCURRENCY = 4
TIMEOUT_S = 600.0


def sample(prompts: Sequence[Prompt], n: int, seed: int) -> list[Prompt]:
    """`n` of the prompts, the same ones for the same seed and set."""
    ordered = sorted(prompts, key=lambda p: (p.cls, p.id))
    return random.Random(seed).sample(ordered, min(n, len(ordered)))


def record(prompt: Prompt, text: str) -> dict:
    output_hash, output_marks = fingerprint([text])
    return {"prompt_class": prompt.cls, "prompt_id": prompt.id, "output_hash": output_hash,
            "output_marks": output_marks, "output_hash_ws": whitespace_hash(text)}


def measure(host: str, prompts: Sequence[Prompt], model: str, max_tokens: int | None, ignore_eos: bool,
            temperature: float = 0.0, send: Callable[[str, bytes, str, float], str] = server_api.answer,
            ) -> tuple[list[dict], list[str]]:
    """Answer each prompt twice (two passes); (the answers' records, the failures' one-line reasons)."""
    api_key = os.environ.get("OPENAI_API_KEY", "")

    def one(prompt: Prompt) -> dict | str:
        body = server_api.answer_body(prompt, model, effective_max_tokens(prompt.max_tokens, max_tokens),
                                      ignore_eos, temperature)
        try:
            return record(prompt, send(host, body, api_key, TIMEOUT_S))
        except server_api.CallError as exc:
            return f"{prompt.id}: {exc}"

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        done = [*pool.map(one, prompts), *pool.map(one, prompts)]
    return [d for d in done if isinstance(d, dict)], [d for d in done if isinstance(d, str)]


def agreeing(answers: Sequence[dict]) -> tuple[int, int]:
    """(prompts whose two answers are the same up to whitespace, prompts answered twice)."""
    by_prompt: dict[tuple[str, str], list[str]] = {}
    for a in answers:
        by_prompt.setdefault((a["prompt_class"], a["prompt_id"]), []).append(a["output_hash_ws"])
    twice = [hashes for hashes in by_prompt.values() if len(hashes) >= 2]
    return sum(len(set(hashes)) == 1 for hashes in twice), len(twice)


def write(path: Path, answers: list[dict], temperature: float) -> Path:
    """`path` (FILE in the baseline's folder) replaced whole: a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "temperature": temperature, "answers": answers}
    write_whole(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path
