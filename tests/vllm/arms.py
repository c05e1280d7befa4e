"""One real Locust sweep at 1 user against a running vLLM server, with the server's counters around it."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO, run_locust
from tests.vllm.client import SpecCounters, spec_counters
from tests.vllm.prompts import PROMPTS
from tests.vllm.server import MODEL_NAME, VllmServer

ARM_MAX_TOKENS = 48
STAGE_TIME = "16s"
WARMUP = "2s"


@dataclass(frozen=True)
class ArmRun:
    """A finished run: its `--csv` prefix, and the server's own counters just before and after it."""

    variant: str
    prefix: Path
    before: SpecCounters
    after: SpecCounters

    @property
    def delta(self) -> SpecCounters:
        return self.after - self.before

    def rows(self) -> list[dict]:
        with Path(f"{self.prefix}_requests.csv").open(newline="") as fh:
            return list(csv.DictReader(fh))


def write_prompts(path: Path) -> Path:
    with path.open("w") as fh:
        for i, prompt in enumerate(PROMPTS):
            line = {"id": f"p{i}", "class": "chat", "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": ARM_MAX_TOKENS}
            fh.write(json.dumps(line) + "\n")
    return path


def run_arm(server: VllmServer, folder: Path) -> ArmRun:
    """`locustfiles/sweep.py` at one level of 1 user, scraping /metrics; users finish their request at stop
    (`--stop-timeout`), so no request is cut off and counters and rows cover the same work."""
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / server.variant
    prompts = write_prompts(folder / "prompts.jsonl")
    before = spec_counters(server.url)
    proc = run_locust(
        ["-f", str(REPO / "locustfiles" / "sweep.py"), "--headless", "--host", server.url,
         "--csv", str(prefix),
         "--metrics-url", server.url + "/metrics", "--metrics-interval", "2", "--levels", "1",
         "--stage-time", STAGE_TIME, "--warmup", WARMUP, "--ignore-eos", "--prompts", str(prompts),
         "--model", MODEL_NAME, "--stop-timeout", "60", "--only-summary"],
        cwd=folder, timeout=180,
    )
    (folder / "locust.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"locust against vLLM ({server.variant}) failed:\n{proc.stderr[-3000:]}"
    return ArmRun(server.variant, prefix, before, spec_counters(server.url))
