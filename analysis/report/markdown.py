"""The Markdown report, sized for a CI step summary."""

from __future__ import annotations

from locust_spec.analysis.model import Verdict
from locust_spec.analysis.report.table import HEADER, acceptance_line, rows, runs_line, users_label


def _escape(text: str) -> str:
    """Keep input-derived text from becoming markup (HTML is allowed inside Markdown)."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")


def render(verdict: Verdict) -> str:
    out = [f"## Speculative decoding verdict: **{verdict.verdict}**", "", _escape(verdict.summary), ""]
    for lv in verdict.levels:
        out += [f"### {users_label(lv.users)}: **{lv.verdict}**", "", _escape(acceptance_line(lv)), ""]
        extra = runs_line(lv)
        if extra:
            out += [extra, ""]
        out.append("| " + " | ".join(HEADER) + " |")
        out.append("|---|---:|---:|---:|")
        out += ["| " + " | ".join(_escape(c) for c in r) + " |" for r in rows(lv)]
        out.append("")
        out += [f"- {_escape(r)}" for r in lv.reasons]
        out += [f"- *{d.kind}*: {_escape(d.message)}" for d in lv.diagnoses]
        out.append("")
    if verdict.diagnoses:
        out += ["### Diagnoses", ""]
        out += [f"- *{d.kind}*: {_escape(d.message)}" for d in verdict.diagnoses] + [""]
    if verdict.warnings:
        out += ["### Warnings", ""] + [f"- {_escape(w)}" for w in verdict.warnings] + [""]
    return "\n".join(out)
