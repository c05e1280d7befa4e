"""The docker setup holds together without Docker (no engine runs here): the compose files validate against
the Compose Specification's schema, and the Dockerfile, the commands and the options they run are real."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from tests.docker_files import (
    DOCKER,
    compose_file_values,
    env_defaults,
    known_options,
    locust_options,
    options,
    value_of,
)
from tests.support import REPO

COMPOSE_FILES = ["compose.yaml", "compose.sim.yaml"]
OUTPUT_FOLDER = REPO / "runs"
"""The one bind-mounted folder that need not exist in a checkout: the documented commands make it."""
VLLM_SERVICES = ("vllm-off", "vllm-spec", "solo-off", "solo-spec")
APP = "/app"
"""The locust-spec image's working folder (docker/Dockerfile): relative paths in commands start there."""

def _dockerfile_steps(dockerfile: Path) -> list[tuple[str, str]]:
    """(instruction, rest) per instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    steps = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, rest = line.strip().partition(" ")
            steps.append((instruction.upper(), rest))
    return steps


def _copies(dockerfile: Path) -> list[str]:
    return [p for step, rest in _dockerfile_steps(dockerfile) if step == "COPY"
            for p in rest.split()[:-1] if not p.startswith("--")]


def _mounts(svc: dict) -> list[tuple[str, str]]:
    """(source, target) of each volume, short or long syntax."""
    mounts = []
    for volume in svc.get("volumes", []):
        if isinstance(volume, dict):
            mounts.append((volume["source"], volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            mounts.append((source, target))
    return mounts


def _gpus(svc: dict) -> list[str]:
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert [d["capabilities"] for d in devices] == [["gpu"]] and "count" not in devices[0]
    return devices[0]["device_ids"]


@cache
def _compose_schema() -> jsonschema.protocols.Validator:
    """The Compose Specification's JSON schema, as check-jsonschema vendors it (no network)."""
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(params=COMPOSE_FILES)
def compose_file(request) -> str:
    return request.param


@pytest.fixture
def compose(compose_file) -> dict:
    return compose_file_values(compose_file)


def test_every_variable_has_a_value_and_the_speculative_config_is_json():
    for name in COMPOSE_FILES:
        compose_file_values(name)
    config = json.loads(env_defaults()["SPECULATIVE_CONFIG"])
    assert config["num_speculative_tokens"] >= 1


def test_the_compose_files_follow_the_compose_specification(compose):
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in _compose_schema().iter_errors(compose)]
    assert not errors, errors
    broken = {**compose, "services": {**compose["services"], "typo": {"imagee": "x"}}}
    assert not _compose_schema().is_valid(broken)  # the schema does reject what Compose would


def test_every_build_context_dockerfile_and_copied_path_exists(compose):
    builds = [svc["build"] for svc in compose["services"].values() if "build" in svc]
    assert builds, "the plugin image is built from this repository"
    for build in builds:
        context = (DOCKER / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), dockerfile
        for source in _copies(dockerfile):
            assert (context / source).exists(), f"{dockerfile.name} copies {source}, which is missing"


