"""The one rich console sglstack prints through (wide when output is not a terminal, for logs)."""

from __future__ import annotations

import functools

from rich.console import Console


@functools.cache
def console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=None if probe.is_terminal else 200, soft_wrap=not probe.is_terminal)
