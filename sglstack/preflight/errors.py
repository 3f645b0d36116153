"""The host side's preflight errors (the node side reports in its JSON instead)."""

from __future__ import annotations

from ..core.errors import SglstackError


class PreflightUnavailable(SglstackError):
    """Preflight could not run on the node at all: no driver, no GPU, no GPU runtime in Docker."""


class PreflightFailed(SglstackError):
    """Preflight ran and a check failed: the node is not fit for the run (raised by `require_ready`)."""
