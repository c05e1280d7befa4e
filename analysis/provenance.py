"""What each arm measured (PREFIX_run.json, recording/provenance.py; read by runs.py), and the checks that
two arms can be compared at all: the same model, not the same run, not swapped (pure).

A run written before the file existed has unknown provenance: it is said, never guessed.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FORCE = "--force"


class ProvenanceError(ValueError):
    """Arms that cannot be compared; the message is one line."""


@dataclass(frozen=True)
class Provenance:
    """One run's record as read: `doc` is the file's object ({} when the run has none)."""

    prefix: str
    doc: dict

    @property
    def known(self) -> bool:
        return bool(self.doc)

    def _get(self, *keys: str) -> object:
        value: object = self.doc
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def _text(self, *keys: str) -> str | None:
        value = self._get(*keys)
        return value if isinstance(value, str) and value else None

    @property
    def run_id(self) -> str | None:
        return self._text("run_id")

    @property
    def served(self) -> dict:
        """The /v1/models entry of the model the requests named (else the first listed)."""
        models = self._get("server", "models")
        models = [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []
        named = self._text("model")
        return next((m for m in models if m.get("id") == named), models[0] if models else {})

    @property
    def model(self) -> str | None:
        listed = self.served.get("id")
        return self._text("model") or (listed if isinstance(listed, str) else None)

    @property
    def model_identity(self) -> str | None:
        """What the model is, not what it is called: /v1/models' `root` (the weights loaded), else its id."""
        root = self.served.get("root")
        return root if isinstance(root, str) and root else self.model

    def as_dict(self) -> dict:
        return {"prefix": self.prefix, "known": self.known, **({"run": self.doc} if self.known else {})}


def _arm_models(arm: Sequence[Provenance]) -> dict[str, str]:
    return {p.model_identity: p.prefix for p in arm if p.model_identity is not None}


def check_arms(baseline: Sequence[Provenance], candidate: Sequence[Provenance], force: bool) -> list[str]:
    """ProvenanceError when the arms cannot be compared (unless `force`: then a warning each): different
    models, or the same run on both sides. Returns the warnings: which runs have no record (what else
    differs between the runs: comparable.py)."""
    problems, warnings = [], []
    base_models, cand_models = _arm_models(baseline), _arm_models(candidate)
    if base_models and cand_models and set(base_models) != set(cand_models):
        problems.append(f"baseline and candidate served different models (baseline: "
                        f"{', '.join(sorted(base_models))}; candidate: {', '.join(sorted(cand_models))})")
    for b in baseline:
        for c in candidate:
            same_id = b.run_id is not None and b.run_id == c.run_id
            if same_id or Path(b.prefix).resolve() == Path(c.prefix).resolve():
                problems.append(f"baseline and candidate are the same run ({b.prefix} and {c.prefix})")
    for problem in dict.fromkeys(problems):
        if not force:
            raise ProvenanceError(f"{problem}: compare them anyway with {FORCE}")
        warnings.append(f"{problem} ({FORCE})")
    unknown = [p.prefix for p in (*baseline, *candidate) if not p.known]
    if unknown:
        warnings.append(f"provenance unknown for {', '.join(unknown)}: no _run.json (written before "
                        "locust-spec recorded what a run measured)")
    return warnings


def swapped(base_drafted: float, cand_drafted: float, force: bool) -> str | None:
    """ProvenanceError when the baseline speculated and the candidate did not (unless `force`)."""
    if base_drafted <= 0 or cand_drafted > 0:
        return None
    problem = (f"the arms look swapped: the baseline's server drafted {base_drafted:.0f} tokens and the "
               "candidate's none (give the run without speculation first)")
    if not force:
        raise ProvenanceError(f"{problem}; compare them anyway with {FORCE}")
    return f"{problem} ({FORCE})"


def _when(value: object) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    try:
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "-"


def _prompts(p: Provenance) -> str:
    prompts = p._get("load", "prompts")
    if not isinstance(prompts, list):
        return "-"
    return ", ".join(f"{f.get('file')} ({f.get('prompts')}, sha256 {str(f.get('sha256'))[:12]})"
                     for f in prompts if isinstance(f, dict)) or "-"


def _value(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _duration(p: Provenance) -> str:
    start, end = p._get("started_unix_s"), p._get("ended_unix_s")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start:
        return f"{end - start:.0f} s"
    return "-"


def table(baseline: Sequence[Provenance],
          candidate: Sequence[Provenance]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of what each run measured, one column per run, for the reports' first screen."""
    runs = [(f"{arm}" + (f" {i + 1}" if len(group) > 1 else ""), p)
            for arm, group in (("baseline", baseline), ("candidate", candidate)) for i, p in enumerate(group)]

    def row(label: str, get) -> list[str]:
        return [label, *(get(p) if p.known else "unknown (no _run.json)" for _, p in runs)]

    def tool(name: str):
        return lambda p: _value(p._get("tools", name))

    rows = [
        row("model (root)", lambda p: f"{_value(p.model)} ({_value(p.served.get('root'))})"),
        row("max_model_len", lambda p: _value(p.served.get("max_model_len"))),
        row("server version", lambda p: _value(p._get("server", "version"))),
        row("host", lambda p: _value(p._get("host"))),
        row("started", lambda p: _when(p._get("started_unix_s"))),
        row("duration", _duration),
        row("prompts", _prompts),
        row("seed / max_tokens / ignore_eos / temperature", lambda p: " / ".join(
            _value(p._get("load", k)) for k in ("seed", "max_tokens", "ignore_eos", "temperature"))),
        row("locust-spec / Locust", lambda p: f"{tool('locust_spec')(p)} / {tool('locust')(p)}"),
        row("cores / runner / workers", lambda p: " / ".join(
            _value(p._get("machine", k)) for k in ("cores", "runner", "workers"))),
        row("command", lambda p: " ".join(map(str, p._get("command") or [])) or "-"),
    ]
    return ["", *(label for label, _ in runs)], rows
