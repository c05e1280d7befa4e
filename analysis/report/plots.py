"""The HTML report's figures (matplotlib, Agg), each returned as PNG bytes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from locust_spec.analysis.model import Verdict  # noqa: E402
from locust_spec.analysis.report.table import users_label  # noqa: E402

ARMS = (("baseline", "speculation off", "--"), ("candidate", "speculation on", "-"))


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def itl_cdf(verdict: Verdict) -> bytes:
    """Per-token latency CDF, off (dashed) vs on (solid), one colour per level."""
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = False
    for i, (users, arms) in enumerate(sorted(verdict.plots.itl_cdf.items())):
        colour = f"C{i % 10}"
        for arm, label, style in ARMS:
            points = arms.get(arm, ())
            if points:
                xs, ys = zip(*points, strict=True)
                ax.step(xs, ys, where="post", linestyle=style, color=colour,
                        label=f"{users_label(users)}, {label}")
                drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.set_xlabel("per-token latency (ms)")
        ax.set_ylabel("fraction of tokens")
        ax.set_title("Per-token latency CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no per-token latency histograms")
    return _png(fig)


def against_concurrency(verdict: Verdict) -> bytes:
    """Output throughput and ITL p50 against concurrency, both arms."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    users = [lv.users for lv in verdict.levels]
    for arm, label, style in ARMS:
        tput = [getattr(lv, arm).output_tok_s for lv in verdict.levels]
        itl = [getattr(lv, arm).itl_p50_ms for lv in verdict.levels]
        left.plot(users, [float("nan") if v is None else v for v in tput], style, marker="o", label=label)
        right.plot(users, [float("nan") if v is None else v for v in itl], style, marker="o", label=label)
    for ax, title, ylabel in ((left, "Output throughput", "tokens/s"), (right, "ITL p50", "ms")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent users")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return _png(fig)


def per_position(verdict: Verdict) -> bytes:
    """Acceptance per draft position, one line per level."""
    fig, ax = plt.subplots(figsize=(7, 4))
    measured = [lv for lv in verdict.levels if lv.per_position]
    for lv in measured:
        ax.plot(range(len(lv.per_position)), lv.per_position, marker="o", label=users_label(lv.users))
    if measured:
        ax.set_xticks(range(max(len(lv.per_position) for lv in measured)))
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance")
        ax.set_ylim(0, 1)
        ax.set_title("Acceptance per draft position")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    else:
        _empty(ax, "the server exposes no per-position acceptance")
    return _png(fig)


def per_class(verdict: Verdict) -> bytes:
    """Acceptance per prompt class (from per-request stats)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    classes = [c for d in verdict.diagnoses if d.kind == "per_class" for c in d.evidence["classes"]]
    if classes:
        ax.bar([c["class"] for c in classes], [c["acceptance"] for c in classes], color="C2")
        ax.set_ylim(0, 1)
        ax.set_ylabel("acceptance")
        ax.set_title("Acceptance per prompt class")
        ax.grid(axis="y", alpha=0.3)
    else:
        _empty(ax, "no per-request speculative-decoding stats")
    return _png(fig)


FIGURES = (
    ("Per-token latency CDF, off vs on", itl_cdf),
    ("Throughput and ITL against concurrency", against_concurrency),
    ("Acceptance per draft position", per_position),
    ("Acceptance per prompt class", per_class),
)
