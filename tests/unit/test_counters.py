"""Counters: real vLLM /metrics captures -> samples -> windows (acceptance, increases across restarts)."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_spec.metrics.counters import (
    Sample,
    Snapshot,
    parse_exposition,
    parse_exposition_checked,
    snapshots_from_rows,
    spec_window,
)
from locust_spec.metrics.exposition import CSV_COLUMNS, decode_labels, encode_labels, rows_from_snapshot
from tests.support import REFERENCE

CPU = REFERENCE / "vllm-0.32-cpu"
PUBLIC = REFERENCE / "vllm-public"
ENGINE0 = (("engine", "0"), ("model_name", "tiny-llama"))


def capture(name: str) -> str:
    return (CPU / name).read_text()


def snap(t: float, text: str, url: str = "http://a/metrics") -> Snapshot:
    return Snapshot(t, url, tuple(parse_exposition(text)))


def value(samples, metric, labels=ENGINE0):
    return next(s.value for s in samples if s.metric == metric and s.labels == labels)


def test_parse_keeps_exposed_names_and_sorted_labels():
    samples = parse_exposition(capture("metrics_ngram_after.txt"))
    assert value(samples, "vllm:spec_decode_num_drafts_total") == 1244
    assert value(samples, "vllm:spec_decode_num_drafts_created") == pytest.approx(1.795954111464051e09)
    pos3 = ENGINE0 + (("position", "3"),)
    assert value(samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total", pos3) == 395
    assert all(s.labels == tuple(sorted(s.labels)) for s in samples)


def test_ngram_capture_window_gives_the_servers_logged_acceptance():
    w = spec_window([snap(100, capture("metrics_ngram_before.txt")),
                     snap(200, capture("metrics_ngram_after.txt"))], 0, 1000)
    assert w.server_kind == "vllm-v1"
    assert (w.drafts, w.draft_tokens, w.accepted) == (1244, 4128, 2619)
    assert w.acceptance_rate == pytest.approx(2619 / 4128)
    assert round(w.acceptance_rate, 3) == 0.634
    assert w.mean_acceptance_length == pytest.approx(1 + 2619 / 1244)
    assert w.per_position == pytest.approx((988 / 1244, 708 / 1244, 528 / 1244, 395 / 1244))
    assert [round(p, 3) for p in w.per_position] == [0.794, 0.569, 0.424, 0.318]
    assert (w.generation_tokens, w.requests_success, w.requests_aborted) == (4608, 24, 0)
    assert w.mean_ttft_ms == pytest.approx(1.0091843605041504 / 24 * 1000)
    assert w.mean_tpot_ms == pytest.approx(0.023946353206753996 / 24 * 1000)
    assert w.mean_itl_ms == pytest.approx(4.324185142999909 / 2006 * 1000)
    assert w.mean_e2e_ms == pytest.approx(5.331922292709351 / 24 * 1000)
    assert w.resets == 0 and w.scrapes == 2 and w.notes == ()
    assert "vllm:spec_decode_num_accepted_tokens_per_pos" in w.families_seen


def test_spec_off_capture_has_no_spec_families_and_says_so_without_calling_it_a_problem():
    w = spec_window([snap(1, capture("metrics_spec_off_before.txt")),
                     snap(2, capture("metrics_spec_off_after.txt"))], 0, 10)
    assert w.server_kind == "unknown"
    assert w.acceptance_rate is None and w.mean_acceptance_length is None and w.per_position == ()
    assert not any("spec_decode" in f for f in w.families_seen)
    assert w.generation_tokens == 4608 and w.requests_success == 24
    assert w.notes == ()
    assert w.absence_note.startswith("no speculative-decoding acceptance counters found")
    assert "vllm (" in w.absence_note


def test_window_uses_only_snapshots_inside_it():
    before, after = capture("metrics_ngram_before.txt"), capture("metrics_ngram_after.txt")
    snaps = [snap(100, before), snap(200, after)]
    assert spec_window(snaps, 150, 300).scrapes == 1
    assert spec_window(snaps, 150, 300).accepted == 0
    assert spec_window(snaps, 100, 200).accepted == 2619
    assert spec_window(list(reversed(snaps)), 100, 200).accepted == 2619


def _restarted_text(text: str, scale, created_shift: float) -> str:
    """The capture with its spec counters mapped by `scale`, their _created moved (a restart, if moved)."""
    out = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if line.startswith("#") or not name.startswith("vllm:spec_decode"):
            out.append(line)
            continue
        head, val = line.rsplit(" ", 1)
        v = float(val) + created_shift if name.endswith("_created") else scale(float(val))
        out.append(f"{head} {v!r}")
    return "\n".join(out) + "\n"


def test_restart_mid_run_gives_an_unbroken_runs_acceptance_and_counts_one_reset():
    before, after = capture("metrics_ngram_before.txt"), capture("metrics_ngram_after.txt")
    # The same traffic in two parts: the first part, then a restart and the rest counted from zero.
    first = _restarted_text(after, lambda v: v // 2, 0.0)
    rest_after_restart = _restarted_text(after, lambda v: v - v // 2, 3600.0)
    broken = [snap(1, before), snap(2, first), snap(3, rest_after_restart)]
    unbroken = [snap(1, before), snap(3, after)]
    wb, wu = spec_window(broken, 0, 10), spec_window(unbroken, 0, 10)
    assert wb.resets == 1 and wu.resets == 0
    assert (wb.drafts, wb.draft_tokens, wb.accepted) == (wu.drafts, wu.draft_tokens, wu.accepted)
    assert wb.acceptance_rate == pytest.approx(wu.acceptance_rate) == pytest.approx(2619 / 4128)
    assert wb.per_position == pytest.approx(wu.per_position)
    assert any("reset 1 time" in n for n in wb.notes)


def test_restart_seen_only_in_created_when_counters_did_not_fall():
    before, after = capture("metrics_ngram_before.txt"), capture("metrics_ngram_after.txt")
    # After the restart the server got past its old totals before the next scrape.
    snaps = [snap(1, before), snap(2, _restarted_text(after, lambda v: v // 2, 0)),
             snap(3, _restarted_text(after, lambda v: v, 60))]
    w = spec_window(snaps, 0, 10)
    assert w.resets == 1
    assert w.accepted == 2619 // 2 + 2619


def test_engines_and_replicas_are_summed():
    after = capture("metrics_ngram_after.txt")
    before = capture("metrics_ngram_before.txt")
    engine1 = after.replace('engine="0"', 'engine="1"')
    two_engines = after + "\n".join(
        line for line in engine1.splitlines() if line.startswith("vllm:spec_decode")
    ) + "\n"
    two_engines_before = before + "\n".join(
        line for line in before.replace('engine="0"', 'engine="1"').splitlines()
        if line.startswith("vllm:spec_decode")
    ) + "\n"
    snaps = [snap(1, two_engines_before, "http://a/metrics"), snap(2, two_engines, "http://a/metrics"),
             snap(1.1, before, "http://b/metrics"), snap(2.1, after, "http://b/metrics")]
    w = spec_window(snaps, 0, 10)
    assert (w.drafts, w.accepted) == (3 * 1244, 3 * 2619)
    assert w.acceptance_rate == pytest.approx(2619 / 4128)


def test_public_excerpt_cut_off_mid_line_parses_what_is_there():
    text = (PUBLIC / "01_vllm_pr41916_qwen3.6-35b-a3b-fp8_spec_counters.prom").read_text()
    cut = text + 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qw'
    parsed = parse_exposition_checked(cut)
    assert parsed.bad_lines == 1
    names = {s.metric for s in parsed.samples}
    assert "vllm:spec_decode_num_drafts_total" in names
    assert "vllm:spec_decode_num_accepted_tokens_total" not in names
    w = spec_window([snap(1, cut), snap(2, cut)], 0, 10)
    assert w.server_kind == "vllm-v1"
    assert w.drafts == 0 and w.accepted is None and w.acceptance_rate is None


def test_public_docs_example_skips_shell_and_ellipsis_lines():
    text = (PUBLIC / "04_vllm_docs_design_metrics_example_v1_nospec.prom").read_text()
    parsed = parse_exposition_checked(text)
    assert parsed.bad_lines == 4  # "$ curl ..." and three "..."
    model = (("model_name", "meta-llama/Llama-3.1-8B-Instruct"),)
    assert value(parsed.samples, "vllm:generation_tokens_total", model) == 27453


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=len(capture("metrics_ngram_after.txt"))))
def test_any_cut_of_a_real_capture_parses_without_raising(cut):
    full = parse_exposition(capture("metrics_ngram_after.txt"))
    parsed = parse_exposition_checked(capture("metrics_ngram_after.txt")[:cut])
    assert parsed.bad_lines <= 1
    assert len(parsed.samples) <= len(full)


def test_garbage_gives_no_samples_and_counts_bad_lines():
    parsed = parse_exposition_checked("<html>\n<body>502 Bad Gateway</body>\n</html>\n")
    assert parsed.samples == [] and parsed.bad_lines == 3


def test_other_servers_are_recognised_by_exact_name():
    v0 = "vllm:spec_decode_draft_acceptance_rate{model_name=\"m\"} 0.6\nvllm:spec_decode_efficiency 0.5\n"
    w = spec_window([snap(1, v0), snap(2, v0.replace("0.6", "0.8"))], 0, 10)
    assert w.server_kind == "vllm-v0" and w.acceptance_rate == pytest.approx(0.7)
    assert any("inflated" in n for n in w.notes)
    sg = "sglang:spec_accept_rate 0.5\nsglang:spec_accept_length 2.5\n"
    w = spec_window([snap(1, sg), snap(2, sg)], 0, 10)
    assert (w.server_kind, w.acceptance_rate, w.mean_acceptance_length) == ("sglang", 0.5, 2.5)
    lc = capture("metrics_ngram_after.txt").replace("vllm:spec_decode", "llamacpp:spec_decode")
    lc0 = capture("metrics_ngram_before.txt").replace("vllm:spec_decode", "llamacpp:spec_decode")
    w = spec_window([snap(1, lc0), snap(2, lc)], 0, 10)
    assert w.server_kind == "llamacpp" and w.acceptance_rate == pytest.approx(2619 / 4128)
    # A name that merely contains the words is not a spec counter.
    near = "myvllm:spec_decode_num_drafts_total 5\nvllm:spec_decode_num_drafts_total_extra 9\n"
    assert spec_window([snap(1, near), snap(2, near)], 0, 10).server_kind == "unknown"


def test_csv_rows_round_trip_to_snapshots():
    a = snap(1.5, capture("metrics_ngram_before.txt"))
    b = snap(2.5, capture("metrics_ngram_after.txt"))
    weird = Snapshot(3.0, "http://b/metrics", (Sample("x_total", (("k", "a;b=c%d"), ("j", "")), 1.0),))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for s in (a, b, weird):
        w.writerows(rows_from_snapshot(s))
    back = snapshots_from_rows(csv.DictReader(io.StringIO(buf.getvalue())), keep_buckets=True)
    assert back[0] == a and back[1] == b
    assert back[2].samples[0].labels == (("j", ""), ("k", "a;b=c%d"))
    lean = snapshots_from_rows(csv.DictReader(io.StringIO(buf.getvalue())))
    assert not any(s.metric.endswith("_bucket") for s in lean[0].samples)
    assert spec_window(lean, 0, 10).accepted == 2619


def test_malformed_csv_row_names_its_row():
    rows = [{"timestamp_unix_s": "1", "url": "u", "metric": "m", "labels": "", "value": "1"},
            {"timestamp_unix_s": "1", "url": "u", "metric": "m", "labels": "", "value": "abc"}]
    with pytest.raises(ValueError, match="row 3"):
        snapshots_from_rows(rows)


def test_label_encoding_is_sorted_k_equals_v():
    assert encode_labels((("b", "2"), ("a", "1"))) == "a=1;b=2"
    assert decode_labels("a=1;b=2") == (("a", "1"), ("b", "2"))


# increase() across arbitrary resets: the increments a counter really made between the first and the last
# scrape, however many restarts fell between scrapes, as long as each restart is visible.
STEPS = st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=1, max_size=30)


def _series(steps, with_created: bool):
    value_now, created, total, restarts = 7.0, 1000.0, 0.0, 0
    points = [(value_now, created)]
    for inc, restart in steps:
        if restart:
            restarts += 1
            created += 1.0
            value_now = 0.0
        value_now += inc
        total += inc
        points.append((value_now, created))
    snaps = []
    for i, (v, c) in enumerate(points):
        ss = [Sample("vllm:spec_decode_num_drafts_total", ENGINE0, v)]
        if with_created:
            ss.append(Sample("vllm:spec_decode_num_drafts_created", ENGINE0, c))
        snaps.append(Snapshot(float(i), "u", tuple(ss)))
    return snaps, total, restarts


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_increase_with_created_counts_every_restart_and_every_increment(steps):
    snaps, total, restarts = _series(steps, with_created=True)
    w = spec_window(snaps, 0, len(snaps))
    assert (w.drafts, w.resets) == (total, restarts)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_increase_without_created_is_exact_when_restarts_fall_and_never_over_counts(steps):
    snaps, total, restarts = _series(steps, with_created=False)
    w = spec_window(snaps, 0, len(snaps))
    values = [s.samples[0].value for s in snaps]
    all_visible = all(
        (b < a) == r for (a, b), (_, r) in zip(zip(values, values[1:], strict=False), steps, strict=True)
    )
    assert w.drafts <= total
    if all_visible:
        assert (w.drafts, w.resets) == (total, restarts)


# -- hostile counters (#27 items 7, 8, 13): judged per series, the model under test only, anomalies named --

ACC, DRAFT = "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"


def scrape(t: float, model: str = "m", created: float | None = 100.0, extra=(), **values: float) -> Snapshot:
    """One scrape of `model`'s three spec counters (values by short name), with `_created` unless None."""
    names = {"acc": ACC, "draft": DRAFT, "drafts": DRAFTS}
    labels = (("engine", "0"), ("model_name", model))
    samples = [Sample(names[k], labels, float(v)) for k, v in values.items()]
    if created is not None:
        samples += [Sample(n.replace("_total", "_created"), labels, created) for n in names.values()]
    return Snapshot(t, "u", (*samples, *extra))


