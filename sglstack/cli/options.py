"""The invoke glue, written once: a task from an options dataclass and one function.

`@command(Options)` turns `def task(o: Options) -> int | None` into an invoke task whose flags, help and
repeatable options come from the dataclass (`sglstack.core.options`), with no short flags but the few of
`SHORT_FLAGS` (one meaning in every task; invoke's automatic ones gave a letter a meaning per task, took `-h`
from help and made a `--` flag of an option whose letters were all taken), and whose errors are the house's:
a missing required option, options that exclude each other or an sglstack error is one line on stderr and
its exit code (2 for bad input), SIGTERM and SIGHUP unwind like Ctrl-C so every task's cleanup runs, and the
exit code is then 128+N.
Standard library and invoke only: invoke imports this when it loads `tasks.py`, for every call.
"""

from __future__ import annotations

import dataclasses
import errno
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from invoke import Argument, Exit, Task
from invoke import task as invoke_task

from ..config.defaults import default_stacks_file
from ..core.errors import EXIT_ABORT_GIT_BISECT, SglstackError, one_line, shown
from ..core.options import ReportOptions, TaskOptions
from ..core.signals import exit_code_of, signals_raise

Opts = TypeVar("Opts", bound=TaskOptions)
HELP_FLAGS = ("--help", "-h")
# The only short flags, each with one meaning in every task that has the option (README, "Tasks");
# `-h` is invoke's own short for --help. Test: tests/cli/test_tasks_help.py.
SHORT_FLAGS = {"stack": "s", "output": "o"}


class _Positional(Argument):
    """A positional argument that takes `--help` / `-h` as a request for help, not as its value.

    invoke fills pending positional arguments before it looks at flags, so without this `invoke diff --help`
    would become BEFORE='--help' and then fail for want of AFTER; filled with `--help`, every positional
    argument of the task asks for its help (`sglstack.cli.program` prints it).
    """

    siblings: list[Argument]

    def set_value(self, value, cast=True):
        if value in HELP_FLAGS:
            for arg in self.siblings:
                Argument.set_value(arg, HELP_FLAGS[0], cast=False)
            return
        super().set_value(value, cast)


class _Task(Task):
    """A task whose only short flags are `SHORT_FLAGS`."""

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        if name in SHORT_FLAGS:
            opts["names"] = [*opts["names"], SHORT_FLAGS[name]]
        return opts


class _PositionalTask(_Task):
    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        positional = [arg for arg in args if arg.positional]
        for arg in positional:
            arg.__class__ = _Positional
            arg.siblings = positional  # type: ignore[attr-defined]  # the class is _Positional now
        return args


def _missing(options: type[TaskOptions], values: dict[str, Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(options)  # type: ignore[arg-type]
            if f.default is dataclasses.MISSING and values.get(f.name) is None]


def _typed(options: type[Opts], values: dict[str, Any]) -> Opts:
    parsed = options.from_cli(values)
    if getattr(parsed, "stacks_file", "") is None:
        parsed = dataclasses.replace(parsed, stacks_file=str(default_stacks_file()))  # type: ignore[type-var]
    return parsed


def _run(what: str, call: Callable[[], int | None]) -> None:
    try:
        # SIGTERM and SIGHUP unwind like Ctrl-C, so every task's cleanup runs for all three.
        with signals_raise():
            code = call()
    except SglstackError as exc:
        # Errors quote outside values (a label, a server's reply, a file name): one line, no terminal escapes.
        # An error of several findings (a draft that misfits in two ways) is one such line per finding.
        for line in getattr(exc, "lines", None) or (str(exc),):
            print(f"error: {one_line(line)}", file=sys.stderr)
        raise Exit(code=exc.exit_code) from None
    except OSError as exc:
        # A path the OS refuses that no check of ours caught (a name over 255 bytes, a loop of links): one
        # line naming it, bad input when the name itself is what is wrong.
        name = f"{shown(one_line(str(exc.filename)), 80)}: " if exc.filename is not None else ""
        print(f"error: {name}{one_line(exc.strerror or str(exc))}", file=sys.stderr)
        raise Exit(code=2 if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP) else 1) from None
    except KeyboardInterrupt as exc:
        code = exit_code_of(exc)
        print(f"interrupted ({signal.Signals(code - 128).name}): cleaned up", file=sys.stderr)
        raise Exit(code=code) from None
    if code:
        raise Exit(code=code)


def _reporting(fn: Callable[..., int | None], o: ReportOptions, what: str) -> int | None:
    """A reporting task: `--json` / `--json-out` checked before any work, then `fn(o, report)` with its
    stdout kept for the JSON alone under `--json`."""
    from .reporting import json_report  # at call time: the checks read the matrix's folder layout

    report = json_report(o, what)
    with report.only_json_on_stdout():
        return fn(o, report)


def command(options: type[Opts], *, name: str | None = None,
            positional: Sequence[str] = ()) -> Callable[[Callable[..., int | None]], Task]:
    """The invoke task of `fn(options) -> exit code` (`fn(options, report)` for `ReportOptions`): every flag
    from `options`, none positional but `positional` (a required option left positional would swallow
    `invoke TASK --help` as its value)."""

    def decorate(fn: Callable[..., int | None]) -> Task:
        # patches_apply: the task patches.apply; verify_image: verify-image
        what = name if name == fn.__name__.replace("_", "-") else fn.__name__.replace("_", ".")

        def body(c, *args, **values):
            values.update(zip(list(options.task_signature().parameters)[1:], args, strict=False))
            defaults = {f.name: f.default for f in dataclasses.fields(options)}  # type: ignore[arg-type]
            if empty := [name for name, value in values.items()
                         if (value == "" and defaults.get(name) != "") or (isinstance(value, list) and "" in value)]:
                # `--verify-key "$KEY"` with KEY unset must not read as no --verify-key (nor --out '' as the
                # default folder): an empty value names nothing
                code = EXIT_ABORT_GIT_BISECT if values.get("bisect_exit") is not None else 2
                print(f"error: {what}: option --{empty[0].replace('_', '-')} is empty (give a value, or leave the "
                      "option out)", file=sys.stderr)
                raise Exit(code=code)
            missing = _missing(options, values)
            if missing:
                flags = ", ".join("--" + name.replace("_", "-") for name in missing)
                print(f"error: {what}: missing required option {flags}", file=sys.stderr)
                raise Exit(code=2)
            if problem := options.combination_problem(values):
                print(f"error: {what}: {problem}", file=sys.stderr)
                raise Exit(code=2)
            if issubclass(options, ReportOptions):
                _run(what, lambda: _reporting(fn, _typed(options, values), what))
            else:
                _run(what, lambda: fn(_typed(options, values)))

        body.__name__, body.__doc__ = fn.__name__, fn.__doc__
        body.__signature__ = options.task_signature()  # type: ignore[attr-defined]
        made = invoke_task(klass=_PositionalTask if positional else _Task, name=name, positional=list(positional),
                           help=options.task_help(), iterable=options.repeatable_names(),
                           auto_shortflags=False)(body)
        made.options = options  # for the walk of tests/cli/test_option_names.py
        return made

    return decorate
