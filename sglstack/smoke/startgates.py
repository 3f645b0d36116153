"""Pure gates on a server's start: the warm start's time and compiles, and the cold start against the last
passing run. Each failure is one line that starts with the gate's name, as in `gates`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.settings import StartGates
from .measure import ServerRun

LABELS = {"baseline": "baseline", "eagle3": "EAGLE-3"}


def start_failures(gates: StartGates, cold: Mapping[str, ServerRun], warm: Mapping[str, ServerRun] | None,
                   last_pass: Mapping[str, Any] | None) -> list[str]:
    """The start gates' failures: warm starts (when measured) and the cold start's regression."""
    out: list[str] = []
    for kind, run in (warm or {}).items():
        label = LABELS.get(kind, kind)
        if run.failure:
            out.append(f"warm start: {label}: {run.failure}")
            continue
        if gates.max_warm_start_s is not None and run.startup_s is not None \
                and run.startup_s > gates.max_warm_start_s:
            out.append(f"max_warm_start_s: the {label} warm start took {run.startup_s:.1f}s to healthy, over "
                       f"{gates.max_warm_start_s:g}s")
        cache = run.kernel_cache or {}
        if gates.no_warm_compile and (cache.get("new_files") or cache.get("rewritten_files")):
            first = ", ".join([*(cache.get("new_files_first") or []), *(cache.get("rewritten_files_first") or [])])
            out.append(f"no_warm_compile: the {label} warm start compiled: {cache.get('new_files', 0)} new and "
                       f"{cache.get('rewritten_files', 0)} rewritten kernel cache files ({first})")
    if gates.max_start_regression is not None and last_pass:
        for kind, run in cold.items():
            before = (last_pass.get(kind) or {}).get("startup_s")
            if not before or run.startup_s is None or not run.started:
                continue
            slower = run.startup_s / before - 1.0
            if slower > gates.max_start_regression:
                out.append(f"max_start_regression: the {LABELS.get(kind, kind)} start took {run.startup_s:.1f}s to "
                           f"healthy, {slower:.0%} over the last passing run's {before:.1f}s "
                           f"({last_pass.get('time', '?')}), more than {gates.max_start_regression:.0%}")
    return out


def warm_saving(cold: ServerRun, warm: ServerRun) -> float | None:
    """The share of the cold start to healthy the warm start saved (None: either did not start)."""
    if not (cold.startup_s and warm.startup_s is not None and warm.started):
        return None
    return 1.0 - warm.startup_s / cold.startup_s
