"""The smoke: serve an image with and without EAGLE-3 on one Docker host (or, with the process runner,
a Python environment as local processes), measure, gate, report.

plan (pure: options, the two launches' argv) -> runner (containers, requests) -> measure + gates (pure)
-> history (append-only JSON lines) -> report (JSON, Markdown, PNG chart).
"""

from __future__ import annotations

from .launch import launch_argvs
from .overrides import smoke_options
from .plan import SmokeOptions
from .report import SmokeReport
from .runner import run_smoke

__all__ = ["SmokeOptions", "SmokeReport", "launch_argvs", "run_smoke", "smoke_options"]
