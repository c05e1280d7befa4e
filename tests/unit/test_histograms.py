"""HDR histograms: fast recording equals the library's, percentiles, merging, the latency.json document."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from locust_spec.client.timing import RequestTiming
from locust_spec.recording.histograms import (
    ALL_LEVELS,
    PENDING_VALUES,
    LatencyHistograms,
    new_histogram,
    percentiles_us,
    record_many,
    record_ms,
)

values_ms = st.lists(st.floats(min_value=0.0, max_value=3_000_000.0, allow_nan=False),
                     min_size=1, max_size=300)


@settings(max_examples=40, deadline=None)
@given(values_ms)
def test_fast_record_matches_the_library_record_value(values):
    fast, reference = new_histogram(), new_histogram()
    record_ms(fast, values)
    for v in values:
        reference.record_value(max(int(v * 1000 + 0.5), 1))
    assert list(fast.counts) == list(reference.counts)
    assert (fast.total_count, fast.get_min_value(), fast.get_max_value()) == (
        reference.total_count, reference.get_min_value(), reference.get_max_value())


@settings(max_examples=40, deadline=None)
@given(values_ms)
def test_percentiles_from_one_cumulative_sum_match_the_library(values):
    hist = new_histogram()
    record_ms(hist, values)
    pcts = (0.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0)
    assert percentiles_us(hist, pcts) == [hist.get_value_at_percentile(p) for p in pcts]


def timing(ttft: float, itl: tuple[float, ...]) -> RequestTiming:
    return RequestTiming(ttft_ms=ttft, tpot_ms=sum(itl) / len(itl), e2e_ms=ttft + sum(itl),
                         output_tokens=len(itl) + 1, prompt_tokens=10, tokens_estimated=False,
                         chunks=len(itl) + 1, max_tokens_per_chunk=1, finish_reason="length", itl_ms=itl,
                         chunk_gaps_ms=itl, itl_p50_ms=None, itl_p99_ms=None, chunk_gap_p50_ms=None,
                         spec_accepted_tokens=None, spec_draft_tokens=None, done=True, error=None)


def test_latency_json_has_per_class_all_and_levels_without_warmup():
    hists = LatencyHistograms()
    hists.record_timing(timing(20.0, (5.0, 5.0)), "code", 8, warmup=True)
    hists.record_timing(timing(30.0, (7.0,)), "code", 8, warmup=False)
    hists.record_timing(timing(40.0, (9.0,)), "chat", 8, warmup=False)
    doc = hists.to_dict()
    assert doc["schema"] == 1 and doc["unit"] == "ms"
    ttft = doc["metrics"]["ttft"]
    assert (ttft["all"]["count"], ttft["code"]["count"], ttft["chat"]["count"]) == (3, 2, 1)
    assert abs(ttft["code"]["max"] - 30.0) < 0.05
    assert doc["metrics"]["itl"]["all"]["count"] == 4
    level = doc["levels"]["8"]
    assert level["ttft"]["all"]["count"] == 2 and level["itl"]["code"]["count"] == 1
    assert set(ttft["all"]) == {"count", "p50", "p90", "p95", "p99", "max", "hdr"}
    assert abs(ttft["all"]["p50"] - 30.0) < 0.05


def test_encoded_histograms_merge_into_the_same_numbers():
    worker_a, worker_b, master = LatencyHistograms(), LatencyHistograms(), LatencyHistograms()
    worker_a.record("ttft", "code", 4, [10.0, 20.0], warmup=False)
    worker_b.record("ttft", "code", 4, [30.0], warmup=False)
    master.merge_encoded(worker_a.encode())
    master.merge_encoded(worker_b.encode())
    local = LatencyHistograms()
    local.record("ttft", "code", 4, [10.0, 20.0, 30.0], warmup=False)
    assert master.to_dict()["levels"] == local.to_dict()["levels"]
    assert master.to_dict()["metrics"]["ttft"]["all"]["count"] == 3


def test_write_is_atomic_json(tmp_path):
    hists = LatencyHistograms()
    hists.record("e2e", "chat", 1, [100.0], warmup=False)
    path = tmp_path / "x_latency.json"
    hists.write(path)
    assert path.read_text().startswith("{") and not list(tmp_path.glob("*.tmp"))


@settings(max_examples=30, deadline=None)
@given(values_ms)
def test_recording_into_several_histograms_at_once_equals_recording_into_each(values):
    pair, one, other = (new_histogram(), new_histogram()), new_histogram(), new_histogram()
    record_many(pair, values)
    record_ms(one, values)
    record_ms(other, values)
    for got, want in zip(pair, (one, other), strict=True):
        assert list(got.counts) == list(want.counts)
        assert (got.total_count, got.min_value, got.max_value) == (want.total_count, want.min_value,
                                                                   want.max_value)


def test_draining_ships_each_value_once_and_reuses_the_buffers():
    hists = LatencyHistograms()
    hists.record("ttft", "code", 4, [10.0, 20.0], warmup=False)
    hists.get("ttft", "code", 4)  # reading counts what was pending: the histograms exist from here
    buffers = {key: id(h.counts) for key, h in hists._hists.items()}
    drained = hists.drain_items()
    first_key, first_blob = next(drained)
    hists.record("ttft", "code", 4, [30.0], warmup=False)  # recorded while the caller yields
    rest = dict(drained)
    later = dict(hists.drain_items())
    assert list(dict(hists.drain_items())) == []  # nothing left, nothing empty is shipped
    assert {key: id(h.counts) for key, h in hists._hists.items()} == buffers
    shipped = LatencyHistograms()
    for batch in ({first_key: first_blob}, rest, later):
        shipped.merge_encoded(batch)
    assert [shipped.get("ttft", "code", lv).total_count for lv in (ALL_LEVELS, 4)] == [3, 3]


def test_values_wait_to_be_counted_in_batches_but_every_reader_sees_them():
    hists = LatencyHistograms()
    hists.record_together(("itl", "chunk_gap"), "code", 4, [10.0, 20.0, 30.0], warmup=False)
    assert hists.to_dict()["metrics"]["itl"]["all"]["count"] == 3
    hists.record("itl", "code", 4, [40.0], warmup=True)  # warm-up: the all-levels histogram only
    assert (hists.get("itl", "code").total_count, hists.get("itl", "code", 4).total_count) == (4, 3)
    hists.record("ttft", "chat", 4, [5.0], warmup=False)
    assert hists.classes() == ["chat", "code"]
    hists.record("ttft", "chat", 4, [6.0], warmup=False)
    assert dict(hists.encode_items()).keys() >= {"ttft|chat|4", "ttft|chat|-1"}
    hists.record("ttft", "chat", 4, [7.0], warmup=False)
    merged = LatencyHistograms()
    merged.merge(hists)
    assert merged.get("ttft", "chat", 4).total_count == 3


def test_what_waits_to_be_counted_stays_bounded_on_a_long_run():
    hists = LatencyHistograms()
    for _ in range(3 * PENDING_VALUES // 128):
        hists.record_together(("itl", "chunk_gap"), "code", 4, [10.0] * 128, warmup=False)
        assert hists._pending_values < PENDING_VALUES
    assert hists.get("itl", "code", 4).total_count == 3 * PENDING_VALUES // 128 * 128
