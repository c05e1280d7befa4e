"""The engine per request, in modelled time: where a stall starts; vLLM's per-request spec stats."""

from __future__ import annotations

import json

from locust_spec.sim import model as M
from locust_spec.sim import roofline as R
from locust_spec.sim.engine import Engine, EngineConfig, Request, SpecStats, StepOutput
from locust_spec.sim.metrics import SimMetrics
from tests.support import REFERENCE

CAPTURES = REFERENCE / "vllm-0.32-cpu"


def stalled_request(stall_at_token: int) -> tuple[Engine, list[StepOutput]]:
    engine = Engine(EngineConfig(R.GPUS["h100"], R.MODELS["8b"]), M.tokenizer(), SimMetrics("sim", 0))
    user = "Write a story about a lighthouse keeper."
    prompt = M.tokenizer().encode(M.render_prompt([{"role": "user", "content": user}]))
    target = M.Target(prompt, [], M.style_for(user), M.request_seed([user]), True)
    outputs: list[StepOutput] = []

    def deliver(_req: Request, out: StepOutput) -> bool:
        outputs.append(out)
        return True

    engine.submit(Request("r1", prompt, target, 20, deliver, stall_at_token=stall_at_token, stall_s=5.0))
    return engine, outputs


def test_a_stall_at_token_zero_holds_back_the_first_token_until_it_ends():
    engine, outputs = stalled_request(0)
    engine.step_now(100.0)
    engine.step_now(104.9)
    assert outputs == []
    engine.step_now(105.0)
    assert [o.tokens for o in outputs] == [1]


def test_a_stall_at_token_one_comes_after_the_first_token():
    engine, outputs = stalled_request(1)
    engine.step_now(100.0)
    engine.step_now(100.1)
    assert [o.tokens for o in outputs] == [1]
    engine.step_now(105.1)
    assert [o.tokens for o in outputs] == [1, 1]


def real_spec_metrics(name: str) -> dict:
    text = (CAPTURES / name).read_text()
    if name.endswith(".json"):
        return json.loads(text)["metrics"]["speculative_decoding"]
    final = [line for line in text.splitlines() if line.startswith("data: {") and '"metrics"' in line][-1]
    return json.loads(final[6:])["metrics"]["speculative_decoding"]


def test_spec_stats_after_speculation_have_the_keys_of_real_vllm_in_both_responses():
    stats = SpecStats(4, accepted=[0, 1, 4], drafted=[3, 1, 4])
    for name, streamed in (("stream_ngram_per_request_metrics.sse", True),
                           ("nonstream_ngram_per_request_metrics.json", False)):
        ours = stats.as_dict(streamed=streamed)
        assert list(ours) == list(real_spec_metrics(name))
        assert ours["per_step_accepted"] == [0, 1, 4] and ours["acceptance_histogram"] == [1, 1, 0, 0, 1]


def test_spec_stats_without_speculation_omit_per_step_lists_streamed_and_null_them_otherwise():
    real_keys = list(real_spec_metrics("stream_ngram_per_request_metrics.sse"))
    streamed, full = SpecStats(4).as_dict(streamed=True), SpecStats(4).as_dict(streamed=False)
    assert list(streamed) == [k for k in real_keys if not k.startswith("per_step_")]
    assert list(full) == real_keys
    assert full["per_step_accepted"] is None and full["per_step_drafted"] is None
    for d in (streamed, full):
        assert d["mean_acceptance_length"] == 1.0 and d["draft_acceptance_rate"] == 0.0
        assert d["num_spec_steps"] == 0 and d["acceptance_histogram"] == [0] * 5
