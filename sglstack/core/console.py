"""The rich consoles sglstack prints through: one for stdout and one for stderr, each created once and
wide when its stream is not a terminal (so that logs keep whole lines). Some parts print plain lines
to stderr instead (the smoke log, the one-line errors of `tasks.py`).

Every outside value (an image label, a package name or version, a registry's or a server's answer, a
file's content, an error that quotes one) goes through `plain` before it reaches rich: rich reads `[...]`
as markup (a label `[/bold]` ends in a MarkupError, `[red]` restyles the line) and passes a terminal's
escape sequences through (`\\x1b[2J` clears the screen, U+202E reverses what follows). Emoji codes are
off for the same reason (`:warning:` in a label is text, not a glyph).
"""

from __future__ import annotations

import functools

from rich.console import Console
from rich.markup import escape

from .errors import one_line


@functools.cache
def console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=None if probe.is_terminal else 200, soft_wrap=not probe.is_terminal,
                   emoji=False)


def plain(value: object) -> str:
    """`value` as text that rich prints as it is: markup escaped, control and bidi characters (and line
    breaks) written as escapes, so one value stays on its line and cannot restyle or move the terminal."""
    return escape(one_line(str(value)))


def printable_lines(text: str) -> str:
    """`plain` for a text of several lines (a report printed with markup=False keeps its line breaks)."""
    return "\n".join(one_line(line) for line in text.split("\n"))
