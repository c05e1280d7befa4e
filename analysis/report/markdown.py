"""The Markdown report, sized for a CI step summary."""

from __future__ import annotations

import re

from ..model import Verdict
from ..report.table import (
    HEADER,
    TASK_HEADER,
    acceptance_line,
    answers_line,
    crossover_lines,
    design_line,
    evidence_line,
    forced_lines,
    measured,
    rows,
    rule_line,
    task_rows,
    title,
    users_label,
)

# Markdown's own escape is a backslash before ASCII punctuation (CommonMark). Escaped anywhere: what can open
# code, emphasis, a link or image, inline HTML, an entity, a table cell, strikethrough or (GitHub) math.
# `->` and other punctuation stay as written: HTML entities would show raw in the .md file.
_INLINE = re.compile(r"([\\`*_\[\]<&|~$])")
# At the start of a line: a heading, quote, list item, or setext underline.
_BLOCK = re.compile(r"^(?:([#>+=-])|(\d+)([.)]))")


def _inline(text: str) -> str:
    """Input-derived text as literal Markdown inside a line (a table cell): one line, markup escaped."""
    return _INLINE.sub(r"\\\1", " ".join(text.split()))


def _escape(text: str) -> str:
    """Input-derived text as a literal Markdown line: also nothing at its start opens a block."""
    return _BLOCK.sub(lambda m: "\\" + m[1] if m[1] else m[2] + "\\" + m[3], _inline(text))


def render(verdict: Verdict) -> str:
    out = [f"## {title(verdict)} verdict: **{verdict.verdict}**", "", _escape(verdict.summary), "",
           *(f"**{_escape(line)}**\n" for line in forced_lines(verdict)),
           _escape(design_line(verdict.design)), "", _escape(rule_line(verdict)), ""]
    found = measured(verdict)
    if found is not None:
        header, facts = found
        out += ["| " + " | ".join(_inline(h) or "measured" for h in header) + " |",
                "|" + "---|" * len(header)]
        out += ["| " + " | ".join(_inline(c) for c in r) + " |" for r in facts] + [""]
    for lv in verdict.levels:
        out += [f"### {users_label(lv.users)}: **{lv.verdict}**", "", _escape(acceptance_line(lv)), ""]
        for extra in (evidence_line(lv), answers_line(lv)):
            if extra:
                out += [_escape(extra), ""]
        out.append("| " + " | ".join(HEADER) + " |")
        out.append("|---|---:|---:|---:|")
        out += ["| " + " | ".join(_inline(c) for c in r) + " |" for r in rows(lv)]
        out.append("")
        out += [f"- {_escape(r)}" for r in lv.reasons]
        out += [f"- *{d.kind}*: {_escape(d.message)}" for d in lv.diagnoses]
        out.append("")
    if verdict.tasks:
        out += ["### Per task (exploratory: false discovery rate controlled)", "",
                "| " + " | ".join(TASK_HEADER) + " |",
                "|---|---:|---|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(_inline(c) for c in r) + " |" for r in task_rows(verdict)]
        out.append("")
    if verdict.crossover:
        out += ["### Crossover", ""] + [f"- {_escape(line)}" for line in crossover_lines(verdict.crossover)]
        out.append("")
    if verdict.diagnoses:
        out += ["### Diagnoses", ""]
        out += [f"- *{d.kind}*: {_escape(d.message)}" for d in verdict.diagnoses] + [""]
    if verdict.warnings:
        out += ["### Warnings", ""] + [f"- {_escape(w)}" for w in verdict.warnings] + [""]
    return "\n".join(out)
