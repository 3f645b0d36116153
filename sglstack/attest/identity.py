"""sglstack's own identity for the provenance: its version and, in a git checkout, its commit."""

from __future__ import annotations

import subprocess

from .. import __version__
from ..core.credentials import tool_environment
from ..core.resources import CHECKOUT_DIR


def sglstack_identity() -> dict[str, str | None]:
    """{"version", "commit"}: the commit is None outside a git checkout, suffixed `-dirty` with local edits."""
    commit: str | None = None
    if (CHECKOUT_DIR / ".git").exists():
        try:
            head = subprocess.run(["git", "-C", str(CHECKOUT_DIR), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=10, check=True, env=tool_environment()).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(CHECKOUT_DIR), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10, check=True,
                                   env=tool_environment()).stdout.strip()
            commit = f"{head}-dirty" if dirty else head
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"version": __version__, "commit": commit}
