"""The command line's own refusals: what invoke's parser rejects is bad input, one `error:` line and exit 2.

invoke reports an unknown task or option, a flag without its value and a missing positional argument as a
`ParseError`: its own wording, exit 1. `SglstackProgram` words them as every other refusal is worded (with
"did you mean" for a near-miss), exits 2, and lets `-h` / `--help` win over the rest of the line, also where
invoke took it for an option's value or a positional argument.

`invoke` is invoke's own Program, which loads `tasks.py` before it parses the tasks' options: `tasks.py` calls
`adopt_running_program()`, which gives that running Program this class (its hooks are plain methods, looked
up when they run). Standard library and invoke only: invoke imports this for every call.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from typing import NoReturn

from invoke import Exit, ParseError, Program

from ..core.errors import EXIT_ABORT_GIT_BISECT, did_you_mean
from .optionnames import EXAMPLES, FLOAT, INT, OPTIONS, renamed, renamed_elsewhere
from .options import HELP_FLAGS

# invoke's parser messages, matched to name what went wrong; any other (a newer wording) is passed on after
# `error: `, still exit 2. Test: tests/cli/test_command_line_refusals.py.
_UNKNOWN = re.compile(r"No idea what (?P<token>.+) is!")
_NO_VALUE = re.compile(r"Flag <\w+: (?P<name>\S+).*> needed value")
_POSITIONAL = re.compile(r"did not receive required positional arguments")


class SglstackProgram(Program):
    """invoke's Program with parse errors as bad input (exit 2, one line) and help before any of them."""

    def parse_core(self, argv) -> None:
        try:
            super().parse_core(argv)
        except ParseError as exc:  # a core flag without its value (`sglstack --stacks-file`; `invoke -f` is
            # parsed before tasks.py hands invoke this class)
            context, match = getattr(exc, "context", None), _NO_VALUE.search(str(exc))
            message = f"option --{context.args[match['name']].names[0]} needs a value" \
                if match and context is not None and match["name"] in context.args else str(exc)
            raise Exit(f"error: {message}", code=2) from None
        except ValueError:  # a core flag's number that is none (`--list-depth abc`): invoke's int() raised
            raise Exit(f"error: {_not_a_number(list(self.argv), self.core_args())}", code=2) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as exc:
            self._refuse(exc)
        for context in self.tasks:
            if context.name and any(_is_help(arg.value) for arg in context.args.values()):
                # `-h` taken as an option's value (`--stack -h`) or as a positional argument (`diff -h`)
                self.print_task_help(context.name)
                raise Exit
        asks_help = any(token in HELP_FLAGS for token in self.core.unparsed or [])
        if not asks_help and (bare := _bare_repeatable(self.core.unparsed, self.parser.contexts)):
            # invoke takes `--mount` with no value after it as no --mount at all
            raise Exit(f"error: {bare[0]}: option {bare[1]} needs a value", code=self._bad_input_code())
        remainder = getattr(self.core, "remainder", "")
        if remainder and not self.args.complete.value and not asks_help:
            # (`--complete -- LINE` is shell completion asking for candidates: LINE is what it completes)
            # invoke keeps what follows `--` for the task, and no task here reads it: it would be dropped
            raise Exit(f"error: no task takes arguments after '--' (got '{remainder}')", code=self._bad_input_code())

    def print_task_help(self, name: str) -> None:
        """invoke's task help, with each option's value as `OPTIONS` names it (`--port INT`, `--smoke-opt
        KEY=VALUE`: invoke shows a repeatable option as a flag and every number as STRING) and the task's
        example last."""
        ctx = self.parser.contexts[name]
        tuples = _help_tuples(ctx)
        docstring = inspect.getdoc(self.collection[name])
        print(f"Usage: {self.binary} [--core-opts] {name} {'[--options] ' if tuples else ''}[other tasks here ...]")
        print("")
        print("Docstring:")
        for line in (docstring or "none").splitlines():
            print(self.leading_indent + line if line.strip() else "")
        print("")
        print("Options:")
        if tuples:
            self.print_columns(tuples)
        else:
            print(self.leading_indent + "none")
            print("")
        if name in EXAMPLES:
            print("Example:")
            print(self.leading_indent + EXAMPLES[name])
            print("")

    def parse_cleanup(self) -> None:
        listing = self.args["list-format"].value
        if listing not in _LIST_FORMATS:  # invoke looks up a method named after it: an AttributeError
            raise Exit(f"error: option --list-format '{listing}': not one of {', '.join(_LIST_FORMATS)}"
                       f"{did_you_mean(listing, _LIST_FORMATS)}", code=2)
        listed = self.args.list.value
        if isinstance(listed, str):
            try:
                self.collection.subcollection_from_path(listed)
            except KeyError:  # invoke says "Sub-collection ... not found!" and exits 1
                known = self.collection.collections
                raise Exit(f"error: --list: no collection '{listed}' (known: {', '.join(sorted(known))})"
                           f"{did_you_mean(listed, known)}", code=2) from None
        try:
            super().parse_cleanup()
        except ParseError as exc:  # `--help NAME` of no task
            self._refuse(exc)

    def _refuse(self, exc: ParseError) -> NoReturn:
        context = getattr(exc, "context", None)
        task = context.name if context is not None and context.name in self.collection.task_names else None
        if task and any(token in HELP_FLAGS for token in self.core.unparsed):
            # `invoke render --stack cu130 --bogus -h`: the help asked for, not a complaint about the rest.
            self.print_task_help(task)
            raise Exit
        raise Exit(f"error: {self._explain(str(exc), task, context)}", code=self._bad_input_code())

    def _bad_input_code(self) -> int:
        """2, but under `git bisect run` (`smoke --bisect-exit`) 128: a typo there must abort the bisect, where
        2 would mark every commit bad."""
        argv = self.core.unparsed or []
        if any(token == "--bisect-exit" or token.startswith("--bisect-exit=") for token in argv):
            return EXIT_ABORT_GIT_BISECT
        return 2

    @property
    def _command(self) -> str:
        """What the user typed to run the tasks: `invoke` in a checkout, `sglstack` installed."""
        return next((name for name in getattr(self, "binary_names", None) or () if name), "invoke")

    def _explain(self, message: str, task: str | None, context) -> str:
        tasks = list(self.collection.task_names)
        core = list(self.initial_context.flags)
        where = f"{task}: " if task else ""
        if match := _UNKNOWN.fullmatch(message):
            token = _literal(match["token"])
            if token.startswith("-"):
                flag = token.partition("=")[0]
                if task and (why := renamed(task, flag)):
                    return f"{task}: {why}"
                # after a task, its own options only: a core flag (`--pty`, `--version`) is never what a task's
                # near-miss meant; a spelling another task renamed points to this task's name for it
                own = [*context.flags, *context.inverse_flags] if task else []
                if task and flag in ("--json", "--json-out"):  # not a near-miss of --on: an action has no report
                    return f"{task}: unknown option '{token}' ({task} is an action: it prints no report as JSON)"
                hint = renamed_elsewhere(flag, own) or did_you_mean(flag, own) if task else did_you_mean(flag, core)
                return f"{where}unknown option '{token}'{hint}"
            if task and (why := _old_json_form(self.core.unparsed or [], token, context)):
                return f"{task}: {why}"
            if task and (why := _after_a_flag(self.core.unparsed or [], token, context)):
                return f"{task}: {why}"
            if task:
                return f"{task}: unexpected argument '{token}' (not an option of {task}, nor a task)" \
                       f"{did_you_mean(token, tasks)}"
            return f"unknown task '{token}'{did_you_mean(token, tasks) or f' (`{self._command} --list` lists them)'}"
        if (match := _NO_VALUE.search(message)) and context is not None and match["name"] in context.args:
            flag = context.args[match["name"]].names[0]
            return f"{where}option --{flag} needs a value"
        if _POSITIONAL.search(message) and task:
            missing = " ".join(arg.name.upper() for arg in context.missing_positional_args)
            return f"{task}: missing argument {missing} (usage: {self._command} {task} {_usage(context)})"
        return f"{where}{message}"


