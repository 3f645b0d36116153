"""Where the inputs live by default: the one place the default stacks file is named, and found.

Standard library only: the task definitions (`sglstack.cli`) read it when invoke loads `tasks.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STACKS_FILE_NAME = "stacks.yaml"
DEFAULT_STACKS_FILE = REPO_ROOT / STACKS_FILE_NAME  # `invoke` in a checkout: the checkout's own matrix
# The stacks file a task reads when it is given no --stacks-file: set by the user, or by the `sglstack`
# command for the one it found (and so inherited by the tools it starts).
STACKS_FILE_ENV = "SGLSTACK_STACKS_FILE"


def default_stacks_file() -> Path:
    """SGLSTACK_STACKS_FILE when set, else the checkout's stacks.yaml (read when a task runs, not at import)."""
    return Path(os.environ.get(STACKS_FILE_ENV) or DEFAULT_STACKS_FILE)


def find_stacks_file(start: Path) -> tuple[Path | None, list[Path]]:
    """The nearest stacks.yaml in `start` or a folder above it, as git finds its repository, and the
    folders looked in (for the message when there is none)."""
    looked = []
    for folder in (start, *start.parents):
        looked.append(folder)
        if (folder / STACKS_FILE_NAME).is_file():
            return folder / STACKS_FILE_NAME, looked
    return None, looked
