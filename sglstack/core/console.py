"""The rich consoles sglstack prints through: one for stdout and one for stderr, each created once, and the
tables they print. Some parts print plain lines to stderr instead (the smoke log, the one-line errors).

Text is never cut: on a terminal a table fits its width by wrapping each cell (`overflow="fold"`, never
rich's `…`); piped, there is no width to fit, so the console is wide enough for any line and rich writes
no escape codes (it writes none when the stream is not a terminal, nor under `NO_COLOR`).

Every outside value (an image label, a package name or version, a registry's or a server's answer, a
file's content, an error that quotes one) goes through `plain` before it reaches rich: rich reads `[...]`
as markup (a label `[/bold]` ends in a MarkupError, `[red]` restyles the line) and passes a terminal's
escape sequences through (`\\x1b[2J` clears the screen, U+202E reverses what follows). Emoji codes are
off for the same reason (`:warning:` in a label is text, not a glyph).
"""

from __future__ import annotations

import functools
import os

from rich.console import Console, ConsoleOptions, RenderResult
from rich.constrain import Constrain
from rich.markdown import Heading, Markdown, TableElement
from rich.markup import escape
from rich.table import Table

from .errors import one_line

# Piped (a CI log, `| grep`): a table as wide as its widest row, each line whole (a fixed 200 cut an
# upgrade note mid-sentence). rich pads nothing to the console's width, so this costs nothing.
PIPED_WIDTH = 1_000_000


@functools.cache
def console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    # NO_COLOR (no-color.org): no escape code at all; rich alone drops only the colours, not bold or dim.
    plain_text = {"color_system": None} if os.environ.get("NO_COLOR") else {}
    return Console(stderr=stderr, width=None if probe.is_terminal else PIPED_WIDTH, soft_wrap=not probe.is_terminal,
                   emoji=False, **plain_text)  # type: ignore[arg-type]


WIDE = "wide"


def fitted_table(out: Console, columns: tuple[str, ...], rows: list[tuple[str, ...]], *, narrow: tuple[str, ...],
                 wide: bool, title: str | None = None) -> Table:
    """A table of every column, or, at a terminal too narrow for it, of the `narrow` ones (a caption says
    `-o wide` shows the rest, wrapped): a cell folded into a column a few letters wide reads as nothing.
    Piped, every column: there is no width to fit."""
    full = report_table(columns, title=title)
    for row in rows:
        full.add_row(*row)
    # the table's natural width: measured against the console's own width, rich would answer at most that
    if wide or not out.is_terminal or out.measure(full, options=out.options.update_width(PIPED_WIDTH)).maximum \
            <= out.width:
        return full
    keep = [columns.index(name) for name in narrow]
    fitted = report_table(narrow, title=title, caption=f"{len(columns) - len(narrow)} more columns "
                          f"({', '.join(c for c in columns if c not in narrow)}): -o wide")
    for row in rows:
        fitted.add_row(*(row[i] for i in keep))
    return fitted


def report_table(columns: tuple[str, ...] | list[str], *, title: str | None = None, **table: object) -> Table:
    """A table whose every cell keeps its whole text: wrapped to the terminal's width, never cut with `…`.
    Every table sglstack prints is made here (tests/unit/test_tables.py)."""
    made = Table(title=title, **table)  # type: ignore[arg-type]
    for column in columns:
        made.add_column(column, overflow="fold")
    return made


def plain(value: object) -> str:
    """`value` as text that rich prints as it is: markup escaped, control and bidi characters (and line
    breaks) written as escapes, so one value stays on its line and cannot restyle or move the terminal."""
    return escape(one_line(str(value)))


def printable_lines(text: str) -> str:
    """`plain` for a text of several lines (a report printed with markup=False keeps its line breaks)."""
    return "\n".join(one_line(line) for line in text.split("\n"))


class _FoldedTable(TableElement):
    """A Markdown table whose cells wrap, as `report_table`'s do (rich's own cut them with `…`)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for table in super().__rich_console__(console, options):
            if isinstance(table, Table):
                for column in table.columns:
                    column.overflow = "fold"
            yield table


class _LeftHeading(Heading):
    """Every heading at the left: rich centres the first, across the page's width."""

    LEVEL_ALIGN = dict.fromkeys(Heading.LEVEL_ALIGN, "left")


class _Markdown(Markdown):
    elements = {**Markdown.elements, "table_open": _FoldedTable, "heading_open": _LeftHeading}


# A Markdown report is read as a page: rich pads its list items and rules to the full width, which piped
# would be a megabyte of spaces; its paragraphs wrap and its cells fold, so a narrower page loses nothing.
MARKDOWN_WIDTH = 120


def print_markdown(out: Console, text: str) -> None:
    """Print a Markdown report at most `MARKDOWN_WIDTH` wide, its tables keeping every cell's whole text.

    Wrapped, never soft-wrapped: rich crops a soft-wrapped renderable at the console's width, which ended a
    piped `upgrade` note mid-sentence."""
    out.print(Constrain(_Markdown(text), width=MARKDOWN_WIDTH), soft_wrap=False)
