"""Typed task options, each declared once as a dataclass field: its flag, help line, default and kind.

A dataclass of these fields is one task's options: `task_help` and `task_signature` give invoke its
flags, `from_cli` turns what invoke parsed into typed values, with a one-line error naming the option for
a value that is not a number. Numbers reach invoke untyped on purpose (invoke's own conversion would end
in a traceback). Standard library only: the task definitions import it when invoke loads `tasks.py`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, ClassVar, TypeVar

from .errors import SglstackError, one_line, shown

T = TypeVar("T", bound="TaskOptions")

MAX_NUMBER_CHARS = 32
# No name, path, reference or K=V an option takes is this long (a path is at most 4096 bytes on Linux): a
# longer value is refused here, not echoed whole in an error line or handed to the OS, which fails on it.
MAX_TEXT_CHARS = 8192

# The kinds of option: parsed by `from_cli`. RAW: passed on as invoke gives it (invoke types it by its
# default, e.g. an int default makes an =INT flag); LIST: a repeatable option.
RAW = object
LIST = list


# What a value must also be, checked when it is parsed: the problem with `value` ("not an image
# reference: it ..."), or None. Refused with the flag named, before the task starts.
Check = Callable[[Any], "str | None"]


def option(help: str, default: Any = None, *, kind: type = str, choices: tuple[str, ...] = (),
           check: Check | None = None) -> Any:
    """A task option: its help line, default and kind (str, int, float, bool, LIST or RAW), the only values it
    takes, if only some, and `check`, what its value must also be (an image reference, a port)."""
    return field(default=default, metadata={"help": help, "kind": kind, "choices": choices, "check": check})


def repeatable(help: str) -> Any:
    """A repeatable option (`--mount A --mount B`): a tuple of its values, empty when not given."""
    return field(default=(), metadata={"help": help, "kind": LIST})


def required(help: str, *, check: Check | None = None) -> Any:
    return field(metadata={"help": help, "kind": str, "check": check})


# ---- the options every part shares, declared once -----------------------------------------------------

def stacks_file_option(help: str = "the matrix file") -> Any:
    """--stacks-file: not given (None) means the repository's stacks.yaml (`sglstack.config.defaults`)."""
    return option(help)


DOCKER_HOST_HELP = "Docker engine URL (default: DOCKER_HOST / local socket)"


def docker_host_option(help: str = DOCKER_HOST_HELP) -> Any:
    return option(help)


def output_option() -> Any:
    """-o/--output wide: every column of a table, wrapped, where a narrow terminal would show the few that fit."""
    return option("wide: every column, each cell wrapped (default at a narrow terminal: the columns that fit)",
                  choices=("wide",))


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


class BadOption(SglstackError):
    """An option's value is not one its task can take: bad input, exit 2."""

    exit_code = 2


