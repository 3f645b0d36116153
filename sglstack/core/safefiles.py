"""Writing under the build root safely: whole files, no link followed out of its folder, one task per stack.

- `write_text`: a temp file in the same folder (created exclusively, so never through a link), fsync,
  then an atomic rename. A reader sees the old file or the new one, never half; a full disk or a
  read-only folder is a one-line `OutputNotWritable` naming the file, and leaves no temp file behind.
- `check_inside`: no folder on the way from the root to a path is a link that leads out of the root (a
  `context` or `Dockerfile` link to elsewhere would make us write, or delete, someone else's files).
- `replace_folder`: a folder (the build context) filled beside the old one, then swapped in.
- `read_small_file`: reading a file a user names (a key), bounded: a FIFO, a device or a folder is refused
  without blocking on it, and no more than the limit is read whatever the file claims.
- `folder_lock`: the one lock a stack's build, deploy, bisect and render take (`build/NAME/.lock`): a
  second task of the same stack is refused at once with one line naming the holder, rather than left
  waiting: a build or a bisect holds it for an hour, and a silent wait looks like a hang to a person and
  times out a CI job with no word of why.

The kernel drops an flock when its process dies however it dies (SIGKILL too), so a lock is never left
held; temp files are removed on every exit Python sees (an exception, Ctrl-C, SIGTERM as `Interrupted`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import SglstackError, one_line
from .signals import deferred

LOCK_NAME = ".lock"
# EX_TEMPFAIL (sysexits.h): "try again later". Distinct from every task's own codes (bisect's 1 is
# "undecided", 2 bad input), so a script can tell "busy" from a verdict.
BUSY_EXIT = 75


class OutputNotWritable(SglstackError):
    """A file the task writes cannot be written (full disk, read-only folder, a link out of its folder)."""


class UnreadableFile(ValueError):
    """A file a user named cannot be read as one small regular file; the message is the reason alone (no
    path, no content), for the caller to put after the option or key that named it."""


class StackBusy(SglstackError):
    """Another task of the same stack holds its lock."""

    exit_code = BUSY_EXIT


def _reason(exc: OSError) -> str:
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        # copytree gathers each file's failure as (src, dst, "[Errno 28] No space left on device: ...").
        why = str(exc.args[0][0][-1])
        found = re.match(r"\[Errno \d+\] ([^:]+)", why)
        return found.group(1) if found else why
    return exc.strerror or type(exc).__name__


def containing_root(path: Path, build_dir: Path) -> Path:
    """The folder no link may lead out of: the build root when `path` is under it, else `path`'s own folder
    (an `--out DIR` elsewhere)."""
    absolute = Path(os.path.abspath(path))
    root = Path(os.path.abspath(build_dir))
    return root if absolute == root or root in absolute.parents else absolute if path.is_dir() else absolute.parent


def check_inside(root: Path, path: Path) -> None:
    """Raise `OutputNotWritable` when a part of `path` below `root` (the path itself included) is a link
    whose target lies outside `root`. Parts that do not exist yet are fine: we create them as folders."""
    root_abs = Path(os.path.abspath(root))
    real_root = Path(os.path.realpath(root_abs))
    absolute = Path(os.path.abspath(path))
    try:
        parts = absolute.relative_to(root_abs).parts
    except ValueError:
        return  # not under this root: the caller's root is the path's own folder
    current = root_abs
    for part in parts:
        current = current / part
        if not current.is_symlink():
            continue
        target = Path(os.path.realpath(current))
        if target != real_root and real_root not in target.parents:
            raise OutputNotWritable(one_line(
                f"{current}: a link to {os.readlink(current)}, outside {root}: not followed "
                "(nothing under the build folder is written through a link out of it; remove the link)"))


def make_folder(root: Path, folder: Path) -> None:
    """`mkdir -p folder`, refusing a link out of `root` on the way; errors as one line."""
    check_inside(root, folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputNotWritable(f"{folder}: cannot be written (a file is in the way of this folder)") from None
    except OSError as exc:
        raise OutputNotWritable(f"{folder}: cannot be created ({_reason(exc)})") from None


def write_text(root: Path, path: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write `path` whole or not at all (see the module's doc); returns `path`."""
    return write_bytes(root, path, text.encode("utf-8"), mode=mode)


