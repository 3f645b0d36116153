"""One name for one meaning across tasks (issue 43): the renamed options, the table of names, the help."""

from __future__ import annotations

import dataclasses
import re
import shlex

import pytest
from clirun import REPO, run_invoke, task_collection

from sglstack.cli.optionnames import EXAMPLES, FLAG, NUMBERS, OPTIONS, RENAMED, option_uses, options_table
from sglstack.cli.program import SglstackProgram

NS = task_collection()
TASKS = sorted(NS.task_names)
# `--json` is a file path in some reporting tasks and a stdout flag in others until issue 36's convention
# (`--json` prints, `--json-out PATH` writes; branch "json") is merged: then this set is empty.
PENDING: set[str] = set()


def _arguments(task: str):
    return NS[task].get_arguments()


def _fields(task: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(NS[task].options)}

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


# ---- one table of names and meanings ------------------------------------------------------------------------

def test_every_option_of_every_task_has_its_one_meaning_declared() -> None:
    missing = [f"{task} --{arg.names[0]}" for task in TASKS for arg in _arguments(task) if arg.name not in OPTIONS]
    assert missing == [], "declare each one's meaning once in sglstack/cli/optionnames.py OPTIONS"


def test_one_name_is_a_flag_in_every_task_or_takes_a_value_in_every_task() -> None:
    """`--gpus` was a count in smoke and bisect and `--[no-]gpus` in deploy: one name, two meanings."""
    wrong = [f"{task} --{arg.names[0]}" for task in TASKS for arg in _arguments(task)
             if arg.name in OPTIONS and arg.name not in PENDING
             and (OPTIONS[arg.name].value == FLAG) == bool(arg.takes_value)]
    assert wrong == []


def test_a_number_is_declared_a_number_where_the_task_parses_one() -> None:
    wrong = [f"{task} --{name}" for task in TASKS for name, field in _fields(task).items()
             if field.metadata["kind"] in (int, float) and OPTIONS[name].value not in NUMBERS]
    assert wrong == []


def test_no_two_names_share_one_meaning() -> None:
    texts: dict[str, list[str]] = {}
    for name, meaning in OPTIONS.items():
        texts.setdefault(meaning.text, []).append(name)
    assert [names for names in texts.values() if len(names) > 1] == []


def test_no_task_keeps_a_spelling_it_renamed() -> None:
    kept = [f"{task} {old}" for task, names in RENAMED.items() for old in names
            if any(f"--{name}" == old for arg in _arguments(task) for name in arg.names)]
    assert kept == [] and set(RENAMED) <= set(TASKS)


def test_docs_options_md_is_written_from_the_code() -> None:
    assert (REPO / "docs" / "options.md").read_text() == options_table(option_uses(NS)), \
        "run: python3 scripts/options_table.py"


# ---- help that does not mislead -----------------------------------------------------------------------------

def _help(task: str, capsys) -> list[str]:
    SglstackProgram(namespace=NS, binary="invoke").run(["invoke", task, "--help"], exit=False)
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("task", TASKS)
def test_each_tasks_help_shows_every_value_and_one_example(task, capsys) -> None:
    lines = _help(task, capsys)
    assert lines[lines.index("Example:") + 1] == "  " + EXAMPLES[task]
    assert not [line for line in lines if "STRING" in line]
    section = lines[lines.index("Options:") + 1:lines.index("Example:")]
    specs = [line.strip().split("  ")[0] for line in section if line.startswith("  -")]
    for arg in _arguments(task):
        flag, value = f"--{arg.names[0]}", OPTIONS[arg.name].value
        row = next(spec for spec in specs if re.search(rf"(^|, ){re.escape(flag)}( |$)", spec)
                   or spec == f"--[no-]{arg.names[0]}")
        if arg.takes_value:  # a repeatable option too: never shown as if it were a flag
            assert row.endswith(f"{flag} {value or 'TEXT'}"), row
        else:
            assert row in (flag, f"--[no-]{arg.names[0]}"), row


@pytest.mark.parametrize("task", TASKS)
def test_each_example_names_its_task_and_only_its_options(task) -> None:
    words = shlex.split(EXAMPLES[task])
    assert words[:2] == ["invoke", task]
    flags = {f"--{name}" for arg in _arguments(task) for name in arg.names}
    assert [w for w in words if w.startswith("-") and w.partition("=")[0] not in flags and not w.startswith("-k")] \
        == []


def test_every_task_has_an_example_and_no_example_is_of_no_task() -> None:
    assert sorted(EXAMPLES) == TASKS