def test_the_image_installs_dependencies_before_code_and_runs_as_a_user():
    steps = _dockerfile_steps(DOCKER / "Dockerfile")
    first_install = next(i for i, (step, rest) in enumerate(steps) if step == "RUN" and "pip install" in rest)
    before = [p for step, rest in steps[:first_install] if step == "COPY" for p in rest.split()[:-1]]
    assert before == ["pyproject.toml"], "a code edit must not invalidate the dependency layer"
    users = [rest for step, rest in steps if step == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert ("WORKDIR", APP) in steps


def test_every_mounted_repository_path_exists(compose):
    for name, svc in compose["services"].items():
        for source, _ in _mounts(svc):
            if not source.startswith("."):
                continue
            path = (DOCKER / source).resolve()
            assert path == OUTPUT_FOLDER or path.exists(), f"{name} mounts {source}, which is missing"
            if path == OUTPUT_FOLDER:  # a long-syntax bind that refuses to create it as root
                assert any(isinstance(v, dict) and v["bind"]["create_host_path"] is False
                           for v in svc["volumes"]), name


def test_locust_spec_containers_run_as_the_caller_and_write_under_runs(compose_file, compose):
    caller = compose_file_values(compose_file, HOST_UID="1234", HOST_GID="50")["services"]
    for name, svc in compose["services"].items():
        if svc.get("image") != "locust-spec:latest" or svc.get("entrypoint") == ["spec-sim"]:
            continue
        assert svc["user"] == "1000:1000" and caller[name]["user"] == "1234:50", name
        assert (str(OUTPUT_FOLDER.relative_to(REPO)), f"{APP}/runs") in [
            (Path(s).name, t) for s, t in _mounts(svc)], name


def test_published_ports_are_loopback_unless_asked(compose):
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_locust_services_run_a_real_locustfile_with_real_options(compose):
    services = compose["services"]
    for name in ("master", "workers"):
        command = services[name]["command"]
        locustfile = value_of(command, "-f")
        assert (REPO / locustfile).is_file(), f"{name} runs {locustfile}, which is missing"
        known = locust_options(str(REPO / locustfile))
        assert options(command) <= known, f"{name}: unknown options {options(command) - known}"
    for name, value in services["master"]["environment"].items():
        assert name in locust_options(str(REPO / locustfile)), f"master sets {name}, which Locust ignores"
        assert value != ""
    # a headless master gives up on a missing worker instead of waiting for ever
    assert float(services["master"]["environment"]["LOCUST_EXPECT_WORKERS_MAX_WAIT"]) > 0
    # the image links the installed locustfiles where the checkout has them, so `-f` means the same file
    assert any(step == "RUN" and "ln -s" in rest and rest.rstrip().endswith(" locustfiles")
               for step, rest in _dockerfile_steps(DOCKER / "Dockerfile"))


def test_the_master_serves_the_web_ui_and_workers_find_it(compose):
    services = compose["services"]
    assert services["master"]["ports"] == ["127.0.0.1:8089:8089"]
    workers = services["workers"]["command"]
    assert "--worker" in workers and value_of(workers, "--master-host") == "master"
    assert "--master" in services["master"]["command"]


def test_ab_runs_spec_ab_against_both_arms_of_the_file(compose):
    services = compose["services"]
    ab = services["ab"]
    assert ab["entrypoint"] == ["spec-ab"]
    command = ab["command"]
    assert options(command) <= known_options("spec-ab")
    for arm in ("--baseline", "--candidate"):
        url = value_of(command, arm)
        service = re.fullmatch(r"http://([a-z-]+):8000", url).group(1)
        assert service in services and ab["depends_on"][service] == {"condition": "service_healthy"}
        assert "healthcheck" in services[service]
    assert value_of(command, "--baseline") != value_of(command, "--candidate")
    assert value_of(command, "--out").startswith("runs/")


def test_the_verdict_is_a_one_shot_reading_both_arms(compose):
    verdict = compose["services"]["verdict"]
    assert verdict["entrypoint"] == ["spec-verdict"]
    assert options(verdict["command"]) <= known_options("spec-verdict")
    arms = [arg for arg in verdict["command"] if not arg.startswith("-")][:2]
    assert [Path(arm).name for arm in arms] == ["baseline", "candidate"]
    master_csv = value_of(compose["services"]["master"]["command"], "--csv")
    assert Path(master_csv).parent.parent == Path(arms[0]).parent == Path(
        value_of(compose["services"]["ab"]["command"], "--out"))


def test_every_dependency_names_a_service(compose):
    services = compose["services"]
    for name, svc in services.items():
        depends = svc.get("depends_on", [])
        assert set(depends) <= set(services), f"{name} depends on a missing service"


def test_no_documented_command_can_cut_the_masters_final_files():
    for path in [*(DOCKER / n for n in COMPOSE_FILES), REPO / "README.md", REPO / "docs" / "distributed.md"]:
        assert "--abort-on-container-exit" not in path.read_text(), path.name


def test_each_arm_gets_its_own_gpu_and_the_choice_is_overridable():
    services = compose_file_values("compose.yaml")["services"]
    assert _gpus(services["vllm-off"]) != _gpus(services["vllm-spec"])
    moved = compose_file_values("compose.yaml", GPU_BASELINE="2", GPU_CANDIDATE="3")["services"]
    assert (_gpus(moved["vllm-off"]), _gpus(moved["vllm-spec"])) == (["2"], ["3"])
    assert _gpus(services["solo-off"]) == _gpus(services["solo-spec"])


def test_vllm_runs_the_tested_release_as_vllm_serve_model_with_its_compile_cache():
    tested = re.search(r'VLLM_VERSION = "([0-9.]+)"', (REPO / "tests" / "vllm" / "vllm_env.py").read_text())
    services = compose_file_values("compose.yaml")["services"]
    for name in VLLM_SERVICES:
        svc = services[name]
        assert svc["image"] == f"vllm/vllm-openai:v{tested.group(1)}"
        command = svc["command"]
        assert "--model" not in command and command[0] == env_defaults()["MODEL"], name
        assert "/root/.cache/vllm" in [target for _, target in _mounts(svc)], name
    for name in ("vllm-off", "vllm-spec"):
        assert services[name]["entrypoint"] == ["vllm", "serve"]
    for name in ("solo-off", "solo-spec"):
        script = [t for s, t in _mounts(services[name]) if s.endswith("serve-until-done.sh")]
        assert services[name]["entrypoint"] == ["sh", *script]
    assert 'vllm serve "$@"' in (DOCKER / "serve-until-done.sh").read_text()
    for off, spec in (("vllm-off", "vllm-spec"), ("solo-off", "solo-spec")):
        assert "--speculative-config" not in services[off]["command"]
        json.loads(value_of(services[spec]["command"], "--speculative-config"))


def test_single_gpu_runs_the_arms_one_after_the_other():
    services = compose_file_values("compose.yaml")["services"]
    single = {name for name, svc in services.items() if "single-gpu" in svc.get("profiles", [])}
    assert single == {"solo-off", "sweep-off", "solo-spec", "sweep-spec", "verdict"}
    assert services["solo-spec"]["depends_on"]["solo-off"] == {"condition": "service_completed_successfully"}
    assert services["verdict"]["depends_on"]["sweep-spec"]["condition"] == "service_completed_successfully"
    for server, sweep in (("solo-off", "sweep-off"), ("solo-spec", "sweep-spec")):
        env = services[sweep]["environment"]
        assert env["TARGET"] == f"http://{server}:8000"
        assert services[sweep]["depends_on"][server] == {"condition": "service_healthy"}
        # the marker the sweep leaves (sweep-arm.sh, run from /app) is the one its server waits for
        assert services[server]["environment"]["DONE_FILE"] == f"{APP}/runs/{env['RUN']}/.{env['ARM']}-done"
        script = [t for s, t in _mounts(services[sweep]) if s.endswith("sweep-arm.sh")]
        assert services[sweep]["entrypoint"] == ["sh", *script]
        assert set(re.findall(r"\$\{?([A-Z_]+)", (DOCKER / "sweep-arm.sh").read_text())) <= set(env)
    arms = {services[sweep]["environment"]["ARM"] for sweep in ("sweep-off", "sweep-spec")}
    assert arms == {"baseline", "candidate"}


def test_the_sim_file_serves_both_arms_on_spec_sim_with_real_options():
    services = compose_file_values("compose.sim.yaml")["services"]
    known = known_options("spec-sim")
    for name in ("sim-off", "sim-spec"):
        svc = services[name]
        assert svc["entrypoint"] == ["spec-sim"] and "deploy" not in svc
        unknown = options(svc["command"]) - known
        assert not unknown, f"{name}: unknown options {unknown}"
    assert "--speculative-config" not in services["sim-off"]["command"]
    assert "--speculative-config" in services["sim-spec"]["command"]
