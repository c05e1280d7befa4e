"""The Kubernetes Jobs' containers run for real without a cluster (none here): each container's command
and arguments exactly as the manifests give them, its environment from the ConfigMap (a shorter ladder),
cluster names pointed at loopback: spec-sim arms, both arms' primes, masters and workers in turn, then
the verdict."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess

from locust_spec.core.resources import locustfile
from tests.docker_files import DOCKER, config, pod, resource
from tests.support import BIN, free_port

FAST = {"LEVELS": "1,2", "STAGE_TIME": "4s", "WARMUP": "1s", "METRICS_INTERVAL": "1", "PROMPTS": "code",
        "MAX_TOKENS": "16", "WORKERS": "2", "SERVER_WAIT_S": "60", "EXPECT_WORKERS_MAX_WAIT": "60",
        "RUN": "k8s"}

IMAGE_ENTRYPOINT = json.loads(re.search(r"^ENTRYPOINT (.+)$", (DOCKER / "Dockerfile").read_text(),
                                         re.M).group(1))


class Cluster:
    """What a kubelet would do with one container: $(VAR) from the environment, names resolved."""

    def __init__(self, tmp_path, names: dict[str, str]) -> None:
        self.app = tmp_path / "app"  # the image's working folder (docker/Dockerfile)
        (self.app / "runs").mkdir(parents=True)
        (self.app / "locustfiles").symlink_to(locustfile("sweep").parent)
        self.env = {**config(), **FAST}
        self.names = names
        self.logs = tmp_path

    def argv(self, container: dict, extra: tuple[str, ...] = ()) -> list[str]:
        command = container.get("command", IMAGE_ENTRYPOINT)  # none given: the image's
        argv = [re.sub(r"\$\(([A-Z_]+)\)", lambda m: self.env[m.group(1)], a)
                for a in [*command, *container.get("args", []), *extra]]
        for name, address in self.names.items():
            argv = [a.replace(name, address) for a in argv]
        return argv

    def start(self, container: dict, log: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
        env = {**os.environ, **self.env, "PATH": f"{BIN}:{os.environ['PATH']}"}
        return subprocess.Popen(self.argv(container, extra), cwd=self.app, env=env, stdout=subprocess.DEVNULL,
                                stderr=(self.logs / f"{log}.log").open("w"))

    def run(self, container: dict, log: str, timeout: float = 120) -> None:
        proc = self.start(container, log)
        assert proc.wait(timeout) == 0, (self.logs / f"{log}.log").read_text()[-3000:]


def test_the_jobs_commands_run_both_arms_in_turn_then_the_verdict(tmp_path, spec_sim):
    sims = {"vllm-off": spec_sim("--time-scale", "0.05"),
            "vllm-spec": spec_sim("--time-scale", "0.05", "--speculative-config",
                                  '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')}
    names = {}
    for name, sim in sims.items():
        address = sim.url.removeprefix("http://")
        names[f"{name}-0.{name}-pods:8000"] = address  # the headless Service's per-replica name
        names[f"{name}:8000"] = address
    ports = {arm: free_port() for arm in ("baseline", "candidate")}
    names |= {f"locust-{arm}-master": "127.0.0.1" for arm in ports}
    cluster = Cluster(tmp_path, names)
    for arm, port in ports.items():
        master_job = resource("Job", f"locust-{arm}-master")
        workers_job = resource("Job", f"locust-{arm}-workers")
        for init in pod(master_job)["initContainers"]:  # in order: the candidate's waits for the baseline
            cluster.run(init, f"{arm}-{init['name']}")
        # the port the Service maps to 5557 (5557 itself is shared by every Locust on this machine)
        master = cluster.start(pod(master_job)["containers"][0], f"{arm}-master",
                               extra=("--master-bind-port", str(port)))
        workers = []
        for i in range(int(FAST["WORKERS"])):
            wait, worker = pod(workers_job)["initContainers"][0], pod(workers_job)["containers"][0]
            wait = {**wait, "args": [wait["args"][0].replace("5557", str(port))]}
            cluster.run(wait, f"{arm}-wait{i}", timeout=60)
            worker = {**worker, "args": [str(port) if a == "5557" else a for a in worker["args"]]}
            workers.append(cluster.start(worker, f"{arm}-worker{i}"))
        try:
            assert master.wait(120) == 0, (tmp_path / f"{arm}-master.log").read_text()[-3000:]
            assert [w.wait(60) for w in workers] == [0] * len(workers)
        finally:
            for proc in (master, *workers):
                if proc.poll() is None:
                    proc.kill()
        out = cluster.app / "runs" / FAST["RUN"]
        assert (out / f".{arm}-done").exists()
        rows = list(csv.DictReader((out / arm / "r0_requests.csv").open()))
        assert rows and {r["prompt_class"] for r in rows} == {"code"}
        summary = json.loads((out / arm / "r0_summary.json").read_text())
        assert len(summary["client"]["generators"]["by_process"]) == int(FAST["WORKERS"])
    verdict = resource("Job", "locust-spec-verdict")
    cluster.run(pod(verdict)["initContainers"][0], "verdict-wait", timeout=60)
    cluster.run(pod(verdict)["containers"][0], "verdict")
    assert json.loads((cluster.app / "runs" / FAST["RUN"] / "verdict.json").read_text())["schema"] >= 1
    # a second run under the same RUN is refused rather than mixed with the first
    refused = cluster.start(next(c for c in pod(resource("Job", "locust-baseline-master"))["initContainers"]
                                 if c["name"] == "prime"), "again")
    assert refused.wait(60) == 1 and "holds an earlier run" in (tmp_path / "again.log").read_text()
