"""docker/ read as Compose and Kubernetes read it, for the tests that check it without Docker or a cluster."""

from __future__ import annotations

import re
import subprocess
from functools import cache

import yaml

from tests.support import BIN, PY, REPO

DOCKER = REPO / "docker"
K8S = DOCKER / "k8s"

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def env_defaults() -> dict[str, str]:
    values = {}
    for line in (DOCKER / ".env").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def _interpolate(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, default = match.group("name"), match.group("default")
        if name in env:
            return env[name]
        assert default is not None, f"${{{name}}} has no default and is not in docker/.env"
        return default

    # `$$` is a literal dollar for the container's shell
    return "$".join(_VARIABLE.sub(value, part) for part in text.split("$$"))


def _interpolated(node, env: dict[str, str]):
    """Compose substitutes variables in parsed values, not in the file's text."""
    if isinstance(node, dict):
        return {key: _interpolated(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [_interpolated(item, env) for item in node]
    return _interpolate(node, env) if isinstance(node, str) else node


def compose_file_values(name: str, **overrides: str) -> dict:
    """A compose file as Compose reads it: docker/.env, then the caller's environment (`overrides`)."""
    return _interpolated(yaml.safe_load((DOCKER / name).read_text()), {**env_defaults(), **overrides})


def options(command: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in command if arg.startswith("--")}


def value_of(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


@cache
def help_text(*cmd: str) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, f"{' '.join(cmd)} failed: {done.stderr[-2000:]}"
    return done.stdout


def known_options(tool: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text(str(BIN / tool), "--help")))


LOCUST_OPTIONS_SCRIPT = """
import sys
from locust.argument_parser import get_parser
from locust.util.load_locustfile import load_locustfile
load_locustfile(sys.argv[1])
for action in get_parser()._actions:
    print(*action.option_strings, getattr(action, "env_var", None) or "")
"""


@cache
def locust_options(locustfile: str) -> set[str]:
    """Options and environment variables Locust accepts once the locustfile has registered its own
    (`locust -f FILE --help` lists only Locust's)."""
    return set(help_text(PY, "-c", LOCUST_OPTIONS_SCRIPT, locustfile).split())


@cache
def manifests() -> tuple[dict, ...]:
    """Every resource the kustomization lists, in its order."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return tuple(doc for name in kustomization["resources"]
                 for doc in yaml.safe_load_all((K8S / name).read_text()) if doc)


def resource(kind: str, name: str) -> dict:
    found = [m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def config() -> dict[str, str]:
    return resource("ConfigMap", "locust-spec-run")["data"]


def pod(job_or_set: dict) -> dict:
    return job_or_set["spec"]["template"]["spec"]
