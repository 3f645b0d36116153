"""The one option system of the face: a dataclass of typed options -> an invoke task with the house's errors.

In process: the task is called as invoke calls it, with the values its parser produced.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest
from invoke import Context, Exit

from sglstack.cli.options import command
from sglstack.config.defaults import DEFAULT_STACKS_FILE
from sglstack.core.errors import ConfigError
from sglstack.core.options import RAW, TaskOptions, option, repeatable, required, stacks_file_option
from sglstack.core.signals import Interrupted


@dataclass(frozen=True)
class ProbeOptions(TaskOptions):
    stack: str = required("the stack")
    stacks_file: str = stacks_file_option()
    count: int = option("a count", 1, kind=int)
    repeats: int = option("runs, typed by invoke", 5, kind=RAW)
    tag: tuple[str, ...] = repeatable("a tag (repeatable)")
    as_: str | None = option("a new name")


SEEN: list[ProbeOptions] = []
RAISE: list[BaseException] = []


@command(ProbeOptions, name="probe")
def probe_task(o: ProbeOptions) -> int:
    """Record the options; exit 3."""
    SEEN.append(o)
    if RAISE:
        raise RAISE.pop()
    return 3


def _call(**values) -> int:
    with pytest.raises(Exit) as caught:
        probe_task(Context(), **values)
    return caught.value.code


def test_the_task_gets_typed_options_and_the_default_stacks_file():
    assert _call(stack="s", count="2", tag=["a", "b"], as_="new") == 3
    assert SEEN[-1] == ProbeOptions(stack="s", stacks_file=str(DEFAULT_STACKS_FILE), count=2, repeats=5,
                                    tag=("a", "b"), as_="new")


def test_the_flags_help_and_repeatables_come_from_the_dataclass():
    assert probe_task.name == "probe"
    assert probe_task.help == {"stack": "the stack", "stacks-file": "the matrix file", "count": "a count",
                               "repeats": "runs, typed by invoke", "tag": "a tag (repeatable)", "as": "a new name"}
    assert probe_task.iterable == ["tag"]
    assert probe_task.positional == []
    # invoke types a RAW option by its default (an =INT flag); the others arrive as text and are parsed here
    defaults = {arg.name: arg.default for arg in probe_task.get_arguments()}
    assert defaults["repeats"] == 5 and defaults["count"] is None


def test_a_missing_required_option_is_one_line_and_exit_2(capsys):
    assert _call(count="2") == 2
    assert capsys.readouterr().err == "error: probe.task: missing required option --stack\n"


def test_a_malformed_number_is_one_line_naming_the_flag(capsys):
    assert _call(stack="s", count="two") == 2
    assert capsys.readouterr().err == "error: --count 'two': not a whole number\n"


def test_an_sglstack_error_is_its_one_line_and_its_exit_code(capsys):
    RAISE.append(ConfigError("bad input here"))
    assert _call(stack="s") == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {ConfigError('bad input here')}"]


@pytest.mark.parametrize(("exc", "code", "name"), [(KeyboardInterrupt(), 130, "SIGINT"),
                                                   (Interrupted(signal.SIGTERM), 143, "SIGTERM")])
def test_a_signal_is_cleaned_up_and_exits_128_plus_n(capsys, exc, code, name):
    RAISE.append(exc)
    assert _call(stack="s") == code
    assert capsys.readouterr().err == f"interrupted ({name}): cleaned up\n"


@dataclass(frozen=True)
class ExclusiveOptions(TaskOptions):
    exactly_one = (("stack", "patch"),)
    at_most_one = (("digest", "image"),)
    stack: str | None = option("a stack")
    patch: str | None = option("a patch")
    digest: str | None = option("a digest")
    image: str | None = option("an image")
    dry_run: bool = option("no changes", False, kind=bool)


@pytest.mark.parametrize(("values", "problem"), [
    ({"stack": "s"}, None),
    ({"patch": "p", "digest": "d", "dry_run": True}, None),
    ({}, "give exactly one of --stack or --patch"),
    ({"stack": "s", "patch": "p"}, "give exactly one of --stack or --patch"),
    ({"stack": "s", "digest": "d", "image": "i"}, "give --digest or --image, not both"),
])
def test_options_that_exclude_each_other(values, problem):
    assert ExclusiveOptions.combination_problem(values) == problem
