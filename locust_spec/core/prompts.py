"""Prompt sets: the built-in sets and groups, files in the public formats (formats.py), weights, and a seeded
order per load generator."""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path

from locust_spec.core.formats import (
    EVERYTHING,
    SPECBENCH_TASKS,
    Prompt,
    PromptError,
    Selection,
    read_prompts,
)
from locust_spec.core.resources import prompts_dir

__all__ = ["BUILTIN_DIR", "GROUPS", "Prompt", "PromptError", "PromptFiles", "PromptSampler", "Selection",
           "builtin_names", "describe_sets", "load_prompt_set", "parse_weighted", "prompt_specs", "set_names",
           "set_paths", "stream_seed"]

log = logging.getLogger(__name__)

BUILTIN_DIR = prompts_dir()
GROUPS = {"specbench": SPECBENCH_TASKS}
"""Names that stand for several built-in sets (`all` is every one)."""


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.jsonl"))


def set_names() -> list[str]:
    """Every name `--prompts` takes without a path: the built-in sets, the groups and `all`."""
    return [*builtin_names(), *GROUPS, "all"]


def set_paths(spec: str) -> list[Path]:
    """The files a prompt set names: a prompt file (public formats: core/formats.py), a built-in set name (a
    file stem in prompts/), a group (`specbench`) or `all` (every built-in set)."""
    if spec == "all" or spec in GROUPS:
        names = builtin_names() if spec == "all" else [n for n in GROUPS[spec] if n in builtin_names()]
        if not names:
            raise PromptError(f"no built-in prompt sets in {BUILTIN_DIR}; pass --prompts FILE.jsonl")
        return [BUILTIN_DIR / f"{name}.jsonl" for name in names]
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = BUILTIN_DIR / f"{spec}.jsonl"
        if not path.exists():
            raise PromptError(f"no prompt set {spec!r}: not a file, and built-ins are {set_names()}")
    if not path.is_file():
        raise PromptError(f"prompt file not found: {path}")
    return [path]


class PromptFiles:
    """The prompt files one process has read, each read once per selection (a process builds its sampler
    at start, again at every test, and describes the sets for PREFIX_run.json: a 700 MB ShareGPT dump was
    parsed three times). Keyed by the file's path, size and modification time, so a file changed between
    tests is read again; one selection per file is kept (the web UI may change the filters)."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[tuple, list[Prompt]]] = {}

    def read(self, path: Path, selection: Selection = EVERYTHING) -> list[Prompt]:
        try:
            stat = path.stat()
        except OSError as e:
            raise PromptError(f"{path}: cannot read ({e.strerror})") from None
        name = str(path.resolve())
        key = (stat.st_size, stat.st_mtime_ns, selection)
        held = self._read.get(name)
        if held is None or held[0] != key:
            held = self._read[name] = (key, read_prompts(path, selection))
        return held[1]


def load_prompt_set(spec: str, selection: Selection = EVERYTHING,
                    files: PromptFiles | None = None) -> list[Prompt]:
    """The prompts of a set (see `set_paths`), the selection's filters applied to each file (read once per
    process through `files`). [] when the filters leave nothing."""
    read = files.read if files is not None else read_prompts
    return [p for path in set_paths(spec) for p in read(path, selection)]


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:  # a chunk at a time: a prompt file may be larger than the memory
        return hashlib.file_digest(handle, "sha256").hexdigest()


def describe_sets(specs: list[str], selection: Selection = EVERYTHING,
                  files: PromptFiles | None = None) -> list[dict]:
    """What each of a run's prompt sets is, to tell two runs' prompts apart: per file its set as given, its
    weight, whether it is built in, the prompts the selection keeps and the sha256 of its bytes. PromptError
    as loading."""
    read = files.read if files is not None else read_prompts
    out = []
    for spec in specs:
        name, weight = parse_weighted(spec)
        for path in set_paths(name):
            builtin = path.parent == BUILTIN_DIR
            out.append({"set": name, "file": path.stem if builtin else str(path), "builtin": builtin,
                        "weight": weight, "prompts": len(read(path, selection)), "sha256": _sha256(path)})
    return out


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

    def __init__(self, specs: list[str], seed: int = 0, selection: Selection = EVERYTHING,
                 files: PromptFiles | None = None) -> None:
        self._loaded: list[list[Prompt]] = []
        self._weights: list[float] = []
        emptied = []
        for spec in specs or ["all"]:
            name, weight = parse_weighted(spec)
            prompts = load_prompt_set(name, selection, files)
            if not prompts:
                emptied.append(name)
                continue
            self._loaded.append(prompts)
            self._weights.append(weight)
        if not self._loaded:
            raise PromptError(f"no prompt of {', '.join(emptied)} passes the filters "
                              f"({selection.describe()})")
        if emptied:
            log.warning("locust-spec: no prompt of %s passes the filters (%s); the other sets are sent",
                        ", ".join(emptied), selection.describe())
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
