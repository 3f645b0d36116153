"""Waiting for what another process writes: by a count of short waits, never a deadline (a loaded machine is
slow, not wrong)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def sigint_once_a_temp_file_holds(folder: Path, min_bytes: int) -> Iterator[None]:
    """A real SIGINT to this process once a `.*.tmp` file in `folder` holds `min_bytes` (a write caught half
    done), watched every half millisecond for up to a minute while the block runs."""
    fired = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not fired.is_set():
            for tmp in folder.glob(".*.tmp") if folder.exists() else ():
                try:
                    if tmp.stat().st_size >= min_bytes:
                        fired.set()
                        os.kill(os.getpid(), signal.SIGINT)
                        return
                except FileNotFoundError:
                    pass
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        fired.set()
        watcher.join()