class TaskOptions:
    """Base of the option dataclasses: the task's signature, help and parsing, from the fields."""

    # The error a malformed number raises (a part's own error class, for its exit code and its catchers).
    bad_value: ClassVar[type[SglstackError]] = BadOption

    @classmethod
    def task_help(cls) -> dict[str, str]:
        # invoke names a flag by its parameter, less a trailing "_" (`as_` is --as)
        return {f.name.rstrip("_").replace("_", "-"): f.metadata["help"]
                for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def repeatable_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.metadata["kind"] is LIST]  # type: ignore[arg-type]

    @classmethod
    def task_signature(cls) -> inspect.Signature:
        """`(c, <one parameter per option>)`: flags keep their defaults, numbers arrive as text."""
        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        # keyword-only parameters go last in a signature
        for f in sorted(dataclasses.fields(cls), key=lambda f: bool(f.kw_only)):  # type: ignore[arg-type]
            kind = f.metadata["kind"]
            if f.default is dataclasses.MISSING:
                default: Any = inspect.Parameter.empty
            else:
                default = f.default if kind in (bool, str, RAW) else None
            # a kw_only field (those every reporting task shares, `ReportOptions`) comes first but has a default
            where = inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
            params.append(inspect.Parameter(f.name, where, default=default))
        return inspect.Signature(params)

    @classmethod
    def from_cli(cls: type[T], values: Mapping[str, Any]) -> T:
        """Typed options from invoke's values (None: not given); `bad_value` names a malformed one."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            raw = values.get(f.name)
            if raw is None:
                continue
            out[f.name] = _parse(raw, f.metadata["kind"], f.name, cls.bad_value)
            if (choices := f.metadata.get("choices")) and out[f.name] not in choices:
                raise cls.bad_value(f"{flag_of(f.name)} '{one_line(shown(str(raw)))}': not one of "
                                    f"{', '.join(choices)}")
            check = f.metadata.get("check")
            if check is not None and (problem := check(out[f.name])):
                raise cls.bad_value(f"{flag_of(f.name)} '{one_line(shown(str(raw)))}': {problem}")
        return cls(**out)

    # Options that exclude each other, checked before the task starts (bad input, exit 2):
    # of each group in `exactly_one` one must be given, of each in `at_most_one` not two.
    exactly_one: ClassVar[tuple[tuple[str, ...], ...]] = ()
    at_most_one: ClassVar[tuple[tuple[str, ...], ...]] = ()

    @classmethod
    def combination_problem(cls, values: Mapping[str, Any]) -> str | None:
        """What is wrong with the combination of options in invoke's `values` (None: not given), if anything."""
        given = {name for name, value in values.items() if value not in (None, False, (), [])}
        for group in cls.exactly_one:
            if len(given & set(group)) != 1:
                return "give exactly one of " + " or ".join(map(flag_of, group))
        for group in cls.at_most_one:
            both = [name for name in group if name in given]
            if len(both) > 1:
                return f"give {' or '.join(map(flag_of, both))}, not both"
        return None


JSON_HELP = "print the report as JSON on stdout, and nothing else there (tables and notes go to stderr)"
JSON_OUT_HELP = "also write the report as JSON to PATH ('-': stdout, as --json)"


@dataclasses.dataclass(frozen=True)
class ReportOptions(TaskOptions):
    """The options of a task that reports: `--json` and `--json-out PATH`, one convention for all
    (`sglstack.core.jsonreport`). The task is then called with the checked `JsonReport` too."""

    json: bool = field(default=False, kw_only=True, metadata={"help": JSON_HELP, "kind": bool})
    json_out: str | None = field(default=None, kw_only=True, metadata={"help": JSON_OUT_HELP, "kind": str})


def _parse(raw: Any, kind: type, name: str, bad_value: type[SglstackError]) -> Any:
    if kind is bool:
        return bool(raw)
    for text in (raw if kind is LIST else [raw]):
        if isinstance(text, str):
            _check_text(text, name, bad_value)
    if kind is RAW:
        return raw
    if kind is LIST:
        return tuple(raw)
    if kind is str:
        return str(raw)
    text = str(raw).strip()
    what = "a whole number" if kind is int else "a number"
    if len(text) > MAX_NUMBER_CHARS:  # int() ends past 4300 digits; no count, port or timeout is this long
        raise bad_value(f"{flag_of(name)} '{text[:20]}...' ({len(text)} characters): not {what} sglstack takes")
    try:
        value = int(text) if kind is int else float(text)
    except ValueError:
        raise bad_value(f"{flag_of(name)} '{raw}': not {what}") from None
    if kind is float and not math.isfinite(value):
        raise bad_value(f"{flag_of(name)} '{raw}': not a finite number")
    return value


def _check_text(text: str, name: str, bad_value: type[SglstackError]) -> None:
    """Refuse a value no option takes: over `MAX_TEXT_CHARS`, or bytes that are not UTF-8 (Python passes them
    on as lone surrogates, which every later encode (pydantic, YAML, JSON, the Docker API) fails on with a
    traceback)."""
    if len(text) > MAX_TEXT_CHARS:
        raise bad_value(f"{flag_of(name)} '{one_line(shown(text))}': longer than {MAX_TEXT_CHARS} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_value(f"{flag_of(name)} '{one_line(shown(text))}': not valid UTF-8") from None
