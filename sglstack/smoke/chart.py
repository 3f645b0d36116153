"""The smoke chart, drawn with matplotlib (Agg, no display): this run, and the stack's history.

Left: baseline vs EAGLE-3 output tokens/s per stream at concurrency 1 (what the gates measure), with the
min_speedup gate drawn where EAGLE-3 has to reach. Right: tokens/s of every tested image measured with the
same settings, in the order they were tested (each tick: image digest and UTC time), failed runs marked,
and the max_regression gate drawn as a band under the last passing run that this run was compared with.
With named concurrency levels (smoke.concurrency_levels) a third panel: the speedup at each level against
min_speedup, the crossover marked.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config.imageref import image_name
from ..core.clock import parse_utc
from .startreport import draw_phases, starts

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BASELINE_COLOR = "#78909c"
EAGLE3_COLOR = "#1e88e5"
FAIL_COLOR = "#e53935"
PASS_COLOR = "#43a047"
KINDS = (("baseline", "baseline", BASELINE_COLOR), ("eagle3", "EAGLE-3", EAGLE3_COLOR))
MAX_TICK_LABELS = 12


def _tps(run: Mapping[str, Any] | None) -> float | None:
    value = (run or {}).get("tokens_per_s")
    return float(value) if value else None


def _when(text: Any) -> dt.datetime | None:
    return parse_utc(text)


def smoke_chart(report: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> bytes:
    """The PNG of one smoke report (see `chart_figure`)."""
    buf = io.BytesIO()
    chart_figure(report, history).savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def chart_figure(report: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """The chart of one smoke report. `history` holds the comparable runs, this one included (oldest first).

    `report` is the smoke report document: `baseline`/`eagle3` (tokens_per_s), `speedup`, `verdict`,
    `gates` (min_speedup, max_regression), `regression_reference` (the last passing run compared with,
    or None), `stack`, `image` and `time`.
    """
    # matplotlib takes ~0.7 s to import; only writing a report needs it, not every task that imports smoke.
    from matplotlib.figure import Figure

    levels = report.get("levels") or []
    with_starts = bool(starts(report))  # a panel more: each start by phase
    panels: list[float] = [1, 2.1] + ([1.2] if levels else []) + ([1.6] if with_starts else [])
    fig = Figure(figsize=(13 + 4 * (len(panels) - 2), 5.2), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(panels), width_ratios=tuple(panels))
    _draw_run(axes[0], report)
    _draw_history(axes[1], report, history)
    if levels:
        _draw_levels(axes[2], report, levels)
    if with_starts:
        draw_phases(axes[-1], report)
    served = report.get("image") or {}
    image = image_name(served.get("digest"), served.get("id")) or served.get("ref") or "?"
    verdict = str(report.get("verdict", "?")).upper()
    fig.suptitle(f"Smoke {verdict}: {report.get('stack') or 'no stack'}, image {str(image)[:19]}  "
                 f"({report.get('time', '')})", fontsize=13, fontweight="bold",
                 color=PASS_COLOR if verdict == "PASS" else FAIL_COLOR)
    return fig


def _draw_run(ax: Any, report: Mapping[str, Any]) -> None:
    base, eagle = _tps(report.get("baseline")), _tps(report.get("eagle3"))
    values = [base or 0.0, eagle or 0.0]
    bars = ax.bar(["baseline", "EAGLE-3"], values, color=[BASELINE_COLOR, EAGLE3_COLOR], width=0.6)
    for bar, value, measured in zip(bars, values, (base, eagle), strict=True):
        text = f"{value:.1f}" if measured else "no data"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, value), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=12, fontweight="bold")
    min_speedup = float((report.get("gates") or {}).get("min_speedup") or 0.0)
    top = max(values) or 1.0
    if base and min_speedup:
        need = base * min_speedup
        top = max(top, need)
        ax.axhline(need, color=FAIL_COLOR, linestyle="--", linewidth=1.5,
                   label=f"min_speedup {min_speedup:.2f}x: EAGLE-3 >= {need:.1f} tok/s")
        ax.legend(loc="upper left", fontsize=9.5, framealpha=0.95)
    ax.set_ylim(0, top * 1.35)
    speedup = report.get("speedup")
    ax.set_title("this run, concurrency 1" + (f": speedup {speedup:.2f}x" if speedup is not None else ""),
                 fontsize=12)
    ax.set_ylabel("output tokens/s per stream")
    ax.tick_params(axis="x", labelsize=12)
    ax.grid(axis="y", alpha=0.3)


def _draw_history(ax: Any, report: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> None:
    """One position per tested run, oldest left: runs minutes apart stay as readable as runs weeks apart.
    Each tick names the image (digest) and when it was tested (UTC)."""
    ax.set_title("history of this stack (same model and settings)", fontsize=12)
    ax.set_ylabel("output tokens/s per stream")
    ax.grid(alpha=0.3)
    runs = list(history)
    if not runs:
        ax.text(0.5, 0.5, "no history kept for this run", ha="center", va="center", transform=ax.transAxes,
                fontsize=12, color="#555555")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    values: list[float] = []
    any_failed = False
    for kind, label, color in KINDS:
        points = [(i, tps, rec) for i, rec in enumerate(runs) if (tps := _tps(rec.get(kind))) is not None]
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        values += ys
        ax.plot(xs, ys, color=color, marker="o", markersize=7, linewidth=1.8, label=f"{label} tok/s")
        failed = [(x, y) for x, y, rec in points if rec.get("verdict") != "pass"]
        if failed:
            any_failed = True
            ax.scatter([x for x, _ in failed], [y for _, y in failed], s=150, facecolors="none",
                       edgecolors=FAIL_COLOR, linewidths=2, zorder=3)
    if any_failed:
        ax.scatter([], [], s=150, facecolors="none", edgecolors=FAIL_COLOR, linewidths=2, label="failed run")
    reference = report.get("regression_reference")
    max_regression = float((report.get("gates") or {}).get("max_regression") or 0.0)
    if reference:
        for kind, label, color in KINDS:
            before = _tps(reference.get(kind))
            if not before:
                continue
            floor = before * (1.0 - max_regression)
            ax.axhspan(floor, before, color=color, alpha=0.2, linewidth=0,
                       label=f"{label} max_regression gate: >= {floor:.1f} tok/s ({max_regression:.0%} under the "
                             f"last pass, {before:.1f})")
            ax.axhline(floor, color=color, linestyle=":", linewidth=1.3)
            values += [floor, before]
    else:
        ax.text(0.01, 0.98, "no earlier passing run with these settings: the regression gate did not apply",
                ha="left", va="top", transform=ax.transAxes, fontsize=9.5, color="#555555")
    # Zoomed on the measured range (a line chart, not bars): a 5% band must be visible, not a hairline.
    low, high = min(values, default=0.0), max(values, default=1.0) or 1.0
    span = max(high - low, 0.1 * high)
    ax.set_ylim(max(0.0, low - 0.9 * span), high + 0.35 * span)
    ax.set_xlim(-0.5, len(runs) - 0.5)
    step = max(1, -(-len(runs) // MAX_TICK_LABELS))  # every run labelled, up to MAX_TICK_LABELS labels
    ticks = list(range(len(runs) - 1, -1, -step))[::-1]
    ax.set_xticks(ticks, [_tick_label(runs[i]) for i in ticks], fontsize=8.5)
    ax.set_xlabel("tested image (digest) and when (UTC), oldest first")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=9.5, framealpha=0.9)


def _draw_levels(ax: Any, report: Mapping[str, Any], levels: Sequence[Mapping[str, Any]]) -> None:
    """EAGLE-3's speedup at each named level (per stream at 1, aggregate above), min_speedup as a line."""
    min_speedup = float((report.get("gates") or {}).get("min_speedup") or 0.0)
    names = [str(row["concurrency"]) for row in levels]
    values = [float(row["speedup"] or 0.0) for row in levels]
    colors = [PASS_COLOR if row["pays"] else FAIL_COLOR for row in levels]
    bars = ax.bar(names, values, color=colors, width=0.6)
    for bar, row in zip(bars, levels, strict=True):
        text = "no data" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 4),
                    textcoords="offset points", ha="center", va="bottom", fontsize=11, fontweight="bold")
    ax.axhline(min_speedup, color=FAIL_COLOR, linestyle="--", linewidth=1.5, label=f"min_speedup {min_speedup:.2f}x")
    ax.set_ylim(0, max([*values, min_speedup, 1.0]) * 1.3)
    crossover = report.get("crossover")
    ax.set_title("speedup per concurrency level" + (f": stops paying at {crossover}" if crossover else ""),
                 fontsize=12)
    ax.set_xlabel("concurrency (1: per stream; above: aggregate)")
    ax.set_ylabel("EAGLE-3 / baseline")
    ax.legend(loc="upper right", fontsize=9.5, framealpha=0.9)
    ax.grid(axis="y", alpha=0.3)


def _tick_label(record: Mapping[str, Any]) -> str:
    image = record.get("image") or {}
    digest = (image_name(image.get("digest"), image.get("id")) or "?").removeprefix("sha256:")[:7]
    when = _when(record.get("time"))
    return f"{digest}\n{when:%m-%d %H:%M}" if when else digest
