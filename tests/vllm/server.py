"""Start and stop one real `vllm serve` (CPU build) on loopback, pinned to the server core."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import SERVER_CPU, free_port, pinned, wait_http
from tests.vllm.models import ModelSet
from tests.vllm.vllm_env import VllmEnv

MODEL_NAME = "tiny-llama"
HEALTH_TIMEOUT_S = 180.0
# k=4 at batch 1 and none from batch 2 (vLLM 0.32's num_speculative_tokens_per_batch_size): one server for
# the n-gram tests, which send one request at a time (plain k=4 there), and for the schedule's test, which
# crowds it. A server start costs ~50 s of the CI budget.
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
         "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 256, 0]]}
VARIANTS = ("off", "ngram", "draft-copy", "draft-noisy", "draft-unrelated")


def variant_args(variant: str, models: ModelSet) -> list[str]:
    """Extra `vllm serve` flags for a variant; the n-gram one also reports per-request speculation stats."""
    drafts = {"draft-copy": models.draft_copy, "draft-noisy": models.draft_noisy,
              "draft-unrelated": models.draft_unrelated}
    if variant == "off":
        return []
    if variant == "ngram":
        return ["--speculative-config", json.dumps(NGRAM), "--per-request-spec-decode-metrics", "detailed"]
    if variant in drafts:
        spec = {"method": "draft_model", "model": str(drafts[variant]), "num_speculative_tokens": 4}
        return ["--speculative-config", json.dumps(spec)]
    raise ValueError(f"unknown vLLM variant {variant!r}; known: {', '.join(VARIANTS)}")


def server_env(env: VllmEnv) -> dict[str, str]:
    runtime = env.runtime_cache
    tmp = runtime / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": SERVER_CPU,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": str(runtime / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(runtime / "inductor"), "TMPDIR": str(tmp),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # see serve_command
    }


@dataclass
class VllmServer:
    """A running `vllm serve`; `url` is its base URL, `start_s` how long it took to answer /health."""

    variant: str
    proc: subprocess.Popen
    url: str
    log: Path
    start_s: float = 0.0
    args: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to the pid we started; its process group (engine core, worker) is killed if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def serve_command(env: VllmEnv, models: ModelSet, port: str, extra: list[str]) -> list[str]:
    """`vllm serve` of the tiny target, pinned to the server core (`port` may be a template's {port})."""
    return pinned([str(env.vllm), "serve", str(models.target), "--host", "127.0.0.1", "--port", port,
                   "--served-model-name", MODEL_NAME, "--dtype", "bfloat16", "--max-model-len", "2048",
                   # The compile cache does not load back on vllm-cpu 0.32 ("no attribute
                   # finalize_loading"), so each start would recompile for 40-60 s; eager decodes
                   # this tiny model as fast.
                   "--enforce-eager",
                   # The model runs in the engine-core process, as vLLM runs one GPU's model (the CPU
                   # platform's default starts a third process for it: one more import of torch and
                   # vLLM, ~20 s of each start on one core; with VLLM_ENABLE_V1_MULTIPROCESSING=0 in
                   # server_env, which the CPU platform wants before it allows this)
                   "--distributed-executor-backend", "uni", *extra], SERVER_CPU)


def start_vllm(env: VllmEnv, models: ModelSet, variant: str, logdir: Path) -> VllmServer:
    """Start one server for `variant`, wait for /health, and warm it up with one short request."""
    port = free_port()
    extra = variant_args(variant, models)
    cmd = serve_command(env, models, str(port), extra)
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"vllm-{variant}-{port}.log"
    started = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=server_env(env),
                                start_new_session=True)
    server = VllmServer(variant, proc, f"http://127.0.0.1:{port}", log, args=extra)
    try:
        wait_http(server.url + "/health", timeout=HEALTH_TIMEOUT_S, proc=proc)
        server.start_s = time.monotonic() - started
        warm_up(server.url)
    except Exception as exc:
        server.stop()
        raise RuntimeError(f"vllm serve ({variant}) did not come up: {exc}\n{server.log_tail()}") from None
    return server


def warm_up(url: str) -> None:
    """One request: the n-gram proposer compiles on the first one (seconds), which no test should time."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 16,
            "temperature": 0}
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
