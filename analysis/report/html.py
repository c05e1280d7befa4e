"""The self-contained HTML report: tables, verdict lines, embedded PNG plots; all input text escaped."""

from __future__ import annotations

import base64
from collections.abc import Callable
from html import escape

from ..model import Verdict
from ..report.plots import FIGURES, Omitted, class_acceptance, plt
from ..report.table import (
    HEADER,
    LEVELS_HEADER,
    TASK_HEADER,
    acceptance_line,
    answers_line,
    crossover_lines,
    design_line,
    evidence_line,
    forced_lines,
    levels_rows,
    measured,
    rows,
    rule_line,
    task_rows,
    title,
    users_label,
)

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em}
td:not(:first-child){text-align:right}.v{font-weight:bold;text-transform:uppercase}
.ship{color:#176c2a}.off{color:#a11}.tradeoff{color:#a66a00}.depends{color:#a66a00}.inconclusive{color:#555}
img{max-width:100%;display:block;margin:.5em 0}.omitted{color:#555}
table.measured td{text-align:left;font-size:.9em;overflow-wrap:anywhere}
table.measured td:first-child,table.measured th{white-space:nowrap}.forced{color:#a11;font-weight:bold}
"""


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>" if items else ""


def _diag(d) -> str:
    return f"<b>{escape(d.kind)}</b>: {escape(d.message)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _class_table(verdict: Verdict) -> str:
    """Acceptance per prompt class beside the verdict: which of your workloads the speculation pays on."""
    classes = sorted(class_acceptance(verdict), key=lambda c: -c["acceptance"])
    if not classes:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("prompt class", "acceptance", "requests", "TPOT p50 off (ms)",
                                             "TPOT p50 on (ms)"))
    body = "".join(
        f"<tr><td>{escape(c['class'])}</td><td>{c['acceptance']:.2f}</td><td>{c['requests']}</td>"
        f"<td>{_ms(c['baseline_tpot_p50_ms'])}</td><td>{_ms(c['candidate_tpot_p50_ms'])}</td></tr>"
        for c in classes)
    return f"<h2>Acceptance per prompt class</h2><table><tr>{head}</tr>{body}</table>"


def _task_table(verdict: Verdict) -> str:
    """The verdict per task and level: where speculation pays in this workload (SpecBench's question)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in TASK_HEADER)
    body = "".join("<tr>" + "".join(f"<td class='v {escape(c)}'>{escape(c)}</td>" if i == 2 else
                                     f"<td>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in task_rows(verdict))
    return (f"<h2>Per task</h2><p>Exploratory: the false discovery rate is controlled over every task and "
            f"level (Benjamini-Hochberg). Each task's own requests at each level: acceptance from the "
            f"candidate's per-request stats, throughput per stream (the task's tokens over its requests' "
            f"time).</p>"
            f"<table><tr>{head}</tr>{body}</table>")


def _measured(verdict: Verdict) -> str:
    """What each run measured, on the first screen: a verdict is only worth what a reader can check."""
    found = measured(verdict)
    if found is None:
        return ""
    header, facts = found
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in facts)
    return f"<h2>What was measured</h2><table class='measured'><tr>{head}</tr>{body}</table>"


def _levels_table(verdict: Verdict) -> str:
    """Every level's verdict with its deciding intervals: the answer, on the first screen."""
    head = "".join(f"<th>{escape(h)}</th>" for h in LEVELS_HEADER)
    body = "".join("<tr>" + "".join(f"<td class='v {escape(c)}'>{escape(c)}</td>" if i == 1 else
                                     f"<td>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in levels_rows(verdict))
    return f"<table class='levels'><tr>{head}</tr>{body}</table>"


def drawn(draw: Callable[[Verdict], bytes | Omitted], verdict: Verdict) -> bytes | Omitted:
    """A figure, or the one line saying why it is not there: a plot that fails (matplotlib refuses some
    numbers) costs that figure, never the report or the verdict line printed after it."""
    try:
        return draw(verdict)
    except Exception as exc:  # noqa: BLE001 (any plotting failure: the rest of the report stands)
        plt.close("all")
        return Omitted(f"the plot failed ({type(exc).__name__}: {str(exc)[:200]})")


def render(verdict: Verdict) -> str:
    v = escape(verdict.verdict)
    parts = [f"<h1>{escape(title(verdict))}: <span class='v {v}'>{v}</span></h1>",
             f"<p>{escape(verdict.summary)}</p>",
             *(f"<p class='forced'>{escape(line)}</p>" for line in forced_lines(verdict)),
             _levels_table(verdict), f"<p>{escape(design_line(verdict.design))}</p>",
             f"<p>{escape(rule_line(verdict))}</p>",
             _task_table(verdict) if verdict.tasks else _class_table(verdict)]
    for lv in verdict.levels:
        lvv = escape(lv.verdict)
        parts.append(f"<h2>{users_label(lv.users)}: <span class='v {lvv}'>{lvv}</span></h2>")
        parts.append(f"<p>{escape(acceptance_line(lv))}</p>")
        for extra in (evidence_line(lv), answers_line(lv)):
            if extra:
                parts.append(f"<p>{escape(extra)}</p>")
        head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows(lv))
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
        parts.append(_list([escape(r) for r in lv.reasons] + [_diag(d) for d in lv.diagnoses]))
    parts.append(_measured(verdict))
    if verdict.crossover:
        parts += ["<h2>Crossover</h2>", _list([escape(line) for line in crossover_lines(verdict.crossover)])]
    if verdict.diagnoses:
        parts += ["<h2>Diagnoses</h2>", _list([_diag(d) for d in verdict.diagnoses])]
    if verdict.warnings:
        parts += ["<h2>Warnings</h2>", _list([escape(w) for w in verdict.warnings])]
    parts.append("<h2>Plots</h2>")
    for name, draw in FIGURES:
        figure = drawn(draw, verdict)
        if isinstance(figure, Omitted):
            parts.append(f"<p class='omitted'>{escape(name)}: not drawn, {escape(figure.reason)}.</p>")
            continue
        data = base64.b64encode(figure).decode("ascii")
        parts.append(f"<h3>{escape(name)}</h3>"
                     f"<img alt='{escape(name)}' src='data:image/png;base64,{data}'>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>spec-verdict: {v}</title><style>{STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
