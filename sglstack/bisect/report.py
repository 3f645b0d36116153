"""The bisect report: `report.json` for machines, `report.md` and a chart (`report.png`) for people.

report.json:
    status        "found" (a first bad ref is named), "undecided", or "running" (not finished yet)
    first_bad     the full commit sha or release of the first bad ref (null unless found)
    last_good     the newest ref measured good before it (null when unknown)
    candidates    where the change may be (found: [first_bad]; undecided: the refs left between)
    reason, notes what the planner concluded, in words
    metric        {"name", "label", "unit", "higher_is_better"}
    stack, mode ("git" or "release"), source, good, bad, refs_in_range, threshold, runs_per_batch
    change        relative change of the bad endpoint against the good one (median of runs)
    builds        how many steps this bisect built (BuildKit ran), and steps_tested
    steps         one per tested ref, oldest first: ref, index, subject, built, image (image id),
                  tag, config_hash, samples, batches, median, q1, q3, verdict (good, bad, skip,
                  undecided, pending), skip (reason), comparison (tests against both endpoints)
    timing        seconds of builds, smokes, and sglstack's own work around them (this run)
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.clock import utc_timestamp
from ..core.jsonreport import write_json
from ..core.records import build_root
from ..core.safefiles import containing_root, write_bytes
from . import stats
from .metrics import Metric
from .planner import Outcome, Planner

STATUS_COLORS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#9e9e9e", "undecided": "#f9a825",
                 "pending": "#1565c0"}


def build_report(*, planner: Planner, outcome: Outcome | None, metric: Metric, key: Mapping[str, Any],
                 builds: Mapping[str, Mapping[str, Any]], subjects: Mapping[str, str], timing: Mapping[str, float],
                 log_path: Path) -> dict[str, Any]:
    steps = []
    for view in planner.views():
        build = builds.get(view.ref) or {}
        entry: dict[str, Any] = {
            "ref": view.ref,
            "index": view.index,
            "subject": subjects.get(view.ref),
            "built": bool(build.get("built")),
            "image": build.get("image"),
            "tag": build.get("tag"),
            "config_hash": build.get("config_hash"),
            "samples": list(view.samples),
            "batches": view.batches,
            "median": stats.median(view.samples) if view.samples else None,
            "q1": stats.quartiles(view.samples)[0] if view.samples else None,
            "q3": stats.quartiles(view.samples)[1] if view.samples else None,
            "verdict": view.status,
            "skip": view.skip,
            "comparison": view.classification.to_dict() if view.classification else None,
        }
        if view.ref in (planner.good, planner.bad) and view.samples:
            entry["verdict"] = "good" if view.ref == planner.good else "bad"
            entry["endpoint"] = True
        steps.append(entry)
    check = planner.endpoint_check()
    status = outcome.status if outcome else "running"
    return {
        "status": status,
        "first_bad": outcome.first_bad if outcome else None,
        "last_good": outcome.last_good if outcome else None,
        "candidates": list(outcome.candidates) if outcome else [],
        "reason": outcome.reason if outcome else "the bisect has not finished: run it again to continue",
        "notes": list(outcome.notes) if outcome else [],
        "metric": {"name": metric.name, "label": metric.label, "unit": metric.unit,
                   "higher_is_better": metric.higher_is_better},
        "stack": key.get("stack"),
        "mode": key.get("mode"),
        "source": key.get("source"),
        "good": planner.good,
        "bad": planner.bad,
        "refs_in_range": len(planner.refs) - 1,
        "threshold": planner.config.threshold,
        "runs_per_batch": planner.config.runs_per_batch,
        "max_batches": planner.config.max_batches,
        "change": check.change if check else None,
        "endpoints": check.comparison.to_dict() if check else None,
        "builds": sum(1 for s in steps if s["built"]),
        "steps_tested": len(steps),
        "steps": steps,
        "timing": dict(timing),
        "time": utc_timestamp(),
        "log": str(log_path),
    }


def write_reports(data: Mapping[str, Any], folder: Path, *, chart: bool = True) -> dict[str, Path]:
    """report.json, report.md and (with `chart`) report.png in `folder`, each replaced whole."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "report.json", "markdown": folder / "report.md", "chart": folder / "report.png"}
    if chart:
        _atomic_write(paths["chart"], chart_png(data))
    _atomic_write(paths["markdown"], markdown(data, paths["chart"].name).encode("utf-8"))
    write_json(paths["json"], data)
    return paths


