"""Each report format escapes input-derived text for its own format only (issue 15 row 11): a prompt class
`$\\foo$` (mathtext), a summary warning holding a newline and a Markdown image, HTML in a class name."""

from __future__ import annotations

import base64
import json
import re

import pytest
from locust_spec.analysis.api import render, verdict_for
from locust_spec.analysis.report import plots

from tests.data.run_builder import ArmSpec, write_run

MATH = "$\\foo$"
TAG = "<b>x</b>"
INJECTION = "first line\n# injected heading ![x](http://evil.example/x.png) [link](http://evil.example)"


@pytest.fixture(scope="module")
def verdict(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    shape = {"levels": (1,), "requests_per_user": {1: 12}, "classes": (MATH, TAG, "json")}
    base = write_run(root / "off" / "run", ArmSpec(speculative=False, **shape))
    cand = write_run(root / "on" / "run", ArmSpec(speculative=True, warnings=(INJECTION,), **shape))
    found = verdict_for([base], [cand])
    assert any(d.kind == "per_class" for d in found.diagnoses), "the class names reach a figure"
    return found


def test_html_renders_a_mathtext_class_and_escapes_html_only(verdict):
    page = render(verdict, "html")
    images = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert images and all(src.startswith("data:image/png;base64,") for src in images)
    assert plots.per_class(verdict).startswith(b"\x89PNG"), "the class names were drawn"
    assert all(base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG") for src in images)
    assert TAG not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert MATH in page, "HTML leaves Markdown and TeX characters alone"
    assert "![x](http://evil.example/x.png)" in page, "shown as text: HTML has no Markdown images"


def test_the_per_class_figure_draws_a_dollar_class_literally():
    assert plots.literal(MATH) == "\\$\\foo\\$"
    assert plots.literal("plain") == "plain"


def test_markdown_escapes_markdown_and_writes_no_html_entities(verdict):
    md = render(verdict, "markdown")
    lines = md.splitlines()
    assert not any(line.startswith("# injected") for line in lines), "no heading forged by a newline"
    assert "![x](" not in md and "[link](" not in md and "!\\[x\\](http://evil.example/x.png)" in md
    assert any(line.startswith("- candidate: first line # injected heading") for line in lines), md
    assert "\\$\\\\foo\\$" in md, "GitHub math cannot start"
    assert "\\<b>x\\</b>" in md and not re.search(r"(?<!\\)<", md)
    assert not re.search(r"&(lt|gt|amp|quot|#x?[0-9a-f]+);", md), "entities would show raw in the .md"
    assert "->" in md, "plain punctuation is left as written"


def test_text_keeps_each_warning_on_one_line(verdict):
    text = render(verdict, "text")
    assert any(line.startswith("  ! candidate: first line # injected heading") for line in text.splitlines())
    assert not any(line.startswith("# injected") for line in text.splitlines())
    assert MATH in text and TAG in text, "a terminal shows text as it is"


def test_json_carries_the_text_as_data(verdict):
    doc = json.loads(render(verdict, "json"))
    assert doc["warnings"] == [f"candidate: {INJECTION}"]
