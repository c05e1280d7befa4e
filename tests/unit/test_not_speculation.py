"""Counters that cannot judge speculation: a diffusion LM (not applicable, never "speculation inactive")
and vLLM's synthetic acceptance (never ship on it, whatever the speed)."""

from __future__ import annotations

from pathlib import Path

from locust_spec.analysis import api

from tests.data.run_builder import CAPTURES, ArmSpec, write_run

EXPOSITION = Path(__file__).resolve().parent.parent / "data" / "exposition"
ONE_LEVEL = {"levels": (1,), "requests_per_user": {1: 30}}


def _verdict(tmp: Path, candidate: ArmSpec):
    base = write_run(tmp / "off" / "run", ArmSpec(speculative=False, **ONE_LEVEL))
    return api.verdict_for([base], [write_run(tmp / "on" / "run", candidate)])


def test_a_diffusion_model_is_not_applicable_and_not_speculation_inactive(tmp_path):
    texts = tuple((EXPOSITION / f"diffusion_{when}.txt").read_text() for when in ("before", "after"))
    verdict = _verdict(tmp_path, ArmSpec(speculative=False, metrics_texts=texts, **ONE_LEVEL))
    level = verdict.levels[0]
    assert level.verdict == "inconclusive"
    assert level.reasons[0].startswith("not applicable (diffusion decoding): ")
    assert "not applicable (diffusion decoding)" in verdict.summary
    assert [d.kind for d in level.diagnoses if d.kind == "speculation_inactive"] == []


def _synthetic(text: str, rates: tuple[int, ...]) -> str:
    """The real n-gram capture with the per-position counters (and their sum) of synthetic acceptance."""
    lines = []
    for line in text.splitlines():
        name, _, _ = line.partition("{")
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            position = int(line.split('position="')[1][0])
            line = f"{line.rsplit(' ', 1)[0]} {float(rates[position])}"
        elif name == "vllm:spec_decode_num_accepted_tokens_total":
            line = f"{line.rsplit(' ', 1)[0]} {float(sum(rates))}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_synthetic_acceptance_is_never_judged_ship(tmp_path):
    """The same fast candidate as the n-gram one that ships, but its counters have the synthetic shape:
    1244 drafts, positions accepted 1244, 1244, 622, 0 times (synthetic_acceptance_length 3.5)."""
    before = (CAPTURES / "metrics_ngram_before.txt").read_text()
    after = _synthetic((CAPTURES / "metrics_ngram_after.txt").read_text(), (1244, 1244, 622, 0))
    verdict = _verdict(tmp_path, ArmSpec(speculative=True, metrics_texts=(before, after), **ONE_LEVEL))
    level = verdict.levels[0]
    assert level.per_position == (1.0, 1.0, 0.5, 0.0)
    assert verdict.verdict == level.verdict == "inconclusive"
    assert verdict.what_ran[1].signs == ("synthetic acceptance",)  # what ran, inferred from the counters
    assert level.reasons[0].startswith("synthetic acceptance, never ship on it: acceptance per draft "
                                       "position 1.00, 1.00, 0.50, 0.00 over 1244 drafts")
    assert "synthetic_acceptance_length 3.50" in level.reasons[0]
    kinds = [d.kind for d in level.diagnoses]
    assert "synthetic_acceptance" in kinds and "proposal_length" not in kinds
    # the real capture's own shape ships
    real = write_run(tmp_path / "real" / "run", ArmSpec(speculative=True, seed=2, **ONE_LEVEL))
    assert api.verdict_for([tmp_path / "off" / "run"], [real]).levels[0].verdict == "ship"
