"""The local-process adapter's corners that its real-process tests leave to chance (issue 35, mutation): the
kernel's parent-death signal as the child sees it, /proc read as the test writes it (an entry gone mid-read,
another group of the same session, a dead `X` member), the probe without /proc, and the leader that cannot be
reaped in time. Each runs in process: a fork, a folder standing in for /proc, a clock the test holds."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from pathlib import Path

import pytest
from fake_clock import FakeClock

from sglstack.adapters import process as proc_mod
from sglstack.adapters.process import GONE_WAIT_S, end_process_group

PR_GET_PDEATHSIG = 2
NOT_RUN = 99


def _in_a_fork(arm) -> tuple[int, int]:
    """Fork; the child runs `arm()` as the server's child would before exec, then reports the parent-death
    signal the kernel holds for it. (exit status, signal); the status is NOT_RUN when `arm` raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read_end)
            arm()
            held = ctypes.c_int(-1)
            ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(held))
            os.write(write_end, str(held.value).encode())
            os._exit(0)
        except BaseException:
            os._exit(NOT_RUN)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), int(said) if said else -1


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_on_linux_the_child_is_armed_with_sigkill_at_its_parents_death():
    arm = proc_mod._dies_with_parent()
    assert arm is not None
    assert _in_a_fork(arm) == (0, signal.SIGKILL)


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_parent_is_already_gone_exits_1(monkeypatch):
    """The parent died between the fork and the prctl: the child is an orphan nobody will end."""
    monkeypatch.setattr(proc_mod.os, "getpid", lambda: 1)  # the pid the child compares its parent's with
    arm = proc_mod._dies_with_parent()
    monkeypatch.undo()
    assert arm is not None
    assert _in_a_fork(arm)[0] == 1


def test_off_linux_nothing_is_armed(monkeypatch):
    monkeypatch.setattr(proc_mod.sys, "platform", "darwin")
    assert proc_mod._dies_with_parent() is None


class _FakeProc:
    """The root the adapter reads /proc from: entries in the order the test gives."""

    def __init__(self, root: Path, names: list[str]) -> None:
        self.root, self.names = root, names

    def is_dir(self) -> bool:
        return True

    def iterdir(self):
        return iter([self.root / name for name in self.names])


def _stat(root: Path, pid: int, state: str, pgrp: int, session: int) -> None:
    (root / str(pid)).mkdir()
    # pid (comm) state ppid pgrp session tty ...
    (root / str(pid) / "stat").write_text(f"{pid} (python3) {state} 1 {pgrp} {session} 0 -1 4194560\n")


def _members(tmp_path: Path, monkeypatch, names: list[str], pgid: int) -> list[int] | None:
    monkeypatch.setattr(proc_mod, "Path", lambda p: _FakeProc(tmp_path, names) if p == "/proc" else Path(p))
    return proc_mod._group_members(pgid)


def test_an_entry_gone_while_read_is_skipped_not_the_end_of_the_listing(tmp_path, monkeypatch):
    (tmp_path / "700").mkdir()  # a process that exited between the listing and the read: no stat
    _stat(tmp_path, 701, "S", 500, 500)
    assert _members(tmp_path, monkeypatch, ["self", "700", "701"], 500) == [701]


def test_the_group_is_the_pgrp_field_not_the_session(tmp_path, monkeypatch):
    """A member that moved to its own group inside the server's session is not the server's group."""
    _stat(tmp_path, 801, "S", 500, 500)
    _stat(tmp_path, 802, "S", 900, 500)
    _stat(tmp_path, 803, "R", 900, 500)
    assert _members(tmp_path, monkeypatch, ["801", "802", "803"], 500) == [801]
    assert _members(tmp_path, monkeypatch, ["801", "802", "803"], 900) == [802, 803]


@pytest.mark.parametrize(("state", "counted"), [("Z", False), ("X", False), ("x", True), ("D", True),
                                                ("S", True)])
def test_dead_and_zombie_members_are_not_counted(tmp_path, monkeypatch, state, counted):
    _stat(tmp_path, 901, state, 500, 500)
    assert _members(tmp_path, monkeypatch, ["901"], 500) == ([901] if counted else [])


def test_without_proc_the_probe_is_signal_0(tmp_path, monkeypatch):
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(proc_mod, "Path", lambda _p: tmp_path / "no-proc")
    monkeypatch.setattr(proc_mod.os, "killpg", lambda pgid, signum: sent.append((pgid, signum)))

    class Leader:
        def poll(self) -> None:
            return None

    assert proc_mod._group_alive(4321, Leader()) is True  # type: ignore[arg-type]
    assert sent == [(4321, 0)]


class _Unreapable:
    """A leader that does not go within the wait after SIGKILL (uninterruptible sleep)."""

    pid = 6543

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> int:
        self.waits.append(timeout)
        raise subprocess.TimeoutExpired("server", timeout or 0.0)

    def poll(self) -> None:
        return None


def test_a_leader_not_reaped_in_time_is_waited_for_gone_wait_s_then_killed_again_until_the_deadline(monkeypatch):
    clock = FakeClock()
    sent: list[tuple[float, int]] = []

    def signal_group(_pgid: int, signum: int) -> bool:
        sent.append((clock.now, signum))
        return True

    monkeypatch.setattr(proc_mod, "time", clock)
    monkeypatch.setattr(proc_mod, "_signal_group", signal_group)
    monkeypatch.setattr(proc_mod, "_group_alive", lambda _pgid, _proc: True)
    leader = _Unreapable()
    end_process_group(leader, grace_s=0.0)  # type: ignore[arg-type]  # the TimeoutExpired does not escape
    assert leader.waits == [GONE_WAIT_S]
    kills = [at for at, signum in sent if signum == signal.SIGKILL]
    # one SIGKILL after the grace, then one per 0.1 s poll strictly before the deadline, none at it
    assert kills[0] == 0.0
    assert len(kills) == 1 + len(clock.sleeps)
    assert max(kills) < GONE_WAIT_S
    assert clock.now == pytest.approx(GONE_WAIT_S, abs=0.11)


def test_the_second_loop_stops_when_the_clock_reaches_the_deadline(monkeypatch):
    """The clock at the deadline exactly: no further SIGKILL."""
    clock = FakeClock(now=100.0)
    sent: list[int] = []

    def alive(_pgid: int, _proc) -> bool:
        return True

    def signal_group(_pgid: int, signum: int) -> bool:
        sent.append(signum)
        return True

    class Leader(_Unreapable):
        def wait(self, timeout: float | None = None) -> int:
            self.waits.append(timeout)
            return -9

    monkeypatch.setattr(proc_mod, "time", clock)
    monkeypatch.setattr(proc_mod, "_signal_group", signal_group)
    monkeypatch.setattr(proc_mod, "_group_alive", alive)
    def sleep(seconds: float) -> None:  # the first sleep lands on the second loop's deadline exactly
        clock.now = 100.0 + GONE_WAIT_S if not clock.sleeps else clock.now + seconds
        clock.sleeps.append(seconds)

    monkeypatch.setattr(clock, "sleep", sleep)
    end_process_group(Leader(), grace_s=0.0)  # type: ignore[arg-type]
    assert sent == [signal.SIGTERM, signal.SIGKILL, signal.SIGKILL]
    assert clock.sleeps == [0.1]
