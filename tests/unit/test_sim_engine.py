"""The engine per request, in modelled time: where a stall starts; vLLM's per-request spec stats; answers
with and without speculation, a lossy verifier, synthetic acceptance."""

from __future__ import annotations

import json

from locust_spec.sim import model as M
from locust_spec.sim import roofline as R
from locust_spec.sim.drafters import SpecConfig, parse_spec_config
from locust_spec.sim.engine import Engine, EngineConfig, Request, RequestSpecRecord, StepOutput
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
    stats = RequestSpecRecord(4, accepted=[0, 1, 4], drafted=[3, 1, 4])
    for name, streamed in (("stream_ngram_per_request_metrics.sse", True),
                           ("nonstream_ngram_per_request_metrics.json", False)):
        ours = stats.to_dict(streamed=streamed)
        assert list(ours) == list(real_spec_metrics(name))
        assert ours["per_step_accepted"] == [0, 1, 4] and ours["acceptance_histogram"] == [1, 1, 0, 0, 1]


def test_spec_stats_without_speculation_omit_per_step_lists_streamed_and_null_them_otherwise():
    real_keys = list(real_spec_metrics("stream_ngram_per_request_metrics.sse"))
    streamed, full = RequestSpecRecord(4).to_dict(streamed=True), RequestSpecRecord(4).to_dict(streamed=False)
    assert list(streamed) == [k for k in real_keys if not k.startswith("per_step_")]
    assert list(full) == real_keys
    assert full["per_step_accepted"] is None and full["per_step_drafted"] is None
    for d in (streamed, full):
        assert d["mean_acceptance_length"] == 1.0 and d["draft_acceptance_rate"] == 0.0
        assert d["num_spec_steps"] == 0 and d["acceptance_histogram"] == [0] * 5


def answers(spec: SpecConfig | None, accept_wrong: float = 0.0) -> tuple[list[str], SimMetrics]:
    """Every prompt of a small copy-heavy set answered to the end, one step at a time."""
    metrics = SimMetrics("sim", spec.num_speculative_tokens if spec else 0)
    cfg = EngineConfig(R.GPUS["h100"], R.MODELS["8b"], spec, R.MODELS["1b"] if spec else None,
                       accept_wrong=accept_wrong)
    engine = Engine(cfg, M.tokenizer(), metrics)
    texts: dict[str, list[str]] = {}
    for n in range(6):
        user = f"Repeat verbatim: the {n} quick brown foxes jump over the lazy dog near the river bank."
        prompt = M.tokenizer().encode(M.render_prompt([{"role": "user", "content": user}]))
        target = M.Target(prompt, M.tokenizer().encode(M.copy_source(user)), M.style_for(user),
                          M.request_seed([user]), True)
        texts[f"r{n}"] = []
        seed = M.request_seed([user])
        collect = texts[f"r{n}"].append
        engine.submit(Request(f"r{n}", prompt, target, 64, lambda _r, out, c=collect: c(out.text) or True,
                              seed=seed))
    for step in range(400):
        engine.step_now(float(step))
    return ["".join(t) for t in texts.values()], metrics


def counter(metrics: SimMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, {"engine": "0", "model_name": "sim", **labels}) or 0.0


def test_speculation_leaves_the_answers_alone_and_a_lossy_verifier_changes_them():
    plain, _ = answers(None)
    ngram = SpecConfig("ngram", 4, 4, 2)
    assert answers(ngram)[0] == plain
    assert answers(SpecConfig("draft_model", 4, draft_acceptance=0.6))[0] == plain
    lossy, _ = answers(SpecConfig("draft_model", 4, draft_acceptance=0.6), accept_wrong=0.3)
    assert sum(a != b for a, b in zip(lossy, plain, strict=True)) >= 5
    assert answers(SpecConfig("draft_model", 4, draft_acceptance=0.6), accept_wrong=0.3)[0] == lossy


def test_synthetic_acceptance_shows_vllms_per_position_shape_in_the_counters():
    rates = parse_spec_config({"method": "mtp", "num_speculative_tokens": 4,
                               "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.5})
    assert rates.synthetic_rates == (1.0, 1.0, 0.5, 0.0)
    _, metrics = answers(rates)
    drafts = counter(metrics, "vllm:spec_decode_num_drafts_total")
    per_pos = [counter(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
               / drafts for i in range(4)]
    assert drafts > 50
    assert per_pos[:2] == [1.0, 1.0] and per_pos[3] == 0.0 and 0.35 < per_pos[2] < 0.65