_LIST_FORMATS = ("flat", "nested", "json")


def _not_a_number(argv: list[str], core_args) -> str:
    """The refusal of the core flag whose value invoke could not read as its number."""
    for arg in core_args:
        if arg.kind is not int:
            continue
        names = [f"-{n}" if len(n) == 1 else f"--{n}" for n in arg.names]
        for i, token in enumerate(argv):
            name, eq, value = token.partition("=")
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if name in names and not value.lstrip("-").isdigit():
                return f"option --{arg.names[0]} '{value}': not a whole number"
    return "a core option's value is not a number"


def _help_tuples(ctx) -> list[tuple[str, str]]:
    """invoke's (flags, help) rows of a task, each option that takes a value shown with it (`-s NAME, --stack
    NAME`); a flag stays as invoke writes it (`--[no-]eagle3`)."""
    rows = []
    for spec, text in ctx.help_tuples():
        long = re.search(r"--(?:\[no-\])?([\w-]+)", spec)
        arg = ctx.flags.get(f"--{long[1]}") if long else None
        if arg is None or not arg.takes_value:
            rows.append((spec, text or ""))
            continue
        meaning = OPTIONS.get(arg.name)
        value = meaning.value if meaning and meaning.value else {int: INT, float: FLOAT}.get(arg.kind, "TEXT")
        names = sorted(arg.names, key=len)
        rows.append((", ".join(f"{'-' if len(n) == 1 else '--'}{n} {value}" for n in names), text or ""))
    return rows


