"""One name for one meaning across tasks (issue 43): the renamed options, the table of names, the help."""

from __future__ import annotations

import pytest
from clirun import run_invoke

from sglstack.cli.optionnames import RENAMED

POSITIONAL = {"sbom": ("reg.example/x:1",), "verify-image": ("reg.example/x:1",)}
RENAMES = [(task, old, new) for task, names in sorted(RENAMED.items()) for old, new in sorted(names.items())]


@pytest.mark.parametrize(("task", "old", "new"), RENAMES)
def test_an_old_spelling_is_one_line_naming_the_new_option(tmp_path, task, old, new) -> None:
    proc = run_invoke(task, *POSITIONAL.get(task, ()), old, "x", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {task}: option {old} is now {new}\n")


def test_an_old_spelling_under_git_bisect_run_aborts_the_bisect(tmp_path) -> None:
    """Exit 2 would mark the commit bad: a typo under `smoke --bisect-exit` aborts (128), as every other does."""
    proc = run_invoke("smoke", "--bisect-exit", "5", "--bisect-threshold", "3", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (128, "error: smoke: option --bisect-threshold is now --threshold\n")


@pytest.mark.parametrize("flag", ["--runs", "--max-batches"])
def test_a_count_that_is_not_a_number_is_one_line(tmp_path, flag) -> None:
    """invoke's own int conversion ended in a traceback (and exit 1)."""
    proc = run_invoke("bisect", "--stack", "a", "--good", "a", "--bad", "b", flag, "x", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {flag} 'x': not a whole number\n")
