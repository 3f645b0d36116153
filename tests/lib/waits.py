"""Waiting for what another process writes: by a count of short waits, never a deadline (a loaded machine is
slow, not wrong)."""

from __future__ import annotations

import select
from pathlib import Path


def wait_for_line(path: Path, text: str, *, whole: bool = False) -> None:
    """Until `path` holds `text` (with `whole`, as a line of its own); an AssertionError after about 30 s of
    short waits."""
    for _ in range(3000):  # a count, not a deadline: until the other process has written its line
        if path.is_file():
            written = path.read_text()
            if (text in written.splitlines()) if whole else (text in written):
                return
        select.select([], [], [], 0.01)
    raise AssertionError(f"{text!r} never written to {path}")
