"""The local-process adapter with real process groups (a POSIX shell stands in for the server, which is all
the adapter sees of it): its session, log and working folder, the end of the whole group (SIGTERM, SIGKILL
for members that ignore it, zombies not counted), the log tail; and which variables a served process gets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from subprocess import TimeoutExpired

import pytest
from fake_clock import FakeClock
from waits import wait_for_line

from sglstack.adapters import process as proc_mod
from sglstack.adapters.process import (
    end_process_group,
    free_tcp_port,
    log_tail,
    running_process,
)
from sglstack.core.safefiles import OutputNotWritable
from sglstack.smoke.processenv import PROCESS_PASS_NAMES, PROCESS_PASS_PREFIXES, passes_to_process

SH = "/bin/sh"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def select_wait() -> None:
    import select

    select.select([], [], [], 0.01)


def test_a_free_port_can_be_bound():
    port = free_tcp_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_server_runs_in_its_own_session_logs_to_its_file_and_its_group_ends(tmp_path):
    log = tmp_path / "server.log"
    (tmp_path / "work").mkdir()
    script = 'echo "in $(pwd) with $ONLY"; read x || echo "stdin closed"; sleep 60 & echo started; wait'
    with running_process([SH, "-c", script], env={"ONLY": "this", "PATH": "/usr/bin:/bin"}, log_path=log,
                         cwd=str(tmp_path / "work"), log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)  # the shell has set its traps and started its children
        assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
        members = proc_mod._group_members(proc.pid)
        assert members is not None and proc.pid in members and len(members) == 2
    assert proc_mod._group_members(proc.pid) == []
    assert proc.returncode == -signal.SIGTERM
    assert log.read_text().splitlines() == [f"in {tmp_path / 'work'} with this", "stdin closed", "started"]


def test_the_log_goes_under_the_build_folder_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    log = tmp_path / "build" / "s" / "server.log"
    log.parent.mkdir(parents=True)
    outside = tmp_path / "outside.log"
    outside.write_text("kept\n")
    log.symlink_to(outside)
    with pytest.raises(OutputNotWritable) as err, running_process([SH, "-c", "echo no"], env={}, log_path=log):
        pass
    assert str(err.value) == (f"{log}: a link to {outside}, outside {tmp_path / 'build'}: not followed (nothing "
                              "under the build folder is written through a link out of it; remove the link)")
    assert outside.read_text() == "kept\n"


def test_members_that_ignore_sigterm_are_killed_after_the_grace(tmp_path):
    log = tmp_path / "server.log"
    script = "trap '' TERM; sleep 60 & sleep 60 & echo started; wait; wait"
    with running_process([SH, "-c", script], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)
        members = proc_mod._group_members(proc.pid)
        assert members is not None and len(members) == 3
        end_process_group(proc, grace_s=0.2)
        assert not any(_alive(pid) for pid in members)
        assert proc.returncode == -signal.SIGKILL
        assert proc_mod._group_members(proc.pid) == []


def test_a_group_already_gone_is_only_reaped(tmp_path):
    log = tmp_path / "server.log"
    with running_process([SH, "-c", "exit 3"], env={}, log_path=log, log_root=tmp_path) as proc:
        while _alive(proc.pid):
            select_wait()
    assert proc.returncode == 3
    assert proc_mod._signal_group(proc.pid, 0) is False


def test_a_leader_that_exits_first_still_has_its_group_ended(tmp_path):
    log = tmp_path / "server.log"
    with running_process([SH, "-c", "sleep 60 & echo started"], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)
        proc.wait()
        left = proc_mod._group_members(proc.pid)
        assert left is not None and len(left) == 1
        assert proc_mod._group_alive(proc.pid, proc) is True
    assert not _alive(left[0])
    assert proc_mod._group_alive(proc.pid, proc) is False


def test_without_proc_the_group_is_probed_with_signal_0(tmp_path, monkeypatch):
    log = tmp_path / "server.log"
    with running_process([SH, "-c", "echo started; sleep 60"], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)
        monkeypatch.setattr(proc_mod, "Path", lambda _p: tmp_path / "no-proc")
        assert proc_mod._group_members(proc.pid) is None
        assert proc_mod._group_alive(proc.pid, proc) is True
        monkeypatch.undo()
        with pytest.raises(TimeoutExpired):  # probed, not signalled: still running
            proc.wait(timeout=0.3)
    assert proc_mod._group_members(proc.pid) == []


def test_signalling_a_group_of_another_user_counts_it_as_alive(monkeypatch):
    def refuse(_pgid, _sig):
        raise PermissionError

    monkeypatch.setattr(proc_mod.os, "killpg", refuse)
    assert proc_mod._signal_group(12345, signal.SIGTERM) is True


def test_the_log_tail_is_the_last_non_empty_lines_of_the_last_64_kib(tmp_path):
    path = tmp_path / "server.log"
    assert log_tail(path, 3) == []
    end = b"\n\n  \nb\xff\nc\n\n"
    path.write_bytes(b"first\n" + b"x" * 70_000 + end)
    cut = "x" * (65_536 - len(end))  # the line cut at 64 KiB from the end
    assert log_tail(path, 2) == ["b\ufffd", "c"]
    assert log_tail(path, 3) == [cut, "b\ufffd", "c"]
    assert log_tail(path, 10) == [cut, "b\ufffd", "c"]
    path.write_bytes(b"one\ntwo\n")
    assert log_tail(path, 5) == ["one", "two"]
    assert log_tail(path, 1) == ["two"]


def test_the_default_waits():
    assert (proc_mod.TERM_GRACE_S, proc_mod.GONE_WAIT_S) == (10.0, 10.0)


# ---- the environment a served process gets --------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PROCESS_PASS_NAMES))
def test_each_runtime_name_passes(name):
    assert passes_to_process(name, "/x") is True
    assert passes_to_process(name.lower(), "/x") is False


@pytest.mark.parametrize("prefix", PROCESS_PASS_PREFIXES)
def test_each_runtime_family_passes_but_not_its_secrets(prefix):
    assert passes_to_process(prefix + "SETTING", "1") is True
    assert passes_to_process(prefix.lower() + "setting", "1") is False
    for part in ("TOKEN", "PASSW", "SECRET", "CREDENTIAL", "APIKEY", "PRIVATE", "AUTH"):
        assert passes_to_process(f"{prefix}X{part}Y", "1") is False, part
    assert passes_to_process(prefix + "API_KEY", "1") is False  # `names_secret`'s words


def test_other_variables_do_not_pass():
    assert PROCESS_PASS_PREFIXES == ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "GLOO_", "UCX_", "HF_",
                                     "TRITON_", "TORCHINDUCTOR_")
    for name in ("PYTHONPATH", "SGLANG_X", "SGLSTACK_SIGNING_KEY", "AWS_SECRET_ACCESS_KEY", "XLC_ALL", "SHELL"):
        assert passes_to_process(name, "v") is False
    assert passes_to_process("HF_HOME") is True


@pytest.mark.parametrize(("grace", "polls"), [(0.25, 3), (0.2, 2), (0.0, 0)])
def test_the_grace_is_counted_on_the_clock_before_sigkill(tmp_path, monkeypatch, grace, polls):
    log = tmp_path / "server.log"
    clock = FakeClock()
    script = "trap '' TERM; sleep 60 & echo started; wait; wait"
    with running_process([SH, "-c", script], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)
        sent: list[tuple[int, int]] = []  # (sleeps so far, signal)
        real_signal = proc_mod._signal_group
        monkeypatch.setattr(proc_mod, "time", clock)
        monkeypatch.setattr(proc_mod, "_signal_group",
                            lambda pgid, signum: sent.append((len(clock.sleeps), signum)) or real_signal(pgid, signum))
        end_process_group(proc, grace_s=grace)
        monkeypatch.undo()
    # Polled every 0.1 s while the whole group ignored SIGTERM, then SIGKILL. After it, a killed member may
    # still show in /proc for a moment on a loaded machine (it is exiting): more polls there are the
    # after-kill loop's, not the grace's, so only the polls before the first SIGKILL are counted.
    first_kill = next(n for n, signum in sent if signum == signal.SIGKILL)
    assert sent[0] == (0, signal.SIGTERM)
    assert (first_kill, clock.sleeps[:first_kill]) == (polls, [0.1] * polls)
    assert proc.returncode == -signal.SIGKILL


def test_members_seen_after_sigkill_get_it_again_until_gone(tmp_path, monkeypatch):
    """After SIGKILL and the leader's reaping, members may still show (exiting, or in uninterruptible
    sleep): SIGKILL again every 0.1 s on the clock until /proc shows none. /proc's answers are the test's."""
    log = tmp_path / "server.log"
    with running_process([SH, "-c", "exit 0"], env={}, log_path=log, log_root=tmp_path) as proc:
        proc.wait()
        clock = FakeClock()
        sent: list[tuple[int, int]] = []
        seen = iter([[4242], [4242], [4242], []])
        monkeypatch.setattr(proc_mod, "time", clock)
        monkeypatch.setattr(proc_mod, "_group_members", lambda pgid: next(seen) if pgid == proc.pid else [])

        def record(pgid: int, sig: int) -> bool:
            sent.append((pgid, sig))
            return True

        monkeypatch.setattr(proc_mod, "_signal_group", record)
        end_process_group(proc, grace_s=0.0)
        monkeypatch.undo()
    assert sent == [(proc.pid, signal.SIGTERM)] + [(proc.pid, signal.SIGKILL)] * 3
    assert clock.sleeps == [0.1, 0.1]


def test_a_zombie_member_is_not_counted(tmp_path):
    """`sleep 0` exits; its parent (the leader, exec'd into `sleep 60`) never reaps it."""
    log = tmp_path / "server.log"
    with running_process([SH, "-c", "sleep 0 & exec sleep 60"], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        for _ in range(3000):
            states = [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                      for pid in os.listdir("/proc") if pid.isdigit() and Path(f"/proc/{pid}/stat").exists()]
            if any(f[0] == "Z" and int(f[2]) == proc.pid for f in states if len(f) > 2):
                break
            select_wait()
        assert proc_mod._group_members(proc.pid) == [proc.pid]


def test_a_command_name_holding_a_parenthesis_is_read_right(tmp_path):
    odd = tmp_path / "x) 1 2 3"
    odd.write_bytes(Path(SH).read_bytes())
    odd.chmod(0o755)
    log = tmp_path / "server.log"
    with running_process([str(odd), "-c", "echo started; sleep 60"], env={"PATH": "/usr/bin:/bin"}, log_path=log,
                         log_root=tmp_path) as proc:
        wait_for_line(log, "started", whole=True)
        members = proc_mod._group_members(proc.pid)
        assert members is not None and proc.pid in members


def test_a_caller_killed_outright_takes_its_server_with_it(tmp_path):
    """SIGKILL of `invoke smoke` (an OOM kill, a CI job's hard timeout) runs no clean-up: the server it had
    started lived on as an orphan, holding its port (and, on a GPU node, the GPUs)."""
    pid_file = tmp_path / "server.pid"
    caller = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from sglstack.adapters.process import running_process\n"
        f"with running_process(['/bin/sh', '-c', 'echo $$ > {pid_file}; exec sleep 60'], env={{}},\n"
        f"                     log_path=Path({str(tmp_path / 'server.log')!r}), log_root=Path({str(tmp_path)!r})):\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        server = int(pid_file.read_text())
        assert _alive(server)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server)
    finally:
        parent.kill()
        if pid_file.exists() and pid_file.read_text().strip() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
