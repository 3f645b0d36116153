"""The CLI entry points of publishing (`invoke publish`, `invoke registry.cleanup`): load, call, print."""

from __future__ import annotations

import math

from ..config.matrix import load_matrix
from ..core.console import console
from .cleanup import cleanup_candidates
from .digest import publish_digest
from .history import PublishError


def publish_command(
    stacks_file: str,
    stack_name: str,
    *,
    digest: str,
    registry: str | None = None,
    config_hash: str | None = None,
    force: bool = False,
    smoke_report: str | None = None,
) -> int:
    stack = load_matrix(stacks_file).get(stack_name)
    return publish_digest(
        stack, digest, registry=registry, config_hash=config_hash, force=force, smoke_report=smoke_report
    )


def parse_days(value: float | str | None, *, option: str = "--older-than-days", default: float = 7) -> float:
    """A number of days >= 0 from the command line; anything else is a one-line error naming the option."""
    if value is None or value == "":
        return default
    try:
        days = float(value)
    except (TypeError, ValueError):
        days = math.nan
    if not (days >= 0 and math.isfinite(days)):
        raise PublishError(f"{option} '{value}' is not a number of days (0 or more)")
    return days


def cleanup_command(
    stacks_file: str,
    *,
    stack_name: str | None = None,
    registry: str | None = None,
    older_than_days: float | str | None = None,
    dry_run: bool = False,
) -> int:
    days = parse_days(older_than_days)
    matrix = load_matrix(stacks_file)
    stacks = [matrix.get(stack_name)] if stack_name else [matrix.get(n) for n in matrix.names()]
    removed = cleanup_candidates(stacks, registry=registry, older_than_days=days, dry_run=dry_run)
    out = console()
    verb = "would remove" if dry_run else "removed"
    for ref in removed:
        out.print(f"{verb} {ref}")
    out.print(f"{len(removed)} candidate(s) {verb}")
    return 0