def _atomic_write(path: Path, data: bytes) -> None:
    write_bytes(containing_root(path.parent, build_root()), path, data)


def short(ref: str) -> str:
    return ref[:10] if len(ref) == 40 else ref


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "n/a" if value is None else f"{value:{spec}}"


def markdown(data: Mapping[str, Any], chart_name: str) -> str:
    metric = data["metric"]
    if data["status"] == "found":
        kind = "commit" if data["mode"] == "git" else "release"
        head = f"# Bisect of {data['stack']}: first bad {kind} `{short(data['first_bad'])}`"
    else:
        head = f"# Bisect of {data['stack']}: {data['status']}"
    change = data.get("change")
    lines = [
        head,
        "",
        data["reason"] + ".",
        "",
        f"- metric: {metric['label']} ({metric['unit']}, {'higher' if metric['higher_is_better'] else 'lower'} "
        f"is better); good `{short(data['good'])}` -> bad `{short(data['bad'])}`"
        + (f": {change:+.1%}" if change is not None else ""),
        f"- range: {data['refs_in_range']} {'commits' if data['mode'] == 'git' else 'releases'} after the good "
        f"one ({data['source']}); {data['steps_tested']} tested, {data['builds']} built by this bisect",
        f"- samples: {data['runs_per_batch']} runs per server start, cache flushed before each run; "
        f"threshold {data['threshold']:.0%}",
        "",
        f"![{metric['label']} per tested ref: median, interquartile range and every run]({chart_name})",
        "",
        "| # | ref | subject | verdict | median | q1-q3 | runs | built |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for step in data["steps"]:
        verdict = step["verdict"] + (" (endpoint)" if step.get("endpoint") else "")
        if step["ref"] == data.get("first_bad"):
            verdict = f"**{verdict}: first bad**"
        spread = f"{_fmt(step['q1'])}-{_fmt(step['q3'])}" if step["samples"] else (step["skip"] or "")
        lines.append(f"| {step['index']} | `{short(step['ref'])}` | {step.get('subject') or ''} | {verdict} | "
                     f"{_fmt(step['median'])} | {spread} | {len(step['samples'])} | "
                     f"{'yes' if step['built'] else 'no'} |")
    if data["notes"]:
        lines += ["", "## Notes", "", *[f"- {n}" for n in data["notes"]]]
    timing = data.get("timing") or {}
    if timing:
        lines += ["", f"This run: {_fmt(timing.get('total_s'), '.0f')} s in all, builds "
                      f"{_fmt(timing.get('build_s'), '.0f')} s, smokes {_fmt(timing.get('smoke_s'), '.0f')} s, "
                      f"sglstack's own work {_fmt(timing.get('overhead_s'), '.1f')} s."]
    return "\n".join(lines) + "\n"


def chart_png(data: Mapping[str, Any]) -> bytes:
    """The metric per tested ref (in history order): every run as a dot, the median and the IQR."""
    # matplotlib takes a second to import: only a finished step's report needs it, never the CLI's start.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured: Sequence[Mapping[str, Any]] = [s for s in data["steps"] if s["samples"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(data["steps"]) + 2), 4.2), dpi=100)
    try:
        for x, step in enumerate(data["steps"]):
            color = STATUS_COLORS.get(step["verdict"], "#616161")
            if not step["samples"]:
                ax.axvspan(x - 0.4, x + 0.4, color=color, alpha=0.15, lw=0)
                continue
            n = len(step["samples"])
            jitter = [x + (i - (n - 1) / 2) * (0.5 / max(n, 1)) for i in range(n)]
            ax.scatter(jitter, step["samples"], s=9, color=color, alpha=0.5, lw=0)
            ax.errorbar([x], [step["median"]], yerr=[[step["median"] - step["q1"]], [step["q3"] - step["median"]]],
                        fmt="o", color=color, ms=7, capsize=5, lw=2)
            if step["ref"] == data.get("first_bad"):
                ax.axvline(x - 0.5, color=STATUS_COLORS["bad"], ls="--", lw=1)
        ax.set_xticks(range(len(data["steps"])))
        ax.set_xticklabels([f"{s['index']}\n{short(s['ref'])[:8]}" for s in data["steps"]], fontsize=8)
        metric = data["metric"]
        ax.set_ylabel(f"{metric['name']} ({metric['unit']})")
        ax.set_title(f"{data['stack']}: {metric['label']} per tested ref ({data['status']})", fontsize=10)
        if measured:
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(out, format="png")
        return out.getvalue()
    finally:
        plt.close(fig)
