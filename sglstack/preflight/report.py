"""The host's view of a preflight report: a rich table."""

from __future__ import annotations

from rich.console import Console

from ..core.console import plain, report_table
from ..inimage.preflight.checks import FAIL, PASS, WARN
from ..inimage.preflight.node import NodeReport

_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red"}


def render_report(report: NodeReport, console: Console, *, where: str = "this node") -> None:
    node = report.node
    title = f"preflight: stack {report.requirements.stack or '-'} on {plain(where)}"
    caption = ", ".join(f"{k} {plain(node[k])}" for k in ("hostname", "platform", "driver", "torch", "nccl", "date")
                        if node.get(k))
    table = report_table(("check", "status", "value", "threshold", "detail"), title=title, caption=caption or None)
    for check in report.checks:
        style = _STYLE.get(check.status, "")
        table.add_row(plain(check.name), f"[{style}]{plain(check.status.upper())}[/]", plain(check.value),
                      plain(check.threshold), plain(check.detail))
    console.print(table)
    console.print(f"preflight [{_STYLE[report.status]}]{report.status.upper()}[/]")
