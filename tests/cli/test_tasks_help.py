"""`-h` and `--help` are help in every task, whatever else is on the line; short flags are few and mean one thing.

Every task of `tasks.ns` is walked in process (an `SglstackProgram` over the collection, as `invoke` runs it
once `tasks.py` is loaded); the cases where help must beat the rest of the line run the real `invoke`.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from clirun import run_invoke, task_collection

from sglstack.cli.options import SHORT_FLAGS
from sglstack.cli.program import SglstackProgram

NS = task_collection()
TASKS = sorted(NS.task_names)
# An option's column in the help: `-s NAME, --stack NAME`, `--json`, `--[no-]eagle3`, `--mount HOST:CONTAINER[:ro]`.
FLAG_FORM = re.compile(r"-[a-z] \S+|-[a-z]|--(\[no-\])?[a-z][a-z0-9]*(-[a-z0-9]+)*( [^\s=-]\S*)?")


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        SglstackProgram(namespace=NS, binary="invoke").run(["invoke", *argv])
    code = exited.value.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def _option_columns(help_text: str) -> list[str]:
    options = help_text.split("\nOptions:\n", 1)[1]
    return [re.split(r"\s{2,}", line.strip())[0] for line in options.splitlines() if line.startswith("  -")]


def test_every_task_is_walked():
    assert len(TASKS) > 25 and {"smoke", "render", "diff", "patches.apply", "registry.up"} <= set(TASKS)


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("task", TASKS)
def test_every_task_has_h_and_help(task, flag, capsys):
    code, out, err = _run([task, flag], capsys)
    assert (code, err) == (0, "")
    assert task in out.splitlines()[0].split()  # the usage line names the task
    columns = _option_columns(out)
    longs = {"--" + arg.names[0] for arg in NS[task].get_arguments()}
    assert {col.split(", ")[-1].split(" ")[0].replace("[no-]", "") for col in columns} == longs
    for column in columns:  # no empty flag (`--=STRING`) and no short flag but the chosen ones
        for form in column.split(", "):
            assert FLAG_FORM.fullmatch(form), f"{task}: {column!r}"


def test_a_short_flag_means_one_option_in_every_task():
    meanings: dict[str, set[str]] = defaultdict(set)
    for task in TASKS:
        for arg in NS[task].get_arguments():
            for short in arg.nicknames:
                meanings[short].add(arg.names[0])
    assert meanings == {letter: {name} for name, letter in SHORT_FLAGS.items()}
    assert "h" not in meanings  # -h stays help


@pytest.mark.parametrize("args", [
    ["smoke", "-h"],  # was --min-accept-length's short flag
    ["render", "--stack", "s", "--out", "{out}", "-h"],  # rendered silently
    ["render", "--stack", "s", "--out", "{out}", "--bogus", "-h"],
    ["render", "--out", "{out}", "--stack", "-h"],  # -h taken as --stack's value
    ["bake", "--stack", "--help"],
    ["diff", "-h"],
    ["patches.apply", "-h"],
    ["patches.apply", "--root", "-h"],  # the usage names patches.apply, not apply
    ["verify-image", "x:1", "--verify-key", "--help"],
])
def test_help_wins_over_the_rest_of_the_line(tmp_path, args):
    out = tmp_path / "out"
    proc = run_invoke(*[arg.format(out=out) for arg in args], cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert args[0] in proc.stdout.splitlines()[0].split()  # the usage line names the task, in full
    assert not out.exists()


@pytest.mark.parametrize(("task", "flag"), [("publish", "--digest DIGEST"), ("render", "--stack NAME"),
                                            ("smoke", "--image IMAGE")])
def test_task_help_after_the_task_name(tmp_path, task, flag):
    proc = run_invoke(task, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert flag in proc.stdout


def test_a_missing_required_option_is_one_line_naming_it(tmp_path):
    proc = run_invoke("publish", "--stack", "cu130", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: publish: missing required option --digest"
