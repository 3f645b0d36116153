"""What the safe writers' tests share (tests/unit/test_safefiles.py, test_folder_lock.py): the line a link out of
the build folder is refused with, and a system call that fails with the error the kernel would give."""

from __future__ import annotations

import os
from pathlib import Path

LINK_OUT = "(nothing under the build folder is written through a link out of it; remove the link)"


def _link_out(link: Path, target: Path, root: Path) -> str:
    return f"{link}: a link to {target}, outside {root}: not followed {LINK_OUT}"


def _raising(err: int):
    """A stand-in for a system call that fails as the kernel would, with `err`."""
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err))
    return fail
