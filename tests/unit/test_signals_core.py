"""core/signals in process, with real signals sent to this process: a handled signal raised once and the next ones
ignored while cleanup runs, a deferred signal delivered after its block (not dropped), and every handler a block
replaced put back; and a released folder lock that is really released (a second process takes it, and this
thread's next take is a real flock again). Planted bugs P53-P55 and P57 (`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import pytest

from sglstack.core.folderlock import LOCK_NAME, StackBusy, folder_lock
from sglstack.core.signals import HANDLED, Interrupted, deferred, signals_raise


class Recorder:
    """A handler of our own, installed before a block, so that what the block puts back can be seen."""

    def __init__(self) -> None:
        self.got: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        self.got.append(signum)


@pytest.fixture
def own_handlers():
    """Our recorder on every handled signal for the test, the test runner's handlers put back after it."""
    recorder = Recorder()
    before = {sig: signal.signal(sig, recorder) for sig in HANDLED}
    try:
        yield recorder
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def _send(sig: signal.Signals) -> None:
    signal.raise_signal(sig)  # delivered to the main thread before the next line runs


def test_the_first_signal_raises_and_a_second_one_during_cleanup_is_ignored(own_handlers):
    cleaned: list[str] = []
    with pytest.raises(Interrupted) as caught, signals_raise():
        try:
            _send(signal.SIGTERM)
            pytest.fail("SIGTERM did not raise")
        finally:
            # cleanup (a container's removal): an impatient supervisor's second SIGTERM must not cut it
            _send(signal.SIGTERM)
            _send(signal.SIGHUP)
            cleaned.append("removed")
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 128 + signal.SIGTERM
    assert cleaned == ["removed"]
    assert own_handlers.got == []  # none of the three reached the handler of before


def test_signals_raise_puts_every_handler_back(own_handlers):
    with signals_raise():
        assert all(signal.getsignal(sig) is not own_handlers for sig in HANDLED)
    assert all(signal.getsignal(sig) is own_handlers for sig in HANDLED)
    _send(signal.SIGHUP)
    assert own_handlers.got == [signal.SIGHUP]


def test_a_signal_in_a_deferred_block_waits_for_its_end_and_is_then_delivered(own_handlers):
    steps: list[str] = []
    with deferred():
        _send(signal.SIGTERM)
        steps.append("renamed the first")
        assert own_handlers.got == []  # not yet: the block must not be cut between two renames
        steps.append("renamed the second")
    assert steps == ["renamed the first", "renamed the second"]
    assert own_handlers.got == [signal.SIGTERM]  # delivered once the block ended, not dropped


def test_a_deferred_block_puts_every_handler_back(own_handlers):
    with deferred():
        assert all(signal.getsignal(sig) is not own_handlers for sig in HANDLED)
    assert all(signal.getsignal(sig) is own_handlers for sig in HANDLED)
    _send(signal.SIGINT)
    _send(signal.SIGTERM)
    assert own_handlers.got == [signal.SIGINT, signal.SIGTERM]  # each reaches it, none is held any more


def test_a_signal_deferred_inside_signals_raise_becomes_interrupted_after_the_block(own_handlers):
    steps: list[str] = []
    with pytest.raises(Interrupted) as caught, signals_raise():
        with deferred():
            _send(signal.SIGINT)
            steps.append("records written")
        steps.append("not reached")
    assert steps == ["records written"]
    assert caught.value.signum == signal.SIGINT


# ---- folder_lock: released means released ----------------------------------------------------------

def _taken_elsewhere(lock: Path) -> bool:
    """Whether another open file description (what another process has) can take the lock now."""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def test_a_released_lock_is_taken_again_for_real_by_the_same_thread(tmp_path):
    folder = tmp_path / "build" / "tiny"
    lock = folder / LOCK_NAME
    with folder_lock(folder, "build", root=tmp_path / "build", stack="tiny"):
        assert not _taken_elsewhere(lock)
    assert _taken_elsewhere(lock)
    with folder_lock(folder, "deploy", root=tmp_path / "build", stack="tiny"):
        # the second take is a real flock: another process is refused, and the holder line is the new task's
        assert not _taken_elsewhere(lock)
        assert lock.read_text().startswith("invoke deploy (pid ")
    assert _taken_elsewhere(lock)


def test_after_release_a_holder_elsewhere_refuses_this_thread(tmp_path):
    folder = tmp_path / "build" / "tiny"
    lock = folder / LOCK_NAME
    with folder_lock(folder, "build", root=tmp_path / "build", stack="tiny"):
        pass
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, b"invoke bisect (pid 1, since 2026-12-05T00:00:00Z)\n", 0)
        with pytest.raises(StackBusy, match=r"stack 'tiny' is busy: invoke bisect \(pid 1"), \
                folder_lock(folder, "build", root=tmp_path / "build", stack="tiny"):
            pytest.fail("the lock was taken while another holds it")
    finally:
        os.close(fd)
