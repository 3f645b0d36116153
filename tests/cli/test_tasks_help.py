"""`invoke TASK --help` shows the task's options, also for tasks with required options."""

from __future__ import annotations

import pytest
from clirun import run_invoke


@pytest.mark.parametrize(("task", "flag"), [("publish", "--digest"), ("render", "--stack"), ("smoke", "--image")])
def test_task_help_after_the_task_name(tmp_path, task, flag):
    proc = run_invoke(task, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{flag}=STRING" in proc.stdout


def test_a_missing_required_option_is_one_line_naming_it(tmp_path):
    proc = run_invoke("publish", "--stack", "cu130", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: publish: missing required option --digest"
