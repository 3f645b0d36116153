"""Slow tasks show where they are through one helper (`core/progress.py`): a bar on a terminal's stderr,
nothing at all where stderr is a pipe or a log."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from rich.console import Console

from sglstack.core import progress as progress_module
from sglstack.core.progress import progress

PACKAGE = Path(__file__).resolve().parents[2] / "sglstack"
# The tasks that can work for more than a few seconds, by the module that runs their slow part.
SLOW = {
    "releases": "upgrade/releases.py", "upgrade": "upgrade/command.py", "coverage": "coverage/stack.py",
    "lock": "cli/lock.py", "size": "size/stack.py", "patches.check": "patches/host.py",
    "preflight": "preflight/gate.py",
}


def test_nothing_is_shown_when_stderr_is_not_a_terminal(capsys):
    with progress("coverage of cu130", total=2) as steps:
        steps.working_on("fetching sgl-kernel")
        steps.advance()
        steps.add_total(1)
    assert capsys.readouterr() == ("", "")


def test_a_terminal_sees_the_item_in_hand(monkeypatch):
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=100, color_system=None)
    monkeypatch.setattr(progress_module, "console", lambda stderr=False: terminal)
    with progress("coverage of cu130", total=2) as steps:
        steps.working_on("fetching [bold]sgl-kernel")  # an outside value: markup shown as text
        steps.advance()
    shown = screen.getvalue()
    assert "coverage of cu130: fetching [bold]sgl-kernel" in shown
    assert "1/2" in shown


def test_every_slow_task_reports_through_the_one_helper():
    for task, module in SLOW.items():
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert ("core.progress", "progress") in imported, task
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "progress"]
        assert calls, task
