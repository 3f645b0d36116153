"""A real small filesystem for the tests of full disks and read-only folders: a tmpfs mounted for the test and
unmounted after (the test is skipped where mounting is not permitted), and a way to fill it to the last byte."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "64k", *, read_only: bool = False,
          fill_first: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """`folder` as a tmpfs of `size`; `fill_first` writes into it before a `read_only` one is remounted ro."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True, check=False)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")
    try:
        if fill_first is not None:
            fill_first(folder)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to the last byte; return the filler (remove it to free the space)."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while fh.write(b"\0" * 4096):
            pass
    return filler
