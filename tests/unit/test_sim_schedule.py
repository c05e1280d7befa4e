"""spec-sim speaks `num_speculative_tokens_per_batch_size`: the k of each step follows the batch."""

from __future__ import annotations

import pytest

from locust_spec.sim import model as M
from locust_spec.sim import roofline as R
from locust_spec.sim.drafters import parse_spec_config
from locust_spec.sim.engine import Engine, EngineConfig, Request, StepOutput
from locust_spec.sim.metrics import SimMetrics

COPY = "Repeat this text exactly, twice: " + " ".join(f"alpha{i} beta gamma delta" for i in range(40))


def run(config: dict, users: int, steps: int = 60) -> list[Request]:
    spec = parse_spec_config(config)
    engine = Engine(EngineConfig(R.GPUS["h100"], R.MODELS["8b"], spec), M.tokenizer(),
                    SimMetrics("sim", spec.num_speculative_tokens))
    requests = []

    def deliver(_req: Request, _out: StepOutput) -> bool:
        return True

    for i in range(users):
        text = f"{i}: {COPY}"
        prompt = M.tokenizer().encode(M.render_prompt([{"role": "user", "content": text}]))
        target = M.Target(prompt, [], M.style_for(text), M.request_seed([text]), True)
        req = Request(f"r{i}", prompt, target, 200, deliver)
        engine.submit(req)
        requests.append(req)
    clock = 0.0
    for _ in range(steps):
        clock += engine.step_now(clock) or 0.01
    return requests


SCHEDULE = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
            "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 256, 0]]}


def test_one_request_drafts_up_to_its_k_and_four_do_not_draft():
    alone = run(SCHEDULE, 1)[0]
    assert alone.spec.drafted and max(alone.spec.drafted) == 4
    assert all(0 < d <= 4 for d in alone.spec.drafted)
    crowd = run(SCHEDULE, 4)
    assert all(r.spec.drafted == [] for r in crowd)
    assert all(r.generated > 10 for r in crowd)  # they decode, one token per step


def test_a_clamped_schedule_never_drafts_beyond_num_speculative_tokens():
    config = {**SCHEDULE, "num_speculative_tokens": 2,
              "num_speculative_tokens_per_batch_size": [[1, 256, 5]]}
    alone = run(config, 1)[0]
    assert alone.spec.drafted and max(alone.spec.drafted) == 2


def test_the_k_of_a_step_comes_from_the_previous_steps_batch():
    # Batch 1 -> k 0, batch 2+ -> k 3: with two requests every decode step drafts (the previous step held
    # both), whatever the request's own position.
    config = {**SCHEDULE, "num_speculative_tokens": 3,
              "num_speculative_tokens_per_batch_size": [[1, 1, 0], [2, 64, 3]]}
    pair = run(config, 2)
    assert all(r.spec.drafted and max(r.spec.drafted) == 3 for r in pair)


def test_an_invalid_schedule_is_refused_with_vllms_message():
    with pytest.raises(ValueError, match="The first batch-size range must start at 1"):
        parse_spec_config({**SCHEDULE, "num_speculative_tokens_per_batch_size": [[2, 8, 1]]})
