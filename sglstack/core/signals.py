"""SIGTERM, SIGHUP and SIGINT end every long task the same way: as an `Interrupted` exception.

`timeout`, CI cancellation, systemd and `kill` send SIGTERM; a closed terminal sends SIGHUP. Python's
default for both is to die on the spot, skipping every `finally` and context manager, which leaves
server containers holding GPUs and temporary tags behind. Turning them into an exception that derives
from `KeyboardInterrupt` means the cleanup that already runs on Ctrl-C runs for all three, and the task
exits with 128 + the signal number, as a shell reports a process killed by that signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A handled signal arrived; `exit_code` is 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def exit_code_of(exc: BaseException) -> int:
    """128 + the signal for `Interrupted`; 130 (SIGINT) for a plain KeyboardInterrupt."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, each handled signal raises `Interrupted` in the main thread.

    After the first signal, further ones are ignored while cleanup runs: a second SIGTERM from an
    impatient supervisor must not cut the removal of a container in half. The previous handlers come back
    on exit.
    """
    previous = {}
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    try:
        for sig in HANDLED:
            previous[sig] = signal.signal(sig, handler)
    except ValueError:
        # Not the main thread (signal handlers can only be set there): leave the defaults alone.
        for sig, old in previous.items():
            signal.signal(sig, old)
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block a handled signal waits, and takes effect (as its handler says) when the block ends.

    For the few steps a signal must not cut in half: recording tags that moved, putting tags back after a
    failed promotion. Handlers can only be set in the main thread; elsewhere the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if pending:
            signal.raise_signal(pending[0])
