"""The HTML report's figures (matplotlib, Agg), each returned as PNG bytes, or `Omitted` with the reason
when there is nothing to draw (the report then says why in one line instead of showing an empty image)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, LogLocator  # noqa: E402

from ..model import Verdict  # noqa: E402
from ..report.table import users_label  # noqa: E402
from ..verdict import Thresholds  # noqa: E402

ARMS = (("baseline", "speculation off", "--"), ("candidate", "speculation on", "-"))
# The per-token CDF's axis: a token read in the same network read as the one before has an ITL of ~0
# (recorded at the histogram's floor, 1 µs); those tokens are the height where a curve starts, and the
# axis spans the rest, from the first CDF_TAIL of them to the last, so that no decade is spent where no
# token lies.
NEAR_ZERO_MS = 0.01
CDF_TAIL = 0.005
# The measures the verdict decides on (verdict._decide): per-token latency and throughput.
DECIDING = (("tpot_p50_ms", "TPOT p50", "lower is better"),
            ("output_tok_s", "output tok/s", "higher is better"))
RULE = Thresholds()  # the rule of thumb's lines on the acceptance plots
AXIS_LABELS = {"users": "concurrent users", "rate": "arrival rate (requests/s, open loop)"}


@dataclass(frozen=True)
class Omitted:
    """A figure left out of the report, and why, in one line."""

    reason: str


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def cdf_axis(series: list[tuple[tuple[float, float], ...]]) -> tuple[float, float]:
    """The x range (ms) of the CDFs' tokens above NEAR_ZERO_MS, less CDF_TAIL of them at either end."""
    lows, highs = [], []
    for points in series:
        floor = max((y for x, y in points if x < NEAR_ZERO_MS), default=0.0)
        rest = [(x, y) for x, y in points if x >= NEAR_ZERO_MS]
        if not rest:
            continue
        lows.append(next((x for x, y in rest if y >= floor + CDF_TAIL), rest[-1][0]))
        highs.append(next(x for x, y in rest if y >= min(1.0 - CDF_TAIL, rest[-1][1])))
    if not lows:
        return NEAR_ZERO_MS, NEAR_ZERO_MS * 10
    lo, hi = min(lows), max(highs)
    return lo, max(hi, lo * 1.5)


def literal(text: str) -> str:
    """Input-derived text as matplotlib draws it literally: a pair of `$` would start mathtext (and a bad
    expression fails the whole figure)."""
    return text.replace("$", r"\$")


