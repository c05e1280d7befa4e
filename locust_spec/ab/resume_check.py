"""--resume keeps a session only if it was measured against what this command would measure now (pure).

The same Locust options and design (keep.py) are not enough: a server redeployed between Ctrl-C and the
resume keeps its URL, and a prompt file edited in place keeps its path. Each kept run's PREFIX_run.json says
which model its server had loaded (/v1/models' `root`, else its id), the server's version, the speculative
config as given, and the content hash of every prompt file; `Now` holds the same facts as they are now
(None where they cannot be known before the servers start: the simulators, a server that does not answer,
whose preflight says so). Any fact known on both sides and different refuses the resume: its verdict would
pool two servers or two prompt sets as one arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Now:
    """What this command would measure an arm's runs against."""

    prompts: tuple[str, ...] | None
    """'file sha256[:16]' of each prompt file the command's --prompts name, sorted; None: not readable."""
    models: tuple[str, ...] | None = None
    """The arm's server's models (root, else id), sorted; None: not known before it starts."""
    version: str | None = None
    speculative_config: str | None = None


def prompt_files(described: Sequence[dict]) -> tuple[str, ...]:
    """core.prompts.describe_sets' list (as in PREFIX_run.json's `load.prompts`) as compared."""
    files = [f for f in described if isinstance(f, dict)]
    return tuple(sorted(f"{f.get('file')} {str(f.get('sha256'))[:16]}" for f in files))


def model_names(models: Sequence[dict]) -> tuple[str, ...]:
    """/v1/models' entries (as in PREFIX_run.json's `server.models`): what each has loaded."""
    return tuple(sorted(str(m.get("root") or m.get("id")) for m in models if isinstance(m, dict)))


def _get(doc: object, *keys: str) -> object:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def recorded(run: dict) -> Now:
    """A kept run's facts from its PREFIX_run.json (None where the record does not hold one)."""
    prompts, models = _get(run, "load", "prompts"), _get(run, "server", "models")
    version, config = _get(run, "server", "version"), _get(run, "speculative_config", "config")
    return Now(prompt_files(prompts) if isinstance(prompts, list) else None,
               model_names(models) if isinstance(models, list) else None,
               version if isinstance(version, str) else None,
               str(config) if config is not None else None)


def _shown(value: object) -> str:
    text = ", ".join(value) if isinstance(value, tuple) else str(value)
    return text[:300]


def difference(run: dict | None, now: Now | None) -> str | None:
    """The first fact of a kept run that differs from now, said as 'its X was A, now B'; None when none."""
    if run is None or now is None:
        return None
    then = recorded(run)
    for what, old, new in (("prompt files (by content)", then.prompts, now.prompts),
                           ("server's models", then.models, now.models),
                           ("server's version", then.version, now.version),
                           ("speculative config", then.speculative_config, now.speculative_config)):
        if old is not None and new is not None and old != new:
            return f"its {what} was {_shown(old)}, now {_shown(new)}"
    return None
