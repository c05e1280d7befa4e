"""Reports: every string from the inputs is escaped, the tables carry both arms, JSON keeps the schema."""

from __future__ import annotations

import base64
import json
import re

import pytest
from locust_spec.analysis.api import format_for, render, verdict_for, write_outputs
from locust_spec.analysis.report.plots import FIGURES
from locust_spec.analysis.runs import InputError

from tests.data.run_builder import ArmSpec, write_run

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def evil_verdict(tmp_path_factory):
    root = tmp_path_factory.mktemp("evil")
    # enough requests for several 5 s blocks per arm: the intervals' units
    shape = {"levels": (1,), "requests_per_user": {1: 60}, "classes": (EVIL, "json")}
    base = write_run(root / "off" / "run", ArmSpec(speculative=False, **shape))
    cand = write_run(root / "on" / "run", ArmSpec(speculative=True, warnings=(f"model {EVIL}",), **shape))
    return verdict_for([base], [cand])


def test_html_escapes_input_strings_and_embeds_every_plot_or_says_why_not(evil_verdict):
    page = render(evil_verdict, "html")
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) + page.count("class='omitted'") == len(FIGURES) and images
    assert all(base64.b64decode(img).startswith(b"\x89PNG") for img in images)
    # self-contained: nothing loaded from elsewhere (the runs' hosts are shown as text)
    assert not re.search(r"""(src|href|url)\s*[=(]\s*['"]?\s*(https?:)?//""", page, re.IGNORECASE)


def test_markdown_escapes_input_strings(evil_verdict):
    md = render(evil_verdict, "markdown")
    assert not re.search(r"(?<!\\)<", md) and "\\<script>alert(1)\\</script>" in md
    assert "| metric | baseline | candidate | change [95% CI] |" in md


def test_text_table_has_both_arms_and_change(evil_verdict):
    text = render(evil_verdict, "text")
    assert text.startswith(f"VERDICT: {evil_verdict.verdict.upper()}")
    row = next(line for line in text.splitlines() if "TPOT p50 (ms)" in line)
    label, cells = row[:30].strip(), row[30:].split()
    assert label == "TPOT p50 (ms)"
    float(cells[0]), float(cells[1])  # baseline, candidate
    assert re.fullmatch(r"[+-]\d+\.\d%", cells[2]) and cells[3].startswith("[")  # change [95% CI]
    assert re.search(r"acceptance \d\.\d\d \[95% CI \d\.\d\d, \d\.\d\d", text)


def test_json_round_trips_the_verdict(evil_verdict):
    doc = json.loads(render(evil_verdict, "json"))
    assert doc["verdict"] == evil_verdict.verdict
    assert doc["schema"] == 7
    assert doc["design"]["kind"] == "sequential"
    assert doc["decision_rule"] == {"objective": "latency", "primary": "tpot_p50_ms",
                                    "guards": ["tpot_p90_ms", "ttft_p50_ms", "output_tok_s"],
                                    "noise_band_pct": 2.0, "margin_pct": 5.0, "ttft_margin_pct": 50.0,
                                    "primary_share": 0.8, "alpha": 0.05,
                                    "correction": "holm", "exploratory_correction": "benjamini-hochberg"}
    level = doc["levels"][0]
    assert level["requests"]["baseline"] == evil_verdict.levels[0].baseline.requests
    tpot = level["metrics"]["tpot_p50_ms"]
    assert tpot["baseline"] == evil_verdict.levels[0].baseline.tpot_p50_ms
    assert tpot["ci95_pct"][0] <= tpot["change_pct"] <= tpot["ci95_pct"][1]
    assert tpot["units"]["unit"] == "blocks" and tpot["units"]["count"] >= 4  # each arm's 5 s blocks
    assert set(level["mde_pct"]) == {"tpot_p50_ms", "tpot_p90_ms", "ttft_p50_ms", "output_tok_s"}
    assert tpot["role"] == "primary" and tpot["exploratory"] is False
    assert 0 <= tpot["p_value"] <= tpot["p_adjusted"] <= 1  # Holm never lowers a p-value
    assert level["metrics"]["ttft_p50_ms"]["role"] == "guard"
    assert level["metrics"]["itl_p50_ms"]["role"] is None
    assert level["metrics"]["itl_p50_ms"]["ci95_pct"] is None  # context, token-weighted: no interval
    assert level["batch"]["candidate"]["running_p50"] == 1.0
    assert doc["warnings"] == [f"candidate: model {EVIL}"]  # JSON carries the text as data


@pytest.mark.parametrize(("name", "fmt"), [("a.json", "json"), ("a.md", "markdown"), ("a.HTML", "html"),
                                           ("a.txt", "text")])
def test_output_format_from_suffix(name, fmt, tmp_path):
    assert format_for(tmp_path / name) == fmt


def test_write_outputs_writes_each_path(evil_verdict, tmp_path):
    paths = [tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.txt"]
    write_outputs(evil_verdict, paths)
    assert all(p.stat().st_size > 0 for p in paths)
    with pytest.raises(InputError, match="unknown output suffix"):
        write_outputs(evil_verdict, [tmp_path / "v.pdf"])