# lifetime totals before the run at acceptance 0.9; the run's traffic at 0.25
RUN = [dict(acc=9000 + 25 * i, draft=10000 + 100 * i, drafts=5000 + 25 * i) for i in range(5)]


def test_a_counter_that_falls_by_one_is_an_anomaly_not_a_restart_of_every_counter():
    for created in (100.0, None):
        snaps = [scrape(i, created=created, **v) for i, v in enumerate(RUN)]
        snaps[2] = scrape(2, created=created, **{**RUN[2], "acc": RUN[1]["acc"] - 1})
        w = spec_window(snaps, 0, 10)
        assert w.acceptance_rate == pytest.approx(0.25) and w.resets == 0  # before: 0.65 (lifetime added)
        assert [(a.kind, a.count) for a in w.anomalies] == [("counter_decrease", 1)]
        assert any("(counter_decrease) at u: vllm:spec_decode_num_accepted_tokens_total{" in n
                   and "fell without a restart (9025.0 to 9024.0) in 1 scrape(s)" in n for n in w.notes)


def test_a_restart_is_per_series_by_created_and_without_created_when_the_process_restarted():
    # engine 1 restarts (its _created moves), engine 0 goes on: only engine 1 counts from zero
    def two(t, e1_created, e1_acc):
        e1 = (("engine", "1"), ("model_name", "m"))
        return scrape(t, acc=100 + 10 * t, draft=400 + 40 * t, extra=(
            Sample(ACC, e1, e1_acc), Sample(ACC.replace("_total", "_created"), e1, e1_created)))
    w = spec_window([two(0, 5.0, 500), two(1, 5.0, 510), two(2, 9.0, 7)], 0, 10)
    assert w.accepted == 20 + 10 + 7 and w.resets == 1
    # without _created: process_start_time_seconds moved, so every counter starts again
    start = Sample("process_start_time_seconds", (), 1.0)
    moved = Sample("process_start_time_seconds", (), 2.0)
    w = spec_window([scrape(0, created=None, extra=(start,), acc=900, draft=1000, drafts=300),
                     scrape(1, created=None, extra=(moved,), acc=5, draft=1000, drafts=301)], 0, 10)
    assert (w.accepted, w.draft_tokens, w.resets) == (5, 1000, 1)
    # without either, most counters falling together is a restart
    w = spec_window([scrape(0, created=None, acc=900, draft=1000, drafts=300),
                     scrape(1, created=None, acc=5, draft=20, drafts=301)], 0, 10)
    assert (w.accepted, w.draft_tokens, w.resets) == (5, 20, 1) and w.anomalies == ()


