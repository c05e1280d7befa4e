"""Real vLLM 0.32 with a per-batch-size speculation schedule, and spec-tune starting its own servers."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import CLIENT_CPU, pinned
from tests.unit.test_tune_schedule import vllm_utils
from tests.vllm.arms import write_prompts
from tests.vllm.client import spec_counters, spec_stats, stream_chat
from tests.vllm.prompts import PROMPTS
from tests.vllm.server import MODEL_NAME, serve_command, server_env

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]
log = logging.getLogger(__name__)
MAX_TOKENS = 120


def stream_together(url: str, n: int) -> list[dict]:
    """n streams started at once (a barrier), the same length each: their steps share one batch."""
    barrier = threading.Barrier(n)
    stats: list[dict] = [{}] * n

    def one(i: int) -> None:
        barrier.wait()
        events = stream_chat(url, PROMPTS[i % len(PROMPTS)], max_tokens=MAX_TOKENS, ignore_eos=True)
        stats[i] = spec_stats(events)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return stats


def test_schedule_drafts_at_one_user_and_not_at_four(vllm_pool):
    server = vllm_pool.server("ngram-schedule")
    before = spec_counters(server.url)
    alone = spec_stats(stream_chat(server.url, PROMPTS[0], max_tokens=MAX_TOKENS, ignore_eos=True))
    alone_delta = spec_counters(server.url) - before
    log.info("schedule [[1,1,4],[2,256,0]] at 1 user: %s", alone)
    assert alone["num_spec_steps"] > 0 and alone_delta.drafts > 0
    assert 0 < max(alone["per_step_drafted"]) <= 4

    before = spec_counters(server.url)
    crowd = stream_together(server.url, 4)
    crowd_delta = spec_counters(server.url) - before
    log.info("at 4 users: spec steps %s, counter drafts %s", [s["num_spec_steps"] for s in crowd],
             crowd_delta.drafts)
    # Steps of batch 1 can only happen at the edges (one request admitted or left alone): a handful.
    steps_per_token_alone = alone["num_spec_steps"] / MAX_TOKENS
    steps_per_token_crowd = sum(s["num_spec_steps"] for s in crowd) / (4 * MAX_TOKENS)
    assert steps_per_token_crowd < 0.25 * steps_per_token_alone
    assert crowd_delta.drafts == sum(s["num_spec_steps"] for s in crowd)


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
    # The confirmation pass would start a third vLLM (minutes on CPU); serving a schedule is
    # test_schedule_drafts_at_one_user_and_not_at_four's, confirming one is the spec-sim e2e test's.
    assert result["confirmation"] is None
    assert (out / "report.html").stat().st_size > 0
    for log_file in Path(out / "servers").glob("*.log"):
        assert log_file.stat().st_size > 0
