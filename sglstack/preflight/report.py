"""The host's view of a preflight report: a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .checks import FAIL, PASS, WARN
from .node import NodeReport

_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red"}


def render_report(report: NodeReport, console: Console, *, where: str = "this node") -> None:
    node = report.node
    title = f"preflight: stack {report.requirements.stack or '-'} on {where}"
    caption = ", ".join(f"{k} {node[k]}" for k in ("hostname", "driver", "torch", "nccl", "date") if node.get(k))
    table = Table(title=title, caption=caption or None)
    for column in ("check", "status", "value", "threshold", "detail"):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        style = _STYLE.get(check.status, "")
        table.add_row(check.name, f"[{style}]{check.status.upper()}[/]", check.value, check.threshold, check.detail)
    console.print(table)
    console.print(f"preflight [{_STYLE[report.status]}]{report.status.upper()}[/]")