def itl_cdf(verdict: Verdict) -> bytes | Omitted:
    """Per-token latency CDF, off (dashed) vs on (solid), one colour per level; axis fitted to the data."""
    drawn = [(users, arm, label, style, points) for users, arms in sorted(verdict.plots.itl_cdf.items())
             for arm, label, style in ARMS if (points := arms.get(arm, ()))]
    if not drawn:
        return Omitted("no per-token latency histograms in the runs (PREFIX_latency.json missing)")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    levels = sorted({users for users, *_ in drawn})
    for users, _arm, label, style, points in drawn:
        xs, ys = zip(*points, strict=True)
        ax.step(xs, ys, where="post", linestyle=style, color=f"C{levels.index(users) % 10}",
                label=f"{users_label(users)}, {label}")
    lo, hi = cdf_axis([points for *_, points in drawn])
    if hi / lo > 20:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.set_xlim(lo / 1.1, hi * 1.1)
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("per-token latency (ms); a curve starting above 0: tokens that came with the one "
                  "before (ITL ~0)")
    ax.set_ylabel("fraction of tokens")
    ax.set_title("Per-token latency CDF (left and up is faster)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="lower right")
    return _png(fig)


def ratios(verdict: Verdict) -> bytes | Omitted:
    """Per level, candidate / baseline of the measures the verdict decides on, around the 1.0 line."""
    levels = [lv for lv in verdict.levels
              if any(_ratio(getattr(lv.baseline, k), getattr(lv.candidate, k)) for k, *_ in DECIDING)]
    if not levels:
        return Omitted("no level has both arms' TPOT p50 or output tokens/s")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(DECIDING)
    values = [1.0]
    for i, (key, label, better) in enumerate(DECIDING):
        xs = [j + (i - (len(DECIDING) - 1) / 2) * width for j in range(len(levels))]
        ys = [_ratio(getattr(lv.baseline, key), getattr(lv.candidate, key)) for lv in levels]
        bars = ax.bar(xs, [float("nan") if y is None else y - 1.0 for y in ys], width * 0.9, bottom=1.0,
                      color=f"C{i}", label=f"{label} ({better})")
        ax.bar_label(bars, labels=["" if y is None else f"{y:.2f}x" for y in ys], fontsize="small",
                     padding=2)
        values += [y for y in ys if y is not None]
    ax.axhline(1.0, color="black", linewidth=1)
    ax.text(-0.5, 1.0, " 1.0 = same as off", va="bottom", ha="left", fontsize="small")
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or 0.1
    ax.set_ylim(max(0.0, lo - pad), hi + pad)
    ax.set_xticks(range(len(levels)),
                  [f"{users_label(lv.users)}\n{lv.verdict.upper()}" for lv in levels])
    ax.set_ylabel("candidate / baseline")
    ax.set_title("Speculation on vs off at each level (the measures the verdict decides on)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def _ratio(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base <= 0 or not math.isfinite(cand):
        return None
    return cand / base


def against_concurrency(verdict: Verdict) -> bytes | Omitted:
    """Output throughput and ITL p50 against concurrency, both arms."""
    if not verdict.levels:
        return Omitted("no concurrency level common to both arms")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    users = [lv.users for lv in verdict.levels]
    for arm, label, style in ARMS:
        tput = [getattr(lv, arm).output_tok_s for lv in verdict.levels]
        itl = [getattr(lv, arm).itl_p50_ms for lv in verdict.levels]
        left.plot(users, [float("nan") if v is None else v for v in tput], style, marker="o", label=label)
        right.plot(users, [float("nan") if v is None else v for v in itl], style, marker="o", label=label)
    for ax, title, ylabel in ((left, "Output throughput", "tokens/s"), (right, "ITL p50", "ms")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(users, [f"{u:g}" for u in users])  # the ladder's levels, not powers of two
        ax.minorticks_off()
        ax.set_xlabel(AXIS_LABELS[verdict.axis])
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return _png(fig)


def per_position(verdict: Verdict) -> bytes | Omitted:
    """Acceptance per draft position, one line per level."""
    measured = [lv for lv in verdict.levels if lv.per_position]
    if not measured:
        return Omitted("the candidate server exposes no per-position acceptance counters")
    fig, ax = plt.subplots(figsize=(7, 4))
    for lv in measured:
        ax.plot(range(1, len(lv.per_position) + 1), lv.per_position, marker="o", label=users_label(lv.users))
    ax.set_xticks(range(1, max(len(lv.per_position) for lv in measured) + 1))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance")
    ax.set_ylim(0, 1)
    ax.set_title("Acceptance per draft position")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def class_acceptance(verdict: Verdict) -> list[dict]:
    """The per-class diagnosis's classes (class, acceptance, requests, TPOT p50 of both arms), if any."""
    return [c for d in verdict.diagnoses if d.kind == "per_class" for c in d.evidence["classes"]]


def per_class(verdict: Verdict) -> bytes | Omitted:
    """Acceptance per prompt class (from per-request stats), highest first, against the rule of thumb."""
    classes = sorted(class_acceptance(verdict), key=lambda c: -c["acceptance"])
    if not classes:
        return Omitted("the candidate sent no per-request speculative-decoding stats (vLLM: "
                       "--per-request-spec-decode-metrics detailed), so acceptance per class is unknown")
    fig, ax = plt.subplots(figsize=(7, 4))
    colours = ["C2" if c["acceptance"] >= RULE.ship_acceptance else
               "C3" if c["acceptance"] < RULE.off_acceptance else "C1" for c in classes]
    bars = ax.bar([literal(c["class"]) for c in classes], [c["acceptance"] for c in classes], color=colours)
    ax.bar_label(bars, labels=[f"{c['acceptance']:.2f}" for c in classes], fontsize="small", padding=2)
    for y, text in ((RULE.ship_acceptance, "pays above"), (RULE.off_acceptance, "off below")):
        ax.axhline(y, color="grey", linestyle=":", linewidth=1)
        ax.text(len(classes) - 0.5, y, f"{text} {y:.2f} ", ha="right", va="bottom", fontsize="small")
    ax.set_ylim(0, 1)
    ax.set_ylabel("acceptance (accepted / drafted tokens)")
    ax.set_title("Acceptance per prompt class")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


VERDICT_COLOURS = {"ship": "#176c2a", "off": "#a11", "tradeoff": "#c98a00", "depends": "#c98a00",
                   "inconclusive": "#888"}
MARKERS = "osD^v<>P*X"


def per_task(verdict: Verdict) -> bytes | Omitted:
    """Per task and level: acceptance, and TPOT p50 and throughput per stream on / off, each with its 95%
    interval; a marker's colour is that task's verdict at that level."""
    if not verdict.tasks:
        return Omitted("the runs hold a single prompt class (the levels above are its verdict)")
    tput = "goodput_tok_s" if verdict.slo is not None else "output_tok_s"
    panels = (("acceptance", "acceptance (accepted / drafted)"),
              ("tpot_p50_ms", "TPOT p50, on / off (lower is better)"),
              (tput, "tokens/s per stream, on / off (higher is better)"))
    tasks = [t.task for t in verdict.tasks]
    users = sorted({lv.users for t in verdict.tasks for lv in t.levels})
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True)
    width = 0.7 / max(len(users), 1)
    for ax, (key, title) in zip(axes, panels, strict=True):
        for n, level in enumerate(users):
            for i, task in enumerate(verdict.tasks):
                found = next((lv for lv in task.levels if lv.users == level), None)
                if found is None:
                    continue
                if key == "acceptance":
                    ci = found.acceptance_ci
                    y = found.acceptance
                    lo, hi = (ci.lo, ci.hi) if ci is not None and ci.measured else (y, y)
                else:
                    change = found.changes.get(key)
                    y = None if change is None else change.estimate
                    y, lo, hi = (None, None, None) if y is None else (
                        _change_ratio(y), _change_ratio(change.lo if change.measured else y),
                        _change_ratio(change.hi if change.measured else y))
                if y is None:
                    continue
                x = i + (n - (len(users) - 1) / 2) * width
                # an end a float's error past its estimate (from an older run) is no negative error bar
                ax.errorbar([x], [y], yerr=[[max(y - lo, 0.0)], [max(hi - y, 0.0)]],
                            fmt=MARKERS[n % len(MARKERS)], capsize=3,
                            color=VERDICT_COLOURS.get(found.verdict, "#888"))
        if key == "acceptance":
            for y in (RULE.ship_acceptance, RULE.off_acceptance):
                ax.axhline(y, color="grey", linestyle=":", linewidth=1)
            ax.set_ylim(0, 1)
        else:
            ax.axhline(1.0, color="#444", linewidth=1)
        ax.set_title(title, fontsize="medium")
        ax.set_xticks(range(len(tasks)), [literal(t) for t in tasks], rotation=30, ha="right")
        ax.grid(axis="y", alpha=0.3)
    shapes = [Line2D([], [], marker=MARKERS[n % len(MARKERS)], color="#444", linestyle="none",
                     label=users_label(level)) for n, level in enumerate(users)]
    fig.legend(handles=shapes, loc="lower center", ncol=len(shapes), fontsize="small",
               title="marker: level; colour: verdict", title_fontsize="x-small", bbox_to_anchor=(0.5, -0.24))
    fig.suptitle("Per task, with 95% intervals (green ship, red off, amber tradeoff, grey inconclusive)")
    return _png(fig)


def _change_ratio(change_pct: float | None) -> float:
    return float("nan") if change_pct is None else 1.0 + change_pct / 100.0


def ratio_bands(verdict: Verdict) -> bytes | Omitted:
    """Candidate / baseline against concurrency for TPOT p50 and throughput, each with its 95% band; the
    crossover where speculation stops paying is marked."""
    levels = sorted(verdict.levels, key=lambda lv: lv.users)
    tput = "goodput_tok_s" if verdict.slo is not None else "output_tok_s"
    candidates = (("tpot_p50_ms", "TPOT p50 (lower is better)", "C0"),
                  (tput, "throughput (higher is better)", "C1"))
    series = [(key, label, colour) for key, label, colour in candidates
              if any(lv.change_pct.get(key) is not None for lv in levels)]
    if not series:
        return Omitted("no level has both arms' TPOT or throughput")
    fig, ax = plt.subplots(figsize=(7, 4))
    users = [lv.users for lv in levels]
    for key, label, colour in series:
        cis = [lv.changes.get(key) for lv in levels]
        ax.plot(users, [_change_ratio(ci.estimate if ci else None) for ci in cis], marker="o", color=colour,
                label=label)
        ax.fill_between(users, [_change_ratio(ci.lo if ci else None) for ci in cis],
                        [_change_ratio(ci.hi if ci else None) for ci in cis], color=colour, alpha=0.2)
    for point in verdict.crossover:
        if point.users is not None:
            ax.axvline(point.users, color="C0" if point.metric == "tpot_p50_ms" else "C1", linestyle=":",
                       alpha=0.8)
    ax.axhline(1.0, color="#444", linewidth=1)
    if len(levels) > 1:
        ax.set_xscale("log", base=2)
        ax.set_xticks(users, [f"{u:g}" for u in users])  # the ladder's levels, not powers of two
        ax.minorticks_off()
    ax.set_xlabel(AXIS_LABELS[verdict.axis])
    ax.set_ylabel("speculation on / off")
    ax.set_title("Ratio against concurrency (95% intervals; dotted: crossover)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


FIGURES = (
    ("Per task: acceptance, TPOT and throughput, speculation on vs off", per_task),
    ("Speculation on vs off per level", ratios),
    ("Speculation on / off against concurrency, with 95% intervals", ratio_bands),
    ("Acceptance per prompt class", per_class),
    ("Per-token latency CDF, off vs on", itl_cdf),
    ("Throughput and ITL against concurrency", against_concurrency),
    ("Acceptance per draft position", per_position),
)
