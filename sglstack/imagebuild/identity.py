"""What the build record's provenance names its inputs by: sglstack's own version and commit, and each
patch's tree hash (attest reads them from the record into the provenance statement)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .. import __version__
from ..adapters.git import checkout_commit
from ..core.resources import CHECKOUT_DIR


def sglstack_identity() -> dict[str, str | None]:
    """{"version", "commit"}: the commit is None outside a git checkout, suffixed `-dirty` with local edits."""
    commit = checkout_commit(CHECKOUT_DIR) if (CHECKOUT_DIR / ".git").exists() else None
    return {"version": __version__, "commit": commit}


def tree_sha256(folder: Path) -> str:
    """sha256 over a folder's files (relative path and content hash, sorted): a patch's identity."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        lines.append(f"{path.relative_to(folder).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()
