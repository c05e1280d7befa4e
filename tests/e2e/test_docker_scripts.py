"""The single-GPU profile's two scripts, run for real without Docker (no engine here): each arm's server
until its sweep is done, the sweep priming and climbing the ladder, then the next arm, then the verdict.
A `vllm` on PATH stands in for vLLM's CLI: `vllm serve MODEL ARGS...` runs spec-sim with the same ARGS."""

from __future__ import annotations

import json
import os
import subprocess

from tests.docker_files import DOCKER, compose_file_values
from tests.support import BIN, free_port, wait_http

VLLM_STAND_IN = """#!/bin/sh
[ "$1" = serve ] || exit 2
shift 2
exec spec-sim "$@" --time-scale 0.05
"""
RUN = "solo"


def _path(tmp_path) -> str:
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "vllm").write_text(VLLM_STAND_IN)
    (shim / "vllm").chmod(0o755)
    return f"{shim}:{BIN}:{os.environ['PATH']}"


def _serve(tmp_path, service: dict, port: int) -> subprocess.Popen:
    """The compose service's server, its options as compose gives them, on a loopback port."""
    args = [{"0.0.0.0": "127.0.0.1", "8000": str(port)}.get(a, a) for a in service["command"]]
    done = service["environment"]["DONE_FILE"].replace("/app/", f"{tmp_path}/", 1)
    env = {**os.environ, "PATH": _path(tmp_path), "DONE_FILE": done}
    return subprocess.Popen(["sh", str(DOCKER / "serve-until-done.sh"), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{port}.log").open("w"))


def test_single_gpu_scripts_run_the_arms_in_turn_and_the_verdict_reads_them(tmp_path):
    services = compose_file_values("compose.yaml", RUN=RUN)["services"]
    (tmp_path / "runs" / RUN).mkdir(parents=True)
    (tmp_path / "runs" / RUN / ".baseline-done").touch()  # a previous run's marker must not stop the server
    for server, sweep in (("solo-off", "sweep-off"), ("solo-spec", "sweep-spec")):
        port = free_port()
        proc = _serve(tmp_path, services[server], port)
        try:
            wait_http(f"http://127.0.0.1:{port}/health", timeout=60, proc=proc)
            env = {**services[sweep]["environment"], "TARGET": f"http://127.0.0.1:{port}",
                   "PROMPTS": "code,quote", "MAX_TOKENS": "32", "LEVELS": "1,2", "STAGE_TIME": "4s",
                   "WARMUP": "1s", "METRICS_INTERVAL": "1"}
            swept = subprocess.run(["sh", str(DOCKER / "sweep-arm.sh")], env={**os.environ, **env,
                                   "PATH": _path(tmp_path)}, cwd=tmp_path, capture_output=True, text=True,
                                   timeout=180)
            assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr[-3000:]
            assert f"{env['ARM']}: primed the prefix cache with" in swept.stdout
            # the baseline's self-check: its noise floor for the answer gate, beside its run
            assert ("baseline: self-check: " in swept.stdout) == (env["ARM"] == "baseline")
            assert proc.wait(60) == 0  # the server stopped by itself once its sweep was done
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    for arm in ("baseline", "candidate"):
        summary = json.loads((tmp_path / "runs" / RUN / arm / "r0_summary.json").read_text())
        assert summary["client"]["requests"] > 0
    verdict = services["verdict"]["command"]
    judged = subprocess.run([str(BIN / "spec-verdict"), *verdict], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert judged.returncode == 0, judged.stderr[-3000:]
    judged_doc = json.loads((tmp_path / "runs" / RUN / "verdict.json").read_text())
    assert judged_doc["schema"] >= 1
    assert all(level["answers"]["noise_floor_from"] for level in judged_doc["levels"]), judged_doc["levels"]


def test_the_server_script_fails_when_vllm_dies_before_the_sweep(tmp_path):
    shim = tmp_path / "dead"
    shim.mkdir()
    (shim / "vllm").write_text("#!/bin/sh\nexit 3\n")
    (shim / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "DONE_FILE": str(tmp_path / "never")}
    done = subprocess.run(["sh", str(DOCKER / "serve-until-done.sh"), "model"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "exited before the sweep finished" in done.stderr
