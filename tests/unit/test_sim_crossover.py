"""The engine on the built-in prompt mix, in modelled GPU time: speculation wins alone and loses when busy."""

from __future__ import annotations

from locust_spec.core.prompts import PromptSampler, load_prompt_set
from locust_spec.sim import model as M
from locust_spec.sim import roofline as R
from locust_spec.sim.drafters import parse_spec_config
from locust_spec.sim.engine import Engine, EngineConfig, Request
from locust_spec.sim.metrics import SimMetrics

NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def run(users: int, spec: dict | None, steps: int = 300, warmup_steps: int = 200) -> tuple[float, float]:
    """Closed loop of `users` streams over the mixed prompt set, after a warm-up that has seen every prompt
    once (so the prefix cache holds them, as in a load test past its warm-up stage), measured after
    `warmup_steps` (so the streams no longer start in step): (tokens per modelled second, mean step s)."""
    cfg = parse_spec_config(spec) if spec else None
    engine = Engine(EngineConfig(R.GPUS["h100"], R.MODELS["8b"], cfg), M.tokenizer(),
                    SimMetrics("sim", cfg.num_speculative_tokens if cfg else 0))
    sampler = PromptSampler(["all"], seed=3)
    tok = M.tokenizer()
    for p in load_prompt_set("all"):
        engine.prefix_cache.admit(tok.encode(M.render_prompt(list(p.messages))))
    delivered: list[int] = []

    def deliver(_req: Request, out) -> bool:
        delivered.append(out.tokens)
        return True

    def submit() -> None:
        p = sampler.next()
        messages = list(p.messages)
        user = M.last_user_text(messages)
        prompt = tok.encode(M.render_prompt(messages))
        source = tok.encode(M.copy_source(user))
        target = M.Target(prompt, source, M.style_for(user), M.request_seed([user]), True)
        engine.submit(Request(p.id, prompt, target, p.max_tokens or 256, deliver))

    for _ in range(users):
        submit()
    clock = 0.0
    for i in range(warmup_steps + steps):
        if i == warmup_steps:
            clock = 0.0
            delivered.clear()
        clock += engine.step_now(0.0)
        for _ in range(sum(r.finished for r in engine.running)):
            submit()
    return sum(delivered) / clock, clock / steps


def test_ngram_speculation_lowers_step_count_per_token_at_one_stream():
    off, _ = run(1, None)
    on, _ = run(1, NGRAM)
    assert on > 1.2 * off


def test_ngram_speculation_loses_throughput_at_64_and_128_streams():
    for users in (64, 128):
        off, off_step = run(users, None)
        on, on_step = run(users, NGRAM)
        assert on < off, users
        assert on_step > off_step
