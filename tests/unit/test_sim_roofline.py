"""Roofline step time: memory-bound decode at small batch, compute-bound verification at large batch."""

import pytest

from locust_spec.sim import roofline as R

H100, M8B = R.GPUS["h100"], R.MODELS["8b"]


def decode(batch: int, ctx: int = 600, positions: int = 1) -> R.StepLoad:
    return R.StepLoad(batch, batch * positions, batch * ctx, batch * positions * ctx)


def test_single_stream_decode_of_8b_on_h100_is_memory_bound_near_5ms():
    t = R.forward_seconds(H100, M8B, decode(1))
    assert t == pytest.approx(M8B.weight_bytes / H100.mem_bw, rel=0.02)
    assert 4.5e-3 < t < 5.2e-3


def test_verifying_six_positions_is_nearly_free_at_batch_1_but_not_at_batch_128():
    assert R.forward_seconds(H100, M8B, decode(1, positions=6)) == pytest.approx(
        R.forward_seconds(H100, M8B, decode(1)), rel=0.01)
    off = R.forward_seconds(H100, M8B, decode(128))
    assert R.forward_seconds(H100, M8B, decode(128, positions=6)) > 2 * off


def test_speculation_adds_overhead_and_draft_model_adds_its_passes():
    load = decode(8)
    off = R.step_seconds(H100, M8B, load)
    ngram = R.step_seconds(H100, M8B, load, "ngram")
    draft = R.step_seconds(H100, M8B, load, "draft_model", R.MODELS["1b"], 4)
    assert off < ngram < draft


def test_an_empty_step_costs_only_overhead():
    assert R.forward_seconds(H100, M8B, R.StepLoad(0, 0, 0, 0)) == 0.0


def test_model_sizes_by_preset_or_billions():
    assert R.model_for("70B") is R.MODELS["70b"]
    custom = R.model_for("13")
    assert custom.params == 13e9 and custom.n_layers > M8B.n_layers


def test_kv_capacity_leaves_room_for_weights():
    assert R.GPUS["h100"].kv_capacity_tokens(M8B) > 400_000
    assert R.GPUS["l4"].kv_capacity_tokens(R.MODELS["70b"]) == 0
