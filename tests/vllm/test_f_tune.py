"""spec-tune starting its own real vLLM 0.32 servers, one per k."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import CLIENT_CPU, pinned
from tests.unit.test_tune_schedule import vllm_utils
from tests.vllm.arms import write_prompts
from tests.vllm.server import MODEL_NAME, serve_command, server_env

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]
log = logging.getLogger(__name__)


def test_spec_tune_with_a_server_command_completes(vllm_pool, vllm_env, vllm_models, tmp_path):
    vllm_pool.close()  # one vLLM at a time besides spec-tune's own
    template = shlex.join(serve_command(vllm_env, vllm_models, "{port}",
                                        ["--speculative-config", "{speculative_config}"]))
    out = tmp_path / "tune"
    cmd = pinned([sys.executable, "-m", "locust_spec.tune", "--server-cmd", template, "--k", "0,2",
                  "--levels", "1,4", "--stage-time", "12s", "--warmup", "2s", "--ignore-eos",
                  "--prompts", str(write_prompts(tmp_path / "prompts.jsonl")), "--model", MODEL_NAME,
                  "--no-prime", "--no-confirm", "--out", str(out)], CLIENT_CPU)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=server_env(vllm_env))
    log.info("spec-tune output:\n%s", done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    written = json.loads((out / "schedule.json").read_text())
    entries = written["num_speculative_tokens_per_batch_size"]
    real = vllm_utils()
    assert real.validate_and_normalize_dynamic_sd_schedule(entries)
    assert [d["users"] for d in written["levels"]] == [1, 4]
    assert all(d["batch"] is not None for d in written["levels"]), "vllm:num_requests_running not read"
    result = json.loads((out / "tune.json").read_text())
    # The confirmation pass would start a third vLLM (minutes on CPU); serving a schedule is tested in
    # test_b_ngram (test_the_schedule_drafts_at_one_user_and_not_at_four), confirming one on spec-sim (e2e).
    assert result["confirmation"] is None
    assert (out / "report.html").stat().st_size > 0
    for log_file in Path(out / "servers").glob("*.log"):
        assert log_file.stat().st_size > 0
