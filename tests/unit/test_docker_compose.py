"""The docker setup holds together without Docker: compose files, Dockerfile and the commands they run."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.support import BIN, PY, REPO

DOCKER = REPO / "docker"
COMPOSE_FILES = ["compose.yaml", "compose.sim.yaml"]
OUTPUT_FOLDER = REPO / "runs"
"""The one bind-mounted folder that need not exist: Docker creates it and runs write into it."""

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def _env_defaults() -> dict[str, str]:
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

    return _VARIABLE.sub(value, text)


def _interpolated(node, env: dict[str, str]):
    """Compose substitutes variables in parsed values, not in the file's text."""
    if isinstance(node, dict):
        return {key: _interpolated(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [_interpolated(item, env) for item in node]
    return _interpolate(node, env) if isinstance(node, str) else node


def _compose(name: str) -> dict:
    return _interpolated(yaml.safe_load((DOCKER / name).read_text()), _env_defaults())


def _options(command: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in command if arg.startswith("--")}


@cache
def _help(*cmd: str) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, f"{' '.join(cmd)} failed: {done.stderr[-2000:]}"
    return done.stdout


def _known_options(*cmd: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", _help(*cmd)))


_LOCUST_OPTIONS = """
import sys
from locust.argument_parser import get_parser
from locust.util.load_locustfile import load_locustfile
load_locustfile(sys.argv[1])
for action in get_parser()._actions:
    print(*action.option_strings, getattr(action, "env_var", None) or "")
"""


@cache
def _locust_options(locustfile: str) -> set[str]:
    """Options and environment variables Locust accepts once the locustfile has registered its own
    (`locust -f FILE --help` lists only Locust's)."""
    return set(_help(PY, "-c", _LOCUST_OPTIONS, locustfile).split())


def _dockerfile_copies(dockerfile: Path) -> list[str]:
    sources = []
    for line in dockerfile.read_text().splitlines():
        parts = line.split()
        if parts and parts[0].upper() == "COPY":
            sources += [p for p in parts[1:-1] if not p.startswith("--")]
    return sources


@pytest.fixture(params=COMPOSE_FILES)
def compose(request) -> dict:
    return _compose(request.param)


def test_every_variable_has_a_value_and_the_speculative_config_is_json():
    for name in COMPOSE_FILES:
        _compose(name)
    config = json.loads(_env_defaults()["SPECULATIVE_CONFIG"])
    assert config["num_speculative_tokens"] >= 1


def test_every_build_context_dockerfile_and_copied_path_exists(compose):
    builds = [svc["build"] for svc in compose["services"].values() if "build" in svc]
    assert builds, "the plugin image is built from this repository"
    for build in builds:
        context = (DOCKER / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), dockerfile
        for source in _dockerfile_copies(dockerfile):
            assert (context / source).exists(), f"{dockerfile.name} copies {source}, which is missing"


def test_every_mounted_repository_path_exists(compose):
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith("."):
                continue
            path = (DOCKER / source).resolve()
            assert path == OUTPUT_FOLDER or path.exists(), f"{name} mounts {source}, which is missing"


def test_locust_services_run_a_real_locustfile_with_real_options(compose):
    for name in ("master", "workers"):
        command = compose["services"][name]["command"]
        locustfile = command[command.index("-f") + 1]
        assert (REPO / locustfile).is_file(), f"{name} runs {locustfile}, which is missing"
        known = _locust_options(locustfile)
        assert _options(command) <= known, f"{name}: unknown options {_options(command) - known}"
    for name, value in compose["services"]["master"]["environment"].items():
        assert name in _locust_options(locustfile), f"master sets {name}, which Locust does not read"
        assert value != ""


def test_the_master_serves_the_web_ui_and_workers_find_it(compose):
    services = compose["services"]
    assert "8089:8089" in services["master"]["ports"]
    workers = services["workers"]["command"]
    assert "--worker" in workers and workers[workers.index("--master-host") + 1] == "master"
    assert "--master" in services["master"]["command"]


def test_the_verdict_is_a_one_shot_reading_both_arms(compose):
    verdict = compose["services"]["verdict"]
    assert verdict["profiles"] == ["verdict"]
    assert verdict["entrypoint"] == ["spec-verdict"]
    known = _known_options(str(BIN / "spec-verdict"), "--help")
    assert _options(verdict["command"]) <= known
    arms = [arg for arg in verdict["command"] if not arg.startswith("-")][:2]
    master_csv = compose["services"]["master"]["command"]
    prefix = master_csv[master_csv.index("--csv") + 1]
    assert [Path(arm).name for arm in arms] == ["baseline", "candidate"]
    assert Path(prefix).parent.parent == Path(arms[0]).parent


def test_every_dependency_names_a_service(compose):
    services = compose["services"]
    for name, svc in services.items():
        depends = svc.get("depends_on", [])
        assert set(depends) <= set(services), f"{name} depends on a missing service"


def test_the_gpu_file_serves_both_arms_on_vllm_with_a_gpu_each():
    services = _compose("compose.yaml")["services"]
    for name in ("vllm-off", "vllm-spec"):
        svc = services[name]
        assert svc["image"].startswith("vllm/vllm-openai")
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
    assert "--speculative-config" not in services["vllm-off"]["command"]
    spec = services["vllm-spec"]["command"]
    json.loads(spec[spec.index("--speculative-config") + 1])


def test_the_sim_file_serves_both_arms_on_spec_sim_with_real_options():
    services = _compose("compose.sim.yaml")["services"]
    known = _known_options(str(BIN / "spec-sim"), "--help")
    for name in ("sim-off", "sim-spec"):
        svc = services[name]
        assert svc["entrypoint"] == ["spec-sim"] and "deploy" not in svc
        unknown = _options(svc["command"]) - known
        assert not unknown, f"{name}: unknown options {unknown}"
    assert "--speculative-config" not in services["sim-off"]["command"]
    assert "--speculative-config" in services["sim-spec"]["command"]
