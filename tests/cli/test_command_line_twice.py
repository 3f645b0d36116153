"""A command line that invoke parses into something else than was typed is refused naming the flag (attack pass
of issue 34): an option given twice (invoke keeps the first value and called the second an unexpected argument),
a value for a flag that takes none, and words after `--`, which invoke keeps for the task and no task reads."""

from __future__ import annotations

import pytest
from clirun import run_invoke


@pytest.mark.parametrize(("args", "line"), [
    (["render", "--out", "{out}", "--stack", "cu129", "--stack", "cu130"],
     "error: render: option --stack given twice ('cu130' is its second value; it takes one)"),
    (["render", "--out", "{out}", "-s", "cu129", "--stack=cu130"],
     "error: render: option --stack given twice ('cu130' is its second value; it takes one)"),
    (["build", "--stack", "cu130", "--dry-run=yes"],
     "error: build: option --dry-run takes no value (give it alone, without '=yes')"),
    (["render", "--stack", "cu130", "--out", "{out}", "--", "extra"],
     "error: no task takes arguments after '--' (got 'extra')"),
])
def test_a_command_line_invoke_would_read_otherwise_is_refused(tmp_path, args, line):
    proc = run_invoke(*[arg.format(out=tmp_path / "out") for arg in args], cwd=tmp_path, timeout=120,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")})
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert list(tmp_path.iterdir()) == []


def test_help_still_wins_over_words_after_the_double_dash(tmp_path):
    proc = run_invoke("render", "--stack", "cu130", "-h", "--", "x", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: inv[oke] [--core-opts] render [--options]")
    assert list(tmp_path.iterdir()) == []
