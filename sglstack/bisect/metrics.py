"""The metrics a bisect can follow, and their samples in a smoke report (pure).

A sample is one measured run of a server start (`SmokeOptions.runs`); the report lists them under each
server's `runs`. Every metric here is better when higher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import did_you_mean
from . import stats


@dataclass(frozen=True)
class Metric:
    name: str
    kinds: tuple[str, ...]  # the servers a smoke of this metric starts
    label: str
    unit: str
    higher_is_better: bool = True


METRICS = {
    # No draft model and no EAGLE-3 support needed: old commits and releases can be tested.
    "baseline": Metric("baseline", ("baseline",), "baseline decode speed", "tok/s"),
    "eagle3": Metric("eagle3", ("eagle3",), "EAGLE-3 decode speed", "tok/s"),
    "speedup": Metric("speedup", ("baseline", "eagle3"), "EAGLE-3 speedup over the baseline", "x"),
    "accept_length": Metric("accept_length", ("eagle3",), "EAGLE-3 accept length", "tokens/step"),
}


def metric_named(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric '{name}' (choose from {', '.join(METRICS)}){did_you_mean(name, METRICS)}"
                         ) from None


class MalformedReport(ValueError):
    """A smoke report whose shape or values are not what smoke writes (a hand edit, a truncated file)."""


def measured_value(value: Any, where: str) -> float:
    """A sample as a finite, positive number: anything else is a malformed report, never a verdict."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReport(f"{where}: {value!r} is not a number")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise MalformedReport(f"{where}: {value!r} is not a finite positive number")
    return number


def _runs(server: Any, kind: str = "server") -> list[Mapping[str, Any]]:
    """The measured runs of one server; a report without `runs` counts as its one concurrency-1 run."""
    if server is None:
        return []
    if not isinstance(server, Mapping):
        raise MalformedReport(f"'{kind}' is {type(server).__name__}, not an object")
    if not server.get("started"):
        return []
    runs = server.get("runs")
    if runs is None:
        runs = [{"tokens_per_s": server.get("tokens_per_s"), "completed": server.get("completed", 1),
                 "accept_length": server.get("accept_length_meta")}]
    if not isinstance(runs, list) or not all(isinstance(r, Mapping) for r in runs):
        raise MalformedReport(f"'{kind}.runs' is not a list of objects")
    kept = [r for r in runs if r.get("completed") and r.get("tokens_per_s") is not None]
    for i, r in enumerate(kept):
        measured_value(r["tokens_per_s"], f"'{kind}.runs[{i}].tokens_per_s'")
        if r.get("accept_length") is not None:
            measured_value(r["accept_length"], f"'{kind}.runs[{i}].accept_length'")
    return kept


def samples(report: Mapping[str, Any], metric: Metric) -> list[float]:
    """One value per run; [] when a server the metric needs did not start or measured nothing.

    `MalformedReport` (a ValueError) when the report is not shaped as smoke writes it, or a sample is not
    a finite positive number: a caller must not read that as a measurement."""
    if not isinstance(report, Mapping):
        raise MalformedReport(f"the report is {type(report).__name__}, not an object")
    if metric.name == "baseline":
        return [float(r["tokens_per_s"]) for r in _runs(report.get("baseline"), "baseline")]
    if metric.name == "eagle3":
        return [float(r["tokens_per_s"]) for r in _runs(report.get("eagle3"), "eagle3")]
    if metric.name == "accept_length":
        return [float(r["accept_length"]) for r in _runs(report.get("eagle3"), "eagle3") if r.get("accept_length")]
    # speedup: run i of the EAGLE-3 server over run i of the baseline server, the same prompts in order
    base, spec = _runs(report.get("baseline"), "baseline"), _runs(report.get("eagle3"), "eagle3")
    return [float(e["tokens_per_s"]) / float(b["tokens_per_s"]) for b, e in zip(base, spec, strict=False)]


def why_no_samples(report: Mapping[str, Any], metric: Metric) -> str:
    for kind in metric.kinds:
        server = report.get(kind) or {}
        if server.get("failure"):
            return f"the {kind} server did not serve: {server['failure']}"
        if not server.get("started"):
            return f"the {kind} server did not start"
    return f"no run of {', '.join(metric.kinds)} measured {metric.name}"


def bisect_exit_code(report: Mapping[str, Any], metric: Metric, *,
                     baseline_report: Mapping[str, Any] | None = None, baseline: float | None = None,
                     threshold: float = 0.05) -> int:
    """`git bisect run`'s 0 (good), 1 (bad) or 125 (skip) for a smoke report, against the good
    commit's smoke report (statistically) or a fixed baseline value; see stats.bisect_exit_code."""
    measured = samples(report, metric)
    reference = samples(baseline_report, metric) if baseline_report is not None else None
    if baseline_report is not None and not reference:
        raise ValueError(f"the baseline report has no {metric.name} samples")
    return stats.bisect_exit_code(measured, reference, baseline=baseline, threshold=threshold,
                                  higher_is_better=metric.higher_is_better)
