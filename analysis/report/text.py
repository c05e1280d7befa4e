"""The terminal report: a compact table per level and the verdict lines."""

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
    users_label,
)


def _table(lines: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
            strict=True))) for r in lines]


# C0 and C1 controls: a newline would forge a line of the report, an escape sequence would drive the terminal.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def _plain(text: str) -> str:
    """Input-derived text as one line of plain terminal text."""
    return _CONTROLS.sub(" ", text)


def render(verdict: Verdict) -> str:
    what = " (candidate vs baseline configuration)" if verdict.configurations else ""
    out = [f"VERDICT{what}: {verdict.verdict.upper()}", _plain(verdict.summary),
           *(_plain(line) for line in forced_lines(verdict)), design_line(verdict.design),
           rule_line(verdict), ""]
    found = measured(verdict)
    if found is not None:
        header, facts = found
        out.append("Measured (" + " | ".join(header[1:]) + "):")
        out.extend(f"  {label}: " + " | ".join(_plain(c) for c in cells) for label, *cells in facts)
        out.append("")
    for lv in verdict.levels:
        out.append(f"{users_label(lv.users)}: {lv.verdict.upper()}  ({acceptance_line(lv)})")
        for extra in (evidence_line(lv), answers_line(lv)):
            if extra:
                out.append(f"  {_plain(extra)}")
        out.extend(_table([HEADER, *rows(lv)]))
        out.extend(f"  - {_plain(r)}" for r in lv.reasons)
        out.extend(f"  * {d.kind}: {_plain(d.message)}" for d in lv.diagnoses)
        out.append("")
    if verdict.tasks:
        out.append("Per task (exploratory, false discovery rate controlled; acceptance from per-request "
                   "stats; throughput per stream):")
        out.extend(_table([TASK_HEADER, *[tuple(_plain(c) for c in r) for r in task_rows(verdict)]]))
    if verdict.crossover:
        out.append("Crossover:")
        out.extend(f"  {line}" for line in crossover_lines(verdict.crossover))
    if verdict.diagnoses:
        out.append("Diagnoses:")
        out.extend(f"  * {d.kind}: {_plain(d.message)}" for d in verdict.diagnoses)
    if verdict.warnings:
        out.append("Warnings:")
        out.extend(f"  ! {_plain(w)}" for w in verdict.warnings)
    return "\n".join(out).rstrip() + "\n"
