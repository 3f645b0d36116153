"""One task per stack folder, one editor per input file: the locks, refused at once rather than waited for.

`folder_lock`: the one lock a stack's build, deploy, bisect and render take (`build/NAME/.lock`): a
second task of the same stack is refused at once with one line naming the holder, rather than left
waiting: a build or a bisect holds it for an hour, and a silent wait looks like a hang to a person and
times out a CI job with no word of why.
`file_lock`: the lock of one input file (an flock on the file itself), refused at once like
`folder_lock`: two `upgrade --write` of one matrix would each write the file they read, and the second
would drop the first's entry.

The kernel drops an flock when its process dies however it dies (SIGKILL too), so a lock is never left
held.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .clock import utc_timestamp
from .errors import SglstackError, one_line
from .safefiles import OutputNotWritable, check_inside, make_folder, reason_of

LOCK_NAME = ".lock"
# EX_TEMPFAIL (sysexits.h): "try again later". Distinct from every task's own codes (bisect's 1 is
# "undecided", 2 bad input), so a script can tell "busy" from a verdict.
BUSY_EXIT = 75


class StackBusy(SglstackError):
    """Another task of the same stack holds its lock."""

    exit_code = BUSY_EXIT


class FileBusy(SglstackError):
    """Another task holds the lock of a file this one edits."""

    exit_code = BUSY_EXIT



# Held locks of this process, by lock path: a bisect builds with `build_stack`, which takes the same
# stack's lock; an flock on a second descriptor would refuse its own process. Re-entry is per thread: the
# thread holding a lock takes it again; another thread of this process waits for it (`_THREAD_LOCKS`), as
# two builds in one process (a thread pool) would otherwise share, and release, one flock.
_HELD: dict[tuple[str, int], list[int]] = {}
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(key: str) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.Lock())


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
        if text:
            return one_line(text)
    return "another process"


@contextlib.contextmanager
def folder_lock(folder: Path, task: str, *, root: Path | None = None, stack: str | None = None) -> Iterator[None]:
    """Hold `folder/.lock` for the block; a second holder gets `StackBusy` at once (see the module's doc)."""
    make_folder(root or folder, folder)
    path = folder / LOCK_NAME
    check_inside(root or folder, path)
    key = (os.path.realpath(path), threading.get_ident())
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    with _thread_lock(key[0]), _flocked(path, key, task, folder, stack):
        yield


@contextlib.contextmanager
def _flocked(path: Path, key: tuple[str, int], task: str, folder: Path, stack: str | None) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise OutputNotWritable(f"{path}: the lock cannot be opened ({reason_of(exc)})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputNotWritable(f"{path}: cannot be locked ({reason_of(exc)})") from None
            who = _holder(fd)
            name = f"stack '{stack}'" if stack else str(folder)
            raise StackBusy(f"{name} is busy: {who} holds {path}; one build, deploy, bisect or render of a "
                            f"stack at a time: run `invoke {task}` again when it ends") from None
        # Who holds it, for the refusal above (best effort: a full disk must not stop the task).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            since = utc_timestamp()
            os.pwrite(fd, f"invoke {task} (pid {os.getpid()}, since {since})\n".encode(), 0)
        _HELD[key] = [fd, 1]
        try:
            yield
        finally:
            del _HELD[key]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


@contextlib.contextmanager
def file_lock(path: Path, task: str, *, shared: bool = False) -> Iterator[None]:
    """Hold an flock on the file `path` itself (the file a link leads to) for the block: exclusive for a
    task that rewrites it, `shared` for one that writes what follows from it (many at once, none while
    it is rewritten); a holder it cannot join gets `FileBusy` at once (see the module's doc). The file,
    not a sibling `.lock`, so that no stray file is left in a checkout and a read-only one can still be
    locked, and read.

    A writer that replaces the file by a rename keeps the lock on the old file until it ends: a task that
    opens the new one then reads what that writer wrote. One that opened the old file just before, and
    gets its lock just after, read the old text: writers compare the file with what they read before they
    replace it (see `upgrade`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputNotWritable(f"{path}: cannot be locked ({reason_of(exc)})") from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputNotWritable(f"{path}: cannot be locked ({reason_of(exc)})") from None
            raise FileBusy(f"{path} is busy: another task is rewriting it or writing from it: run `invoke {task}` "
                           "again when that one ends") from None
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
