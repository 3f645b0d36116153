"""`invoke smoke --bisect-exit BASELINE`: one commit's verdict for `git bisect run` (0 good, 1 bad, 125 skip,
128 abort on bad input), from a smoke measured against the good commit's report or a known-good value."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.matrix import DEFAULT_STACKS_FILE, load_matrix
from ..core.errors import EXIT_ABORT_GIT_BISECT, ConfigError, SglstackError, one_line, shown
from ..core.inputs import read_json
from ..smoke import run_smoke, smoke_options
from . import metrics as metrics_mod
from .driver import BisectInputError, Log, _stdout

__all__ = ["EXIT_ABORT_GIT_BISECT", "smoke_bisect_exit"]


def smoke_bisect_exit(image: str, baseline: str, *, stack: str | None = None,
                      stacks_file: str | Path = DEFAULT_STACKS_FILE, metric: str = "baseline", threshold: str = "5",
                      runs: int | str | None = None, log: Log | None = None, **overrides: Any) -> int:
    """`invoke smoke --bisect-exit BASELINE`: 0 good, 1 bad, 125 skip, for `git bisect run`.

    BASELINE is the good commit's smoke report (JSON, with its runs: a statistical decision) or a number
    (the metric's known-good value: a threshold decision). The smoke runs `runs` (default 5) measured runs
    with the cache flushed, starting only the servers the metric needs. Bad input aborts the bisect
    (exit 128) rather than marking a commit bad.
    """
    say = log or _stdout
    try:
        # Everything the verdict compares against is checked before the smoke: a value that cannot be
        # judged against must abort the bisect (128), never come out as "bad" (1) after minutes of serving.
        chosen = metrics_mod.metric_named(metric)
        limit = bisect_exit_threshold(threshold)
        count = bisect_exit_runs(runs)
        reference, value = bisect_exit_baseline(baseline, chosen)
        stack_obj = load_matrix(stacks_file).get(stack) if stack else None
        options = smoke_options(stack_obj, **{**{k: v for k, v in overrides.items() if v is not None},
                                              "kinds": chosen.kinds, "runs": count, "flush_cache": True,
                                              "no_history": True})
        report = run_smoke(stack_obj, image, options)
        code = metrics_mod.bisect_exit_code(report.data, chosen, baseline_report=reference, baseline=value,
                                            threshold=limit)
        values = metrics_mod.samples(report.data, chosen)
        word = {0: "good", 1: "bad", 125: "skip"}[code]
    except (SglstackError, ValueError) as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_ABORT_GIT_BISECT
    except Exception as exc:  # a crash is no verdict: a traceback (exit 1) would mark the commit bad
        print(f"error: --bisect-exit cannot judge this commit: {type(exc).__name__}: {one_line(str(exc))}",
              file=sys.stderr)
        return EXIT_ABORT_GIT_BISECT
    say(f"bisect-exit {code} ({word}): {chosen.name} "
        + (f"median {sorted(values)[len(values) // 2]:.2f} {chosen.unit}" if values
           else metrics_mod.why_no_samples(report.data, chosen)))
    return code


def bisect_exit_threshold(text: str | float) -> float:
    """`--threshold PCT` as a fraction: finite, above 0 and below 100 (a drop of 100% or more can't be)."""
    try:
        pct = float(text)
    except (TypeError, ValueError):
        raise BisectInputError(f"--threshold '{text}': not a number (a percentage, 5 = 5%)") from None
    if not math.isfinite(pct) or not 0 < pct < 100:
        raise BisectInputError(f"--threshold '{text}': a percentage above 0 and below 100 (5 = 5%)")
    return pct / 100


def bisect_exit_runs(runs: int | str | None) -> int:
    if runs is None or runs == "":
        return 5
    try:
        count = int(runs)
    except (TypeError, ValueError):
        raise BisectInputError(f"--runs '{runs}': not a whole number") from None
    if not 1 <= count <= 1000:
        raise BisectInputError(f"--runs {count}: between 1 and 1000 measured runs")
    return count


def bisect_exit_baseline(baseline: str, metric: metrics_mod.Metric) -> tuple[Mapping[str, Any] | None, float | None]:
    """(the good commit's smoke report, None) or (None, a known-good value); bad input raises, naming it."""
    try:
        value = float(baseline)
    except ValueError:
        value = None
    if value is not None:
        if not math.isfinite(value) or value <= 0:
            raise BisectInputError(f"--bisect-exit '{shown(baseline)}': a known-good {metric.name} value must be "
                                   f"a finite positive number")
        return None, value
    try:
        # bounded: a report nested thousands deep, a FIFO or a huge file must abort (128), not crash (1 = bad)
        reference = read_json(baseline, what="smoke report")
    except ConfigError as exc:
        raise BisectInputError(f"--bisect-exit {baseline}: not a number or a smoke report: {exc.reason}") from None
    try:
        if not metrics_mod.samples(reference, metric):
            raise BisectInputError(f"--bisect-exit {baseline}: the baseline report has no {metric.name} samples")
    except metrics_mod.MalformedReport as exc:
        raise BisectInputError(f"--bisect-exit {baseline}: not a smoke report: {exc}") from None
    return reference, None