def test_only_the_model_under_test_is_counted_and_the_others_are_named():
    snaps = [Snapshot(i, "u", scrape(i, **v).samples
                      + scrape(i, model="other", acc=10 * i, draft=1000 * i, drafts=100 * i).samples)
             for i, v in enumerate(RUN)]
    w = spec_window(snaps, 0, 10, models=["m"])
    assert w.acceptance_rate == pytest.approx(0.25)  # before: summed in, 0.06
    assert (w.models, w.other_models) == (("m",), ("other",))
    assert "series of other models on the same /metrics left out: other" in w.notes
    unknown = spec_window(snaps, 0, 10)
    assert unknown.acceptance_rate is None and unknown.models == ()
    assert any("series of 2 models (m, other) and the model under test is not known" in n
               for n in unknown.notes)
    # one model exposed under another name (an alias of --served-model-name): counted, and said
    alone = spec_window([scrape(i, **v) for i, v in enumerate(RUN)], 0, 10, models=["alias"])
    assert alone.acceptance_rate == pytest.approx(0.25) and alone.models == ("m",)
    assert any("names no series" in n for n in alone.notes)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_value_that_is_not_a_finite_number_leaves_its_scrape_out(bad):
    snaps = [scrape(i, **v) for i, v in enumerate(RUN)]
    snaps[2] = scrape(2, **{**RUN[2], "acc": bad})
    w = spec_window(snaps, 0, 10)
    assert w.acceptance_rate == pytest.approx(0.25)  # before: nan, or 0.0 for +Inf
    assert [(a.kind, a.url, a.count) for a in w.anomalies] == [("not_finite", "u", 1)]


