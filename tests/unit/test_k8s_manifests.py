"""docker/k8s holds together without a cluster: every manifest validates against Kubernetes' own schemas
(kubernetes-validate bundles them), and the arms, Jobs, options and files line up."""

from __future__ import annotations

import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.docker_files import (
    K8S,
    config,
    known_options,
    locust_options,
    manifests,
    options,
    pod,
    resource,
    value_of,
)
from tests.support import REPO

KUBERNETES_VERSIONS = ("1.29", "1.37")
"""The oldest release still in wide use and the newest the validator knows."""
ARMS = {"baseline": "vllm-off", "candidate": "vllm-spec"}
MASTER_ONLY = {"--master", "--master-bind-host", "--headless", "--exit-code-on-error", "--expect-workers",
               "--expect-workers-max-wait", "--host", "--metrics-url", "--csv", "--metrics-interval"}
"""Master options a worker has no use for; every other option of the master's the workers get too."""
_REFERENCE = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")
_SHELL_VARIABLE = re.compile(r"\$\{?([A-Z_][A-Z0-9_]*)")


def container(job_or_set: dict, name: str | None = None) -> dict:
    containers = pod(job_or_set)["containers"]
    return containers[0] if name is None else next(c for c in containers if c["name"] == name)


def all_containers() -> list[tuple[str, dict]]:
    return [(m["metadata"]["name"], c) for m in manifests() if m["kind"] in ("Job", "StatefulSet")
            for c in pod(m).get("initContainers", []) + pod(m)["containers"]]


def command_line(c: dict) -> list[str]:
    return [*c.get("command", []), *c.get("args", [])]


def expanded(args: list[str]) -> list[str]:
    """Arguments as the kubelet hands them over: $(VAR) from the container's environment (the ConfigMap)."""
    data = config()
    return [_REFERENCE.sub(lambda m: data[m.group(1)], a) for a in args]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version):
    for manifest in manifests():
        kubernetes_validate.validate(manifest, version, strict=True)
    job = resource("Job", "locust-spec-verdict")
    with pytest.raises(kubernetes_validate.ValidationError):  # the check does reject a misspelling
        kubernetes_validate.validate({**job, "spec": {**job["spec"], "paralelism": 1}}, version, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_the_same_resources():
    rendered = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted(
        (m["kind"], m["metadata"]["name"]) for m in manifests())
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "locust-spec" for d in docs)


def test_every_reference_to_the_run_options_is_in_the_configmap():
    data = config()
    assert all(isinstance(v, str) for v in data.values())
    for owner, c in all_containers():
        parts = command_line(c)
        used = set(_REFERENCE.findall(" ".join(parts)))
        if parts[:2] == ["sh", "-c"]:  # the script reads the environment itself
            used |= set(_SHELL_VARIABLE.findall(parts[2]))
        if used:
            assert {"configMapRef": {"name": "locust-spec-run"}} in c["envFrom"], f"{owner}/{c['name']}"
            assert used <= set(data), f"{owner}/{c['name']} needs {used - set(data)}"


def test_each_arm_is_vllm_serve_of_the_tested_release_on_its_own_gpu_with_probes():
    tested = re.search(r'VLLM_VERSION = "([0-9.]+)"', (REPO / "tests" / "vllm" / "vllm_env.py").read_text())
    for arm, name in ARMS.items():
        server = resource("StatefulSet", name)
        vllm = container(server)
        assert vllm["image"] == f"vllm/vllm-openai:v{tested.group(1)}"
        assert vllm["command"] == ["vllm", "serve"] and vllm["args"][0] == "$(MODEL)"
        assert "--model" not in vllm["args"]
        assert int(vllm["resources"]["limits"]["nvidia.com/gpu"]) >= 1  # a GPU per replica, never shared
        startup = vllm["startupProbe"]
        assert startup["httpGet"]["path"] == "/health"
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 900  # a model loads for minutes
        assert {"livenessProbe", "readinessProbe"} <= set(vllm)
        assert "/root/.cache" in [m["mountPath"] for m in vllm["volumeMounts"]]  # HF and compile caches
        speculative = "--speculative-config" in vllm["args"]
        assert speculative == (arm == "candidate")
    config_json = config()["SPECULATIVE_CONFIG"]
    assert yaml.safe_load(config_json)["num_speculative_tokens"] >= 1