def _is_help(value) -> bool:
    return value in HELP_FLAGS or (isinstance(value, list) and any(v in HELP_FLAGS for v in value))


def _bare_repeatable(argv: list[str], contexts) -> tuple[str, str] | None:
    """(task, flag) of a repeatable option given with no value after it, the end of `argv` or another of
    the task's flags (invoke refuses that itself for the other options)."""
    tokens = argv[:argv.index("--")] if "--" in argv else argv
    current, value_next = None, False
    for i, token in enumerate(tokens):
        if value_next:
            value_next = False
            continue
        name = token.partition("=")[0]
        if current is not None and name in current.flags:  # Lexicon: `in` and [] see the short aliases, get() not
            flag = current.flags[name]
            if "=" in token or not flag.takes_value:
                continue
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            if flag.kind is list and (after is None or after in current.flags or after in current.inverse_flags):
                return current.name, token
            value_next = True
        elif token in contexts:
            current = contexts[token]
    return None


def _old_json_form(argv: list[str], token: str, context) -> str | None:
    """`--json PATH`, the old form of `--json-out PATH`: `--json` takes no value now (README, "Tasks")."""
    if "--json-out" not in context.flags:
        return None
    for i, word in enumerate(argv):
        if (word == "--json" and i + 1 < len(argv) and argv[i + 1] == token) or word == f"--json={token}":
            return (f"option --json takes no value: it prints the JSON report on stdout; to write it to a file "
                    f"use --json-out {token}")
    return None


def _after_a_flag(argv: list[str], token: str, context) -> str | None:
    """Why `token` was left over when the flag before it explains it: a flag that takes no value given one
    (`--dry-run=yes`), or a flag given twice (invoke gives a flag one value and leaves the second over)."""
    seen: set[str] = set()
    for i, word in enumerate(argv):
        name, eq, embedded = word.partition("=")
        if name not in context.flags:
            continue
        flag = context.flags[name]
        value = embedded if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        if value == token and eq and not flag.takes_value:
            return f"option {name} takes no value (give it alone, without '={token}')"
        if value == token and flag.takes_value and flag.kind is not list and flag.name in seen:
            return f"option {name} given twice ('{token}' is its second value; it takes one)"
        seen.add(flag.name)
    return None


def _literal(text: str) -> str:
    """The token invoke quoted with repr()."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _usage(context) -> str:
    return " ".join(arg.name.upper() for arg in context.positional_args) + " [--options]"


def adopt_running_program() -> None:
    """Make the `invoke` process loading `tasks.py` an `SglstackProgram`, before it parses any task option."""
    main = sys.modules.get("invoke.main")
    program = getattr(main, "program", None)
    if type(program) is Program:
        program.__class__ = SglstackProgram
