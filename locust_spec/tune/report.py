"""spec-tune's report: text, JSON, Markdown and self-contained HTML from one TuneResult, and the plot of
the objective against the measured batch per k with the chosen schedule drawn over it."""

from __future__ import annotations

import base64
import io
import json
from html import escape

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from locust_spec.analysis.report.table import users_label  # noqa: E402
from locust_spec.tune.choose import Decision  # noqa: E402
from locust_spec.tune.confirm import ARMS, static_text  # noqa: E402
from locust_spec.tune.intervals import Interval  # noqa: E402
from locust_spec.tune.result import TuneResult  # noqa: E402

FORMATS = ("text", "json", "markdown", "html")


def _iv(iv: Interval | None) -> str:
    return f"{iv.estimate:.4g} [{iv.lo:.4g}, {iv.hi:.4g}]" if iv and iv.measured else "-"


def _batch(b: float | None) -> str:
    return f"{b:.1f}" if b is not None else "-"


def level_table(r: TuneResult) -> tuple[list[str], list[list[str]]]:
    """Per level: the server's batch, every k's estimate [95% interval], the k chosen."""
    priced = r.pricing is not None
    header = ["users", "batch", *(f"k={k}" for k in r.ks), "chosen",
              *(["$ per M output tokens: chosen k (k=0)"] if priced else [])]
    rows = []
    for d in r.decisions:
        cells = [str(d.users), _batch(d.batch)]
        for k in r.ks:
            arm = d.arm(k)
            cell = _iv(arm.interval) if arm else "-"
            cells.append(cell + (" *" if arm and k == d.k else ""))
        cells.append("-" if d.k is None else str(d.k))
        if priced:
            cells.append(f"{_usd(d, d.k)} ({_usd(d, 0)})")
        rows.append(cells)
    return header, rows


def _usd(d: Decision, k: int | None) -> str:
    """An arm's cost per million output tokens at a level, '-' when not measured."""
    arm = d.arm(k) if k is not None else None
    found = arm.cost_per_mtok_usd if arm is not None else None
    return "-" if found is None or found.estimate is None else f"${found.estimate:.2f}"


def task_table(r: TuneResult) -> tuple[list[str], list[list[str]]] | None:
    """Per task and level: every k's estimate per stream [95% interval], the k that task alone would
    choose, and the k the mix chose (the schedule a server of this mix gets); None for a single task."""
    if not r.tasks:
        return None
    mix = {d.users: d.k for d in r.decisions}
    header = ["task", "users", *(f"k={k}" for k in r.ks), "task's k", "mix's k"]
    rows = []
    for task, decisions in r.tasks:
        for d in decisions:
            arms = [d.arm(k) for k in r.ks]
            chosen = mix.get(d.users)
            rows.append([task, str(d.users), *(_iv(a.interval) if a else "-" for a in arms),
                         "-" if d.k is None else str(d.k), "-" if chosen is None else str(chosen)])
    return header, rows


TASK_NOTE = ("Per task (a rate per stream: the task's own requests over their own time): the k each level "
             "would choose for that task alone. One server serves the mix, so the schedule is the mix's; "
             "tune for one task with --prompts NAME or --category NAME.")


def confirm_tables(r: TuneResult) -> list[tuple[str, list[str], list[list[str]]]]:
    c = r.confirmation
    if c is None:
        return []
    arms = [a for a in ARMS if any(a in lc.measured for lc in c.levels)]
    names = {"schedule": "schedule", "static": f"static k={c.static_k}", "off": "off (k=0)"}
    header = ["users", "predicted (winner)", *(names[a] for a in arms), "status"]
    rows = [[str(lc.users),
             (f"k={lc.predicted_k}: " if lc.predicted_k is not None else "") + _iv(lc.predicted),
             *(_iv(lc.measured.get(a)) for a in arms), lc.status] for lc in c.levels]
    out = [(f"Confirmation on the ladder (the schedule against {static_text(c.static_k)}, and off)",
            header, rows)]
    if c.swings:
        sh = ["threshold (batch)", "users swinging", "predicted", *(names[a] for a in arms), "status"]
        srows = [[str(s.threshold), f"{s.users[0]} <-> {s.users[1]}",
                  f"{s.predicted:.4g}" if s.predicted is not None else "-",
                  *(_iv(s.measured.get(a)) for a in arms), s.status] for s in c.swings]
        out.append(("Swing across each threshold", sh, srows))
    return out


def _schedule_lines(r: TuneResult) -> list[str]:
    if r.built is None:
        return ["No schedule: no level had a usable measurement."]
    lines = [f"num_speculative_tokens_per_batch_size: {json.dumps([list(e) for e in r.built.entries])}"]
    lines.append(r.config_arg or "every level chose k=0: serve without --speculative-config")
    return lines


def _notes(r: TuneResult) -> list[str]:
    return list(r.notes) + list(r.built.notes if r.built else ())


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), *(fmt.format(*row) for row in rows)]


