"""Prompt sets: load and validate JSONL prompt files (or built-in sets) and sample them deterministically."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import orjson

from locust_spec.core.resources import prompts_dir

BUILTIN_DIR = prompts_dir()


class PromptError(ValueError):
    """A prompt set that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Prompt:
    id: str
    cls: str
    messages: tuple[dict, ...]
    max_tokens: int | None


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.jsonl"))


def load_prompt_set(spec: str) -> list[Prompt]:
    """A JSONL path, a built-in set name (a file stem in prompts/), or `all` (every built-in set)."""
    if spec == "all":
        names = builtin_names()
        if not names:
            raise PromptError(f"no built-in prompt sets in {BUILTIN_DIR}; pass --prompts FILE.jsonl")
        return [p for name in names for p in load_prompt_set(name)]
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = BUILTIN_DIR / f"{spec}.jsonl"
        if not path.exists():
            raise PromptError(f"no prompt set {spec!r}: not a file, and built-ins are {builtin_names()}")
    if not path.is_file():
        raise PromptError(f"prompt file not found: {path}")
    prompts = [_parse_line(path, n, line) for n, line in enumerate(path.read_bytes().splitlines(), 1)
               if line.strip()]
    if not prompts:
        raise PromptError(f"{path}: no prompts")
    return prompts


def _parse_line(path: Path, lineno: int, line: bytes) -> Prompt:
    where = f"{path}:{lineno}"
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise PromptError(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected an object")
    if "messages" in obj:
        messages = obj["messages"]
        if not (isinstance(messages, list) and messages
                and all(isinstance(m, dict) and "role" in m and "content" in m for m in messages)):
            raise PromptError(f"{where}: messages must be a non-empty list of {{role, content}}")
    elif isinstance(obj.get("prompt"), str):
        messages = [{"role": "user", "content": obj["prompt"]}]
    else:
        raise PromptError(f"{where}: needs 'messages' or a string 'prompt'")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise PromptError(f"{where}: max_tokens must be a positive integer")
    cls = obj.get("class") or path.stem
    return Prompt(str(obj.get("id") or f"{path.stem}-{lineno}"), str(cls), tuple(messages), max_tokens)


def parse_weighted(spec: str) -> tuple[str, float]:
    """`code:3` -> ("code", 3.0); a trailing part that is not a number stays in the name (paths)."""
    name, sep, weight = spec.rpartition(":")
    if sep and name:
        try:
            value = float(weight)
        except ValueError:
            return spec, 1.0
        if value <= 0:
            raise PromptError(f"prompt weight must be positive: {spec}")
        return name, value
    return spec, 1.0


def prompt_specs(value: list[str] | str | None) -> list[str]:
    """`--prompts` as a run receives it: a list from the command line (each item may hold several sets
    separated by commas, as a Kubernetes ConfigMap or compose variable passes them), text from the web
    UI's form, or nothing (every built-in set)."""
    items = [value] if isinstance(value, str) else value or []
    specs = [spec.strip() for item in items for spec in item.split(",") if spec.strip()]
    return specs or ["all"]


def stream_seed(run_seed: int, worker_index: int) -> int:
    """The seed of one load generator's prompt stream, from the run's `--seed` and Locust's worker index.

    Worker 0, and a single-process run, draw the very sequence `--seed` names; worker i > 0 draws from the
    first 8 bytes (big-endian) of sha256(f"{run_seed}:{i}"). Every worker thus sends its own sequence
    (the same one in lockstep would inflate prefix-cache and n-gram hits) and each is reproducible from
    the run seed and the index: Locust numbers workers 0, 1, ... in the order they connect.
    """
    if worker_index < 0:
        raise ValueError(f"worker index must be 0 or more, not {worker_index}")
    if worker_index == 0:
        return run_seed
    digest = hashlib.sha256(f"{run_seed}:{worker_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class PromptSampler:
    """Draws prompts: a set chosen by weight, then that set's prompts in a seeded shuffled cycle."""

    def __init__(self, specs: list[str], seed: int = 0) -> None:
        self._loaded: list[list[Prompt]] = []
        self._weights: list[float] = []
        for spec in specs or ["all"]:
            name, weight = parse_weighted(spec)
            self._loaded.append(load_prompt_set(name))
            self._weights.append(weight)
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Start over: the order `seed` names, from the sets as loaded (whatever was drawn before), so two
        samplers given the same seed draw the same prompts from here on."""
        self._rng = random.Random(seed)
        self._sets = []
        for prompts in self._loaded:
            shuffled = list(prompts)
            self._rng.shuffle(shuffled)
            self._sets.append(shuffled)
        self._positions = [0] * len(self._sets)

    @property
    def classes(self) -> list[str]:
        return sorted({p.cls for s in self._sets for p in s})

    @property
    def prompts(self) -> list[Prompt]:
        return [p for s in self._sets for p in s]

    def leave_out(self, prompts: list[Prompt]) -> None:
        """Never draw these again; a set left empty goes with its weight. PromptError when none is left."""
        gone = {id(p) for p in prompts}
        kept = [(left, [p for p in s if id(p) not in gone], w)
                for loaded, s, w in zip(self._loaded, self._sets, self._weights, strict=True)
                if (left := [p for p in loaded if id(p) not in gone])]
        if not kept:
            raise PromptError("no prompt is left to send")
        self._loaded, self._sets, self._weights = ([k[i] for k in kept] for i in range(3))
        self._positions = [0] * len(self._sets)

    def next(self) -> Prompt:
        i = self._rng.choices(range(len(self._sets)), self._weights)[0] if len(self._sets) > 1 else 0
        prompts = self._sets[i]
        prompt = prompts[self._positions[i] % len(prompts)]
        self._positions[i] += 1
        return prompt
