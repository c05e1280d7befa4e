"""Where the packaged data lives: the built-in prompt sets and the locustfiles; installed versions.

They are the top-level `prompts/` and `locustfiles/` folders of the checkout, installed inside this package
(`locust_spec.prompt_sets`, `locust_spec.locustfiles`), so they are found the same way from a wheel, an
editable install or a container.
"""

from __future__ import annotations

from importlib import metadata
from importlib.resources import files
from pathlib import Path


def installed_version(distribution: str = "locust-spec") -> str | None:
    """The installed version of a distribution (this package's by default); None when not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def prompts_dir() -> Path:
    return Path(str(files("locust_spec.prompt_sets")))


def locustfiles_dir() -> Path:
    return Path(str(files("locust_spec.locustfiles")))


def locustfile(name: str) -> Path:
    """A packaged locustfile by name (`chat`, `sweep`, `multiturn`) or file name."""
    path = locustfiles_dir() / (name if name.endswith(".py") else f"{name}.py")
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in locustfiles_dir().glob("*.py") if p.stem != "__init__"))
        raise FileNotFoundError(f"no packaged locustfile {name!r} (known: {known})")
    return path
