"""What a server's /metrics says, read the same from both formats vLLM serves: Prometheus text (the Python
frontend) and OpenMetrics 1.0 (the Rust frontend, `VLLM_USE_RUST_FRONTEND=1`), two engines each
(tests/data/exposition); a diffusion model; synthetic acceptance."""

from __future__ import annotations

from pathlib import Path

import pytest

from locust_spec.metrics.counters import Snapshot, parse_exposition_checked, spec_window
from locust_spec.metrics.exposition import is_openmetrics, without_exemplar
from locust_spec.metrics.synthetic import synthetic_length

DATA = Path(__file__).resolve().parent.parent / "data" / "exposition"


def window(name: str):
    snaps = [Snapshot(t, "http://a/metrics", tuple(parse_exposition_checked((DATA / f"{name}_{when}.txt")
                                                                            .read_text()).samples))
             for t, when in ((1.0, "before"), (2.0, "after"))]
    return spec_window(snaps, 0.0, 3.0)


def test_openmetrics_and_prometheus_text_of_the_same_counters_give_the_same_acceptance():
    prom, om = window("prometheus_two_engines"), window("openmetrics_two_engines")
    # engine 0 is the real vLLM 0.32 capture's load (2619/4128), engine 1 adds its own; both engines count
    assert (om.drafts, om.draft_tokens, om.accepted) == (prom.drafts, prom.draft_tokens, prom.accepted) \
        == (1244 + 1000, 4128 + 3300, 2619 + 2200)
    assert om.acceptance_rate == prom.acceptance_rate == pytest.approx(4819 / 7428)
    assert om.per_position == prom.per_position == pytest.approx(
        ((988 + 810) / 2244, (708 + 590) / 2244, (528 + 450) / 2244, (395 + 350) / 2244))
    assert om.generation_tokens == prom.generation_tokens == 4608 + 4400
    assert om.requests_success == prom.requests_success == 48
    assert om.server_kind == prom.server_kind == "vllm-v1" and om.resets == prom.resets == 0


def test_an_exemplar_is_not_read_as_a_label_or_a_value():
    text = (DATA / "openmetrics_two_engines_after.txt").read_text()
    parsed = parse_exposition_checked(text)
    drafts = {s.labels: s.value for s in parsed.samples if s.metric == "vllm:spec_decode_num_drafts_total"}
    assert drafts == {(("engine", "0"), ("model_name", "tiny-llama")): 1244.0,
                      (("engine", "1"), ("model_name", "tiny-llama")): 1120.0}
    assert parsed.bad_lines == 0
    # cut off before `# EOF`, the same text is read line by line, exemplars still left out
    cut = text[: text.index("vllm:num_requests_running")]
    assert not is_openmetrics(cut)
    assert {s.labels: s.value for s in parse_exposition_checked(cut).samples
            if s.metric == "vllm:spec_decode_num_drafts_total"} == drafts


def test_format_detection_and_exemplar_removal():
    assert is_openmetrics("a_total 1\n# EOF\n") and not is_openmetrics("a_total 1\n")
    assert without_exemplar('x_total{a="b # c"} 5 # {id="x"} 1 1.7e9') == 'x_total{a="b # c"} 5'
    assert without_exemplar('x{a="\\"#"} 2') == 'x{a="\\"#"} 2'


def test_a_diffusion_server_is_recognised_and_not_taken_for_one_without_speculation():
    w = window("diffusion")
    assert w.server_kind == "diffusion"
    assert w.acceptance_rate is None and w.drafts is None
    assert w.absence_note is None  # not "no speculative-decoding acceptance counters found"
    assert w.generation_tokens == 6144


@pytest.mark.parametrize(("per_position", "drafts", "length"), [
    ((1.0, 1.0, 0.5, 0.0), 1000, 3.5),     # vLLM's own resolution of 3.5 over 4 positions
    ((1.0, 1.0, 1.0, 0.5), 1000, 4.5),     # 4.5 over 4: the fraction at the last position, no 0.0 after
    ((1.0, 0.25), 400, 2.25),
    ((1.0, 1.0, 1.0, 0.0), 1000, 4.0),
    ((1.0, 0.6, 0.0), 1000, 2.6),
    ((1.0, 0.0, 0.0), 500, 2.0),
    ((0.37, 0.0, 0.0, 0.0), 500, 1.37),
    ((0.794, 0.569, 0.424, 0.318), 1244, None),  # the real n-gram capture
    ((1.0, 1.0, 1.0, 1.0), 1000, None),    # a draft that is a copy of the target
    ((0.0, 0.0, 0.0), 1000, None),         # a draft that never agrees
    ((1.0, 0.6, 0.0), 20, None),           # too few drafts to tell
    ((1.0, 0.6, 0.01), 1000, None),
    ((1.0, 0.6, 0.5), 1000, None),         # two fractions: not the schedule
    ((0.9, 0.5), 1000, None),
    ((0.9,), 1000, None),
])
def test_synthetic_acceptance_is_recognised_by_its_shape_only(per_position, drafts, length):
    found = synthetic_length(per_position, drafts)
    assert found == (pytest.approx(length) if length is not None else None)