def test_every_replica_is_scraped_through_its_arms_headless_service():
    for arm, name in ARMS.items():
        server = resource("StatefulSet", name)
        labels = server["spec"]["template"]["metadata"]["labels"]
        headless = resource("Service", server["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["selector"].items() <= labels.items()
        master = expanded(command_line(container(resource("Job", f"locust-{arm}-master"))))
        urls = [master[i + 1] for i, a in enumerate(master) if a == "--metrics-url"]
        pods = headless["metadata"]["name"]
        assert urls == [f"http://{name}-{i}.{pods}:8000/metrics" for i in range(server["spec"]["replicas"])]
        host = re.fullmatch(r"http://([a-z-]+):8000", value_of(master, "--host")).group(1)
        traffic = resource("Service", host)
        assert traffic["spec"]["selector"].items() <= labels.items()


def test_the_load_runs_as_jobs_that_end_with_the_run():
    kinds = {m["kind"] for m in manifests()}
    assert "Deployment" not in kinds
    for m in manifests():
        if m["kind"] == "Job":
            assert pod(m)["restartPolicy"] == "Never" and m["spec"]["activeDeadlineSeconds"] > 0
            context = pod(m)["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] != 0


def test_masters_and_workers_run_real_options_and_the_workers_get_all_the_masters_load_options():
    workers_wanted = int(config()["WORKERS"])
    for arm in ARMS:
        master_job = resource("Job", f"locust-{arm}-master")
        workers_job = resource("Job", f"locust-{arm}-workers")
        master = expanded(container(master_job)["args"])
        worker = expanded(container(workers_job)["args"])
        locustfile = value_of(master, "-f")
        assert value_of(worker, "-f") == locustfile and (REPO / locustfile).is_file()
        known = locust_options(str(REPO / locustfile))
        assert options(master) <= known and options(worker) <= known
        load = options(master) - MASTER_ONLY
        assert load and all(value_of(worker, o) == value_of(master, o) for o in load), arm
        assert workers_job["spec"]["parallelism"] == workers_job["spec"]["completions"] == workers_wanted
        assert value_of(master, "--expect-workers") == str(workers_wanted)
        assert float(value_of(master, "--expect-workers-max-wait")) > 0  # never waits for ever
        # the workers find their master through its Service, on the port the master listens on
        service = resource("Service", value_of(worker, "--master-host"))
        master_labels = master_job["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= master_labels.items()
        assert value_of(worker, "--master-port") == str(service["spec"]["ports"][0]["port"]) == "5557"
        waiting = pod(workers_job)["initContainers"][0]
        compile(waiting["args"][0], "wait-for-master", "exec")
        assert f'("{service["metadata"]["name"]}", 5557)' in waiting["args"][0]


def _script(c: dict) -> str:
    """The shell script of a `sh -c` container (in command or args)."""
    parts = command_line(c)
    assert parts[:2] == ["sh", "-c"]
    subprocess.run(["sh", "-n", "-c", parts[2]], check=True)
    return parts[2]


def test_arms_run_in_turn_primed_and_write_where_the_verdict_reads():
    verdict = resource("Job", "locust-spec-verdict")
    judged = expanded(container(verdict)["args"])
    assert options(judged) <= known_options("spec-verdict")
    waits = _script(pod(verdict)["initContainers"][0])
    for arm, server in ARMS.items():
        job = resource("Job", f"locust-{arm}-master")
        master = container(job)
        # results on the shared volume, where the verdict reads them
        assert value_of(expanded(master["args"]), "--csv") == f"{judged[list(ARMS).index(arm)]}/r0"
        volume = {"name": "results", "persistentVolumeClaim": {"claimName": "locust-spec-results"}}
        assert volume in pod(job)["volumes"] and volume in pod(verdict)["volumes"]
        assert {"name": "results", "mountPath": "/app/runs"} in master["volumeMounts"]
        # the marker a good run leaves, which the next arm and the verdict wait for
        marker = f'runs/$RUN/.{arm}-done'
        assert f'&& touch "{marker}"' in _script(master)
        assert marker in waits
        prime = next(c for c in pod(job)["initContainers"] if c["name"] == "prime")
        line = _script(prime).splitlines()[-1].split()
        assert line[:2] == ["exec", "spec-prime"] and set(options(line)) <= known_options("spec-prime")
        assert value_of(line, "--host") == value_of(expanded(master["args"]), "--host") == f"http://{server}:8000"
    candidate_inits = pod(resource("Job", "locust-candidate-master"))["initContainers"]
    assert [c["name"] for c in candidate_inits] == ["wait-for-baseline", "prime"]
    assert "runs/$RUN/.baseline-done" in _script(candidate_inits[0])