def write_bytes(root: Path, path: Path, data: bytes, *, mode: int = 0o644) -> Path:
    make_folder(root, path.parent)
    check_inside(root, path)
    if path.is_dir() and not path.is_symlink():
        raise OutputNotWritable(f"{path}: cannot be written (it is a folder)")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # replaces a link at `path` itself: its target is never written
        tmp = None
    except OSError as exc:
        raise OutputNotWritable(f"{path}: cannot be written ({_reason(exc)})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
    return f"{kind}, not a regular file"


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path` (a link to one is fine), at most `limit` of them.

    Anything else is refused before a byte is read: a FIFO or a terminal would block the task forever, a
    device would feed it without end. The open is non-blocking (a FIFO swapped in after the stat does not
    hang it) and the fstat of the open file is what decides. `UnreadableFile` says why, in words.
    """
    try:
        problem = _not_regular(os.stat(path).st_mode)
        if problem:
            raise UnreadableFile(problem)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        try:
            problem = _not_regular(os.fstat(fd).st_mode)
            if problem:
                raise UnreadableFile(problem)
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise UnreadableFile(exc.strerror or type(exc).__name__) from None
    if size > limit:
        raise UnreadableFile(f"larger than {limit // 1024} KiB")
    return b"".join(chunks)


def remove_file(root: Path, path: Path) -> None:
    """Remove `path` (a link is removed, never its target); missing is fine."""
    check_inside(root, path.parent)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputNotWritable(f"{path}: cannot be removed ({_reason(exc)})") from None


def replace_folder(root: Path, folder: Path, fill: Callable[[Path], None]) -> None:
    """Fill a new folder beside `folder` with `fill(tmp)`, then swap it in for the old one.

    The old folder stays whole until the new one is complete; on any failure (a full disk, a signal) the
    half-filled new one is removed and the old one is left as it was (were it moved aside and could not be
    put back, it is kept there, and the error names where). A link at `folder` is refused: it would point
    the build at files that are not ours, or make us delete them.
    """
    make_folder(root, folder.parent)
    if folder.is_symlink():
        raise OutputNotWritable(one_line(
            f"{folder}: a link to {os.readlink(folder)}: not followed (sglstack writes this folder itself; "
            "remove the link)"))
    if folder.exists() and not folder.is_dir():
        raise OutputNotWritable(f"{folder}: cannot be written (a file is in the way of this folder)")
    new: str | None = None
    aside: str | None = None
    try:
        new = tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp")
        os.chmod(new, 0o755)  # mkdtemp's 0700 is for secrets; a context folder is read by the engine
        fill(Path(new))
        with deferred():  # a signal between the two renames would leave no context at all
            if folder.exists():
                aside = tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old")
                os.replace(folder, aside)  # an empty folder is replaced by a rename
            os.replace(new, folder)
            new = None
    except OSError as exc:
        kept = ""
        if aside is not None and not folder.exists():
            try:
                os.replace(aside, folder)
            except OSError:
                # The old folder is the only whole one left: keep it where it is and say where.
                kept = f"; the old one is kept as {aside}"
            aside = None
        raise OutputNotWritable(one_line(f"{folder}: cannot be written ({_reason(exc)}){kept}")) from None
    finally:
        for leftover in (new, aside):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)


# ---- one task per stack folder ---------------------------------------------------------------------

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
        raise OutputNotWritable(f"{path}: the lock cannot be opened ({_reason(exc)})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputNotWritable(f"{path}: cannot be locked ({_reason(exc)})") from None
            who = _holder(fd)
            name = f"stack '{stack}'" if stack else str(folder)
            raise StackBusy(f"{name} is busy: {who} holds {path}; one build, deploy, bisect or render of a "
                            f"stack at a time: run `invoke {task}` again when it ends") from None
        # Who holds it, for the refusal above (best effort: a full disk must not stop the task).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
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
