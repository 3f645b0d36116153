"""`invoke smoke`: serve an image with and without EAGLE-3 on one Docker host (or, with the process runner,
a Python environment as local processes), measure, gate, report.

plan (pure: options, the two launches' argv) -> runner (containers, requests) -> measure + gates (pure)
-> history (append-only JSON lines) -> report (JSON, Markdown, PNG chart).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.matrix import DEFAULT_STACKS_FILE, load_matrix
from ..core.errors import one_line
from ..core.jsonreport import NO_JSON, JsonReport
from .launch import launch_argvs
from .plan import SmokeOptions, smoke_options
from .report import SmokeReport
from .runner import run_smoke

__all__ = ["SmokeOptions", "SmokeReport", "launch_argvs", "run_smoke", "smoke_command", "smoke_options"]


def smoke_command(
    image: str | None, *, stack: str | None = None, stacks_file: str | Path = DEFAULT_STACKS_FILE,
    as_json: JsonReport = NO_JSON, **overrides: Any
) -> int:
    """The `invoke smoke` task: 0 only when every gate passed; the JSON report is `--report`'s document."""
    stack_obj = load_matrix(stacks_file).get(stack) if stack else None
    options = smoke_options(stack_obj, **overrides)
    report = run_smoke(stack_obj, image, options)
    data = report.data
    as_json.emit(data)
    runner = (data.get("runner") or {}).get("kind", "docker")
    served = image or data["image"]["ref"]
    shown = data["image"].get("digest") or data["image"].get("id")  # a local build has no registry digest
    print(f"smoke {report.verdict.upper()}: {served} ({shown}, {runner} runner)")
    b, e = data["baseline"], data["eagle3"]
    speedup = f"{data['speedup']:.2f}x" if data["speedup"] is not None else "n/a"
    accept = f"{data['accept_length']:.2f}" if data["accept_length"] is not None else "n/a"
    agree = f"{data['agreement']:.0%}" if data["agreement"] is not None else "n/a"
    print(
        f"  baseline {b['tokens_per_s']:.1f} tok/s, EAGLE-3 {e['tokens_per_s']:.1f} tok/s, speedup {speedup}, "
        f"accept length {accept}, agreement {agree}"
    )
    for kind, run in (data.get("warm") or {}).items():
        cold, saving = data[kind].get("startup_s"), run.get("saving")
        new = (run.get("kernel_cache") or {}).get("new_files")
        print(f"  {kind} start: cold {cold or 0:.1f}s, warm {run.get('startup_s') or 0:.1f}s"
              + (f" (saved {saving:.0%})" if saving is not None else "") + f", {new} new kernel cache files")
    for row in data.get("levels") or []:
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "n/a"
        print(f"  concurrency {row['concurrency']}: speedup {speedup} ({row['measure']})")
    if data.get("crossover_line"):
        print(f"  {data['crossover_line']}")
    for line in (data.get("sweep") or {}).get("recommendation", []):
        print(f"  best at {line}")
    for failure in report.failures:
        print(f"  FAIL {one_line(failure)}")
    return 0 if report.passed else 1
