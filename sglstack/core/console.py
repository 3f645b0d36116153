"""The rich consoles sglstack prints through: one for stdout and one for stderr, each created once and
wide when its stream is not a terminal (so that logs keep whole lines). Some parts print plain lines
to stderr instead (the smoke log, the one-line errors of `tasks.py`)."""

from __future__ import annotations

import functools

from rich.console import Console


@functools.cache
def console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=None if probe.is_terminal else 200, soft_wrap=not probe.is_terminal)
