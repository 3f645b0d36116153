"""The local-process adapter: start a server as a process group on this machine, and end the whole group.

SGLang's launch_server forks a scheduler, a detokenizer and (with TP) one worker per GPU; ending only the
process we started leaves those holding the GPUs. The server therefore runs in its own session (so its own
process group, which signals sent to the caller's terminal group do not reach), and on every exit (success,
error, Ctrl-C, SIGTERM, SIGHUP turned into `Interrupted`) the whole group gets SIGTERM, then SIGKILL after a
grace period, and we wait until no process of the group is left. A caller killed outright (SIGKILL: an OOM
kill, a CI job's hard timeout) runs no clean-up: on Linux the server is started with PR_SET_PDEATHSIG, so the
kernel kills it with its parent (SGLang's own workers die with it the same way).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ..core.records import build_root
from ..core.safefiles import containing_root, open_log

TERM_GRACE_S = 10.0
GONE_WAIT_S = 10.0


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick). The server binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_process(
    argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: str | None = None,
    log_root: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `argv` in a new session with stdout and stderr in `log_path` (never through a link out of its
    build folder, nor a link at it); end its process group on exit."""
    with open_log(log_root or containing_root(log_path.parent, build_root()), log_path) as log:
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=cwd, preexec_fn=_dies_with_parent(),
        )
    try:
        yield proc
    finally:
        # Shield the clean-up from a second Ctrl-C, as running_container does for its removal.
        for _ in range(3):
            try:
                end_process_group(proc)
                break
            except KeyboardInterrupt:
                continue


PR_SET_PDEATHSIG = 1


def _dies_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec so that the kernel SIGKILLs it when this process dies however it dies
    (None off Linux). Looked up here, before the fork: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above: nobody will end this server
            os._exit(1)
    return arm


def end_process_group(proc: subprocess.Popen[bytes], *, grace_s: float | None = None) -> None:
    """SIGTERM to the group, SIGKILL after `grace_s` (default TERM_GRACE_S), then wait until the group is empty."""
    grace_s = TERM_GRACE_S if grace_s is None else grace_s
    pgid = proc.pid  # start_new_session: the leader's pid is the group id, even after the leader exits
    if not _signal_group(pgid, signal.SIGTERM):
        proc.wait()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid, proc):
        time.sleep(0.1)
    if _group_alive(pgid, proc):
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GONE_WAIT_S)
    deadline = time.monotonic() + GONE_WAIT_S
    while time.monotonic() < deadline and _group_alive(pgid, proc):
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.1)


def _signal_group(pgid: int, signum: int) -> bool:
    """False when the group has no process left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member changed its user: it still exists
    return True


def _group_alive(pgid: int, proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader, or it stays a zombie member of the group
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    return _signal_group(pgid, 0)


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids of the group from /proc; None where /proc cannot be read (not Linux).

    A grandchild that died while its parent was killed stays a zombie until init reaps it; it holds no
    GPU and no port, so it does not count as left over."""
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return None
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def log_tail(path: Path, lines: int) -> list[str]:
    """The last non-empty lines of a server log (nothing if it was never written)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
