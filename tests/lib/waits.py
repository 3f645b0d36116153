"""Waiting for what another process writes: by a count of short waits, never a deadline (a loaded machine is
slow, not wrong)."""

from __future__ import annotations

import contextlib
import select
import signal
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
def sigint_once_written(monkeypatch, module: object, min_bytes: int) -> Iterator[None]:
    """A real SIGINT to this thread from inside the write that takes a file `module.write_with` fills past
    `min_bytes`: a write caught half done at the same byte on an idle or a loaded machine (a thread watching the
    file's size lost the race to a fast pack under load). Python runs the handler, and so raises
    KeyboardInterrupt, at the next instruction of the main thread: inside the pack or the download."""
    real = module.write_with  # type: ignore[attr-defined]
    fired = []

    class Counted:
        def __init__(self, fh) -> None:
            self._fh = fh
            self._written = 0

        def write(self, data) -> int:
            count = self._fh.write(data)
            self._written += len(data)
            if self._written >= min_bytes and not fired:
                fired.append(True)
                # raise(3) signals this thread, and Python runs the handler before raise_signal returns
                signal.raise_signal(signal.SIGINT)
            return count

        def __getattr__(self, name: str):
            return getattr(self._fh, name)

    def write_with(root, path, fill, **kwargs):
        return real(root, path, lambda fh: fill(Counted(fh)), **kwargs)

    monkeypatch.setattr(module, "write_with", write_with)
    # Python's own Ctrl-C handler, whatever this process inherited: a shell script's background job (`cmd &`)
    # starts with SIGINT ignored, and Python then installs none (seen: a CI run started that way, both tests).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fired, f"no file written through {getattr(module, '__name__', module)}.write_with reached {min_bytes} bytes"