def test_a_series_exposed_twice_in_one_scrape_leaves_its_scrape_out():
    snaps = [scrape(i, **v) for i, v in enumerate(RUN)]
    stale = Sample(ACC, (("engine", "0"), ("model_name", "m")), 1.0)
    snaps[3] = Snapshot(3, "u", snaps[3].samples + (stale,))
    w = spec_window(snaps, 0, 10)
    assert w.acceptance_rate == pytest.approx(0.25) and w.resets == 0  # before: a false restart
    assert [a.kind for a in w.anomalies] == ["duplicate_series"]


PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def configured(t: float, created: float, drafts: int, per_position: list[int]) -> Snapshot:
    """A scrape of a server drafting len(per_position) tokens (vLLM's one series per position)."""
    k, accepted = len(per_position), sum(per_position)
    pos = [Sample(PER_POS, (("engine", "0"), ("model_name", "m"), ("position", str(i))), float(n))
           for i, n in enumerate(per_position)]
    pos += [Sample(PER_POS.replace("_total", "_created"), s.labels, created) for s in pos]
    return Snapshot(t, "u", scrape(t, created=created, acc=accepted, draft=k * drafts, drafts=drafts,
                                   extra=pos).samples)


def test_a_server_back_with_another_speculative_config_is_named_and_its_windows_not_mixed():
    """k=4 for the level's first part, then the server restarted with k=1: the window counts the k=1 part
    alone. Before: one more "counters reset (server restarted?)", and per position 170/250, 60/250, 40/250,
    20/250 (four positions over the drafts of both configs)."""
    snaps = [configured(0, 100.0, 1000, [800, 600, 400, 200]),
             configured(1, 100.0, 1100, [880, 660, 440, 220]),
             configured(2, 200.0, 50, [30]), configured(3, 200.0, 150, [90])]
    w = spec_window(snaps, 0, 10)
    assert w.per_position == pytest.approx((0.6,))
    assert (w.drafts, w.accepted, w.acceptance_rate) == (150, 90, pytest.approx(0.6))
    assert w.mean_acceptance_length == pytest.approx(1.6)
    assert any(n.startswith("speculative config changed in the window at u: 4 draft positions, then 1 (")
               for n in w.notes), w.notes
    # the same restart at the same k is one window of both parts, and no config change
    same = [*snaps[:2], configured(2, 200.0, 50, [30, 20, 10, 5]),
            configured(3, 200.0, 150, [90, 60, 30, 15])]
    w = spec_window(same, 0, 10)
    assert w.drafts == 250 and w.per_position == pytest.approx((170 / 250, 120 / 250, 70 / 250, 35 / 250))
    assert not any("speculative config changed" in n for n in w.notes)
