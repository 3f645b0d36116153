"""The build folder, UTC time, the per-stack lock, and the append-only JSON-lines stores under it
(publish and deploy records, smoke history, the bisect log).

Every JSON-lines store goes through `append_jsonl` and `read_jsonl`, so that each has the same
guarantees: whole lines written with one write and an fsync, sorted keys, no interleaving between
concurrent writers and no reader seeing half an append (writers take a sibling lock file exclusively,
readers shared), a torn last line (a full disk, a kill mid-write) skipped by readers and moved aside by
the next writer, and a one-line error naming the file and line of any other bad entry.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import one_line
from .inputs import loads
from .safefiles import OutputNotWritable, check_inside, containing_root, folder_lock, make_folder

T = TypeVar("T")
BUILD_DIR_ENV = "SGLSTACK_BUILD_DIR"
__all__ = ["OutputNotWritable", "append_jsonl", "build_root", "read_jsonl", "require_writable", "stack_lock"]


def build_root() -> Path:
    """build/, or SGLSTACK_BUILD_DIR: the one tree every output lives under (rendered files, build and
    smoke records, publish and deploy records)."""
    return Path(os.environ.get(BUILD_DIR_ENV) or "build")


def stack_lock(stack_name: str, task: str) -> contextlib.AbstractContextManager[None]:
    """The one lock of a stack (`build/NAME/.lock`), taken by build, deploy, bisect and render: a second
    task of the same stack is refused with one line (`safefiles.folder_lock` says why not a wait)."""
    return folder_lock(build_root() / stack_name, task, root=build_root(), stack=stack_name)


def require_writable(path: Path, *, what: str) -> None:
    """Raise `OutputNotWritable` now, naming `path`, unless a file can be created at `path` later.

    Creates the missing parent folders (the task would create them anyway) and probes the folder with a
    temporary file, which is what catches read-only mounts and permissions (root ignores mode bits).
    """
    def fail(reason: str) -> OutputNotWritable:
        return OutputNotWritable(f"{what} {path}: cannot be written ({reason})")

    if path.is_dir():
        raise fail("it is a folder")
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists() or p == p.parent)
    if existing.exists() and not existing.is_dir():
        raise fail(f"{existing} is not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
        if path.exists() and not os.access(path, os.W_OK):
            raise fail("permission denied")
    except OSError as exc:
        raise fail(exc.strerror or type(exc).__name__) from None


def utc_now() -> dt.datetime:
    """Now, in UTC: every time sglstack records or compares is UTC."""
    return dt.datetime.now(dt.UTC)


def utc_timestamp(when: dt.datetime | None = None) -> str:
    """`2026-12-02T18:48:09Z`: the one timestamp format of every record."""
    return (when or utc_now()).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_today() -> dt.date:
    """Today's date in UTC (tags carry it): a local date would change tags at local midnight."""
    return utc_now().date()


def _lock_file(path: Path) -> Path:
    """The sibling lock of a JSON-lines file: `.NAME.lock`. Not the file itself, so that a reader's
    shared lock and a writer's exclusive one meet even while a writer moves a torn tail aside."""
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    try:
        fd = os.open(_lock_file(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exclusive:
            raise OutputNotWritable(f"{_lock_file(path)}: the lock cannot be opened "
                                    f"({exc.strerror or type(exc).__name__})") from None
        yield  # a reader in a read-only folder: no writer can be there either
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _warn(message: str) -> None:
    print(f"warning: {one_line(message)}", file=sys.stderr)


def append_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append JSON lines whole, or not at all, under an exclusive lock (readers take it shared).

    One `write` + `fsync` of every line of the call. A write cut short (a full disk) is cut back to where
    it started, so the file never keeps half a line from us. A torn last line left by a process killed
    mid-write is moved to `NAME.torn` (kept for a person to look at) before the new lines, so they start
    on a line of their own and the file holds only whole records again.
    """
    data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8")
    if not data:
        return
    make_folder(containing_root(path.parent, build_root()), path.parent)
    check_inside(containing_root(path.parent, build_root()), path)
    with _locked(path, exclusive=True):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise OutputNotWritable(f"{path}: cannot be written ({exc.strerror or type(exc).__name__})") from None
        try:
            size = _drop_torn_tail(path, fd)
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no half line of ours stays behind
                raise OutputNotWritable(f"{path}: the record was not written "
                                        f"({exc.strerror or type(exc).__name__}); the file is as it was") from None
        finally:
            os.close(fd)


def _drop_torn_tail(path: Path, fd: int) -> int:
    """Make the file end with a newline (called under the exclusive lock); return its size after.

    A last line without its newline that is a whole JSON value only lost the newline: it gets one. Any
    other unterminated tail is half a record: it moves to `NAME.torn` and is cut off.
    """
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = size
    while start > 0:
        chunk_start = max(0, start - 65536)
        chunk = os.pread(fd, start - chunk_start, chunk_start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            start = chunk_start + newline + 1
            break
        start = chunk_start
    tail = os.pread(fd, size - start, start)
    try:
        loads(tail)
    except ValueError:
        pass
    else:
        os.write(fd, b"\n")
        return size + 1
    torn = path.with_name(path.name + ".torn")
    try:
        with open(torn, "ab") as fh:
            fh.write(tail + b"\n")
    except OSError:
        pass  # kept if possible; the store itself must heal either way
    os.ftruncate(fd, start)
    _warn(f"{path}: a torn last line ({len(tail)} bytes, a write cut short) was moved to {torn.name}")
    return start


def read_jsonl(path: Path, parse: Callable[[Any], T], bad_line: Callable[[int], Exception]) -> list[T]:
    """Every non-blank line of `path` through `parse` ([] when the file does not exist yet), read under
    the store's shared lock.

    A torn last line (no newline, not a whole JSON value: a writer was killed or the disk filled) is
    skipped with a warning; the next append moves it aside. Any other bad line is `bad_line(n)`, the
    caller's own error for line n (invalid JSON, or a row `parse` rejects with ValueError/KeyError/
    TypeError), so each record kind keeps its own message and error class.
    """
    if not path.is_file():
        return []
    with _locked(path, exclusive=False):
        raw = path.read_bytes()
    lines = raw.split(b"\n")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        last_unterminated = n == len(lines)
        try:
            value = loads(line)
        except ValueError:
            if last_unterminated:
                _warn(f"{path}:{n}: skipped a torn last line (a write cut short); the next append moves it aside")
                break
            raise bad_line(n) from None
        try:
            out.append(parse(value))
        except (ValueError, KeyError, TypeError):
            raise bad_line(n) from None
    return out