def render_text(r: TuneResult) -> str:
    out = [f"spec-tune: objective {r.objective} ({r.unit}); estimate [95% interval], * = chosen"]
    out += _text_table(*level_table(r))
    out += [f"  {users_label(d.users)}: {d.reason}" for d in r.decisions]
    tasks = task_table(r)
    if tasks:
        out += ["", TASK_NOTE, *_text_table(*tasks)]
    out += ["", *_schedule_lines(r)]
    for title, header, rows in confirm_tables(r):
        out += ["", title + ":", *_text_table(header, rows)]
    if r.confirmation:
        out += ["", f"Confirmation: {r.confirmation.summary}"]
    out += [f"note: {n}" for n in _notes(r)]
    return "\n".join(out) + "\n"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def render_markdown(r: TuneResult) -> str:
    out = [f"# spec-tune: speculation length per batch size ({r.objective})", "",
           f"Objective: **{r.objective}** ({r.unit}); estimate [95% bootstrap interval], * = chosen.", ""]
    out += _md_table(*level_table(r))
    out += ["", *(f"- {users_label(d.users)}: {d.reason}" for d in r.decisions)]
    tasks = task_table(r)
    if tasks:
        out += ["", "## Per task", "", TASK_NOTE, "", *_md_table(*tasks)]
    out += ["", "## Schedule", "", "```", *_schedule_lines(r), "```"]
    for title, header, rows in confirm_tables(r):
        out += ["", f"## {title}", "", *_md_table(header, rows)]
    if r.confirmation:
        out += ["", f"**Confirmation:** {r.confirmation.summary}"]
    notes = _notes(r)
    if notes:
        out += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


def plot(r: TuneResult) -> bytes:
    """The objective against the measured batch, one line per k with its intervals; the chosen schedule's
    ranges shaded and labelled, the chosen point of each level circled."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, k in enumerate(r.ks):
        pts = sorted((d.arm(k).batch if d.arm(k).batch is not None else d.users, d.arm(k).interval)
                     for d in r.decisions if d.arm(k) and d.arm(k).interval)
        if not pts:
            continue
        xs = [x for x, _ in pts]
        ys = [iv.estimate for _, iv in pts]
        # A percentile interval can sit beside its estimate on skewed data: no negative whisker then.
        err = [[max(0.0, iv.estimate - iv.lo) for _, iv in pts],
               [max(0.0, iv.hi - iv.estimate) for _, iv in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=f"k={k}")
    chosen = [(d.arm(d.k).batch or d.users, d.arm(d.k).interval.estimate) for d in r.decisions
              if d.k is not None and d.arm(d.k) and d.arm(d.k).interval]
    if chosen:
        ax.scatter(*zip(*chosen, strict=True), s=220, facecolors="none", edgecolors="black", linewidths=2,
                   zorder=5, label="chosen")
    ax.set_xscale("log")
    # Rates grow with the batch by orders of magnitude: on a log axis every level's k are told apart.
    if r.objective != "tpot" and any(line.get_ydata().size for line in ax.lines):
        ax.set_yscale("log")
    if r.built is not None:
        left, right = ax.get_xlim()
        for j, (lo, hi, k) in enumerate(r.built.entries):
            x0 = max(lo - 0.5, left)
            x1 = min(hi + 0.5, right) if j + 1 < len(r.built.entries) else right
            ax.axvspan(x0, x1, color=f"C{r.ks.index(k) % 10}" if k in r.ks else "grey", alpha=0.08)
            ax.text((x0 * x1) ** 0.5, 0.97, f"schedule k={k}", transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize="small")
        for t in r.built.thresholds:
            ax.axvline(t - 0.5, color="black", linestyle=":", linewidth=1)
        ax.set_xlim(left, right)
    ax.set_xlabel("server batch (mean running requests)")
    ax.set_ylabel(r.unit)
    ax.set_title(f"{r.objective} per k against batch, chosen schedule shaded")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em}
pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap}img{max-width:100%;display:block;margin:.5em 0}"""


def render_html(r: TuneResult, png: bytes | None = None) -> str:
    png = plot(r) if png is None else png
    parts = [f"<h1>spec-tune: speculation length per batch size ({escape(r.objective)})</h1>",
             f"<p>Objective {escape(r.objective)} ({escape(r.unit)}); estimate [95% bootstrap interval], "
             "* = chosen.</p>", _html_table(*level_table(r)),
             "<ul>" + "".join(f"<li>{users_label(d.users)}: {escape(d.reason)}</li>"
                              for d in r.decisions) + "</ul>",
             f"<img alt='objective against batch per k' src='data:image/png;base64,"
             f"{base64.b64encode(png).decode()}'>"]
    tasks = task_table(r)
    if tasks:
        parts += ["<h2>Per task</h2>", f"<p>{escape(TASK_NOTE)}</p>", _html_table(*tasks)]
    parts.append("<h2>Schedule</h2><pre>" + escape("\n".join(_schedule_lines(r))) + "</pre>")
    for title, header, rows in confirm_tables(r):
        parts += [f"<h2>{escape(title)}</h2>", _html_table(header, rows)]
    if r.confirmation:
        parts.append(f"<p><b>Confirmation:</b> {escape(r.confirmation.summary)}</p>")
    notes = _notes(r)
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>spec-tune</title><style>{STYLE}"
            f"</style></head><body>{''.join(parts)}</body></html>\n")


def render(r: TuneResult, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(r.as_dict(), indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(r)
    if fmt == "html":
        return render_html(r)
    if fmt == "text":
        return render_text(r)
    raise ValueError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
