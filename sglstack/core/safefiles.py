"""Writing under the build root safely: whole files, no link followed out of its folder.

- `write_text`: a temp file in the same folder (created exclusively, so never through a link), fsync,
  then an atomic rename. A reader sees the old file or the new one, never half; a full disk or a
  read-only folder is a one-line `OutputNotWritable` naming the file, and leaves no temp file behind.
  A file that already holds those bytes (and mode) is not touched: nothing changed, no new mtime.
- `check_inside`: no folder on the way from the root to a path is a link that leads out of the root (a
  `context` or `Dockerfile` link to elsewhere would make us write, or delete, someone else's files).
- `open_nofollow` / `open_log` / `create_empty`: what cannot be written whole by rename (an append, a
  log a child process writes into, an empty file left for a person to fill): opened with O_NOFOLLOW after
  every folder on the way is checked, a link at the file refused. `write_with`: as
  `write_text`, streamed. `probe_folder`: can a file be written there at all, asked before work starts.
  Every file sglstack writes goes through one of these (tests/unit/test_writers.py walks the code).
- `replace_folder`: a folder (the build context) filled beside the old one, then swapped in.
- `folderlock` (its own module): the one lock a stack's build, deploy, bisect and render take, and the lock of
  one input file.
- `replacing` (its own module): several files that must agree, replaced together or not at all.

Temp files are removed on every exit Python sees (an exception, Ctrl-C, SIGTERM as `Interrupted`).
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
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import SglstackError, one_line
from .inputs import file_kind
from .signals import deferred


class OutputNotWritable(SglstackError):
    """A file the task writes cannot be written (full disk, read-only folder, a link out of its folder)."""

    reason = ""  # the cause alone ("No space left on device"), where a caller words its own line



def reason_of(exc: OSError) -> str:
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
        error = OutputNotWritable(f"{folder}: cannot be created ({reason_of(exc)})")
        error.reason = reason_of(exc)
        raise error from None


def write_text(root: Path, path: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write `path` whole or not at all (see the module's doc); returns `path`."""
    return write_bytes(root, path, text.encode("utf-8"), mode=mode)


def write_bytes(root: Path, path: Path, data: bytes, *, mode: int = 0o644) -> Path:
    """`write_with` of `data`; a file that already holds exactly `data` with `mode` is left alone, its mtime
    too (a task that finds nothing to change must not show a change to `git status`, make or a watcher)."""
    check_inside(root, path)
    if holds(path, data, mode):
        return path
    return write_with(root, path, lambda fh: fh.write(data), mode=mode)


def holds(path: Path, data: bytes, mode: int) -> bool:
    """Whether `path` is a regular file (not a link) of exactly `data` and permission bits `mode`."""
    try:
        st = os.lstat(path)
        return (stat.S_ISREG(st.st_mode) and st.st_size == len(data) and stat.S_IMODE(st.st_mode) == mode
                and path.read_bytes() == data)
    except OSError:
        return False


def write_with(root: Path, path: Path, fill: Callable[[BinaryIO], object], *, mode: int = 0o644,
               durable: bool = True) -> Path:
    """`write_bytes` with the content written by `fill(fh)` (a stream, an archive member, a JSON dump).
    `durable=False` skips the fsync: for scratch files in a temporary folder, gone after the task anyway
    (an fsync of each of a wheel's 1.6 GB of members would cost more than unpacking them)."""
    make_folder(root, path.parent)
    check_inside(root, path)
    _refuse_special(path)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # replaces a link at `path` itself: its target is never written
        tmp = None
    except OSError as exc:
        raise OutputNotWritable(f"{path}: cannot be written ({reason_of(exc)})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def _refuse_special(path: Path) -> None:
    """A folder, a FIFO, a socket or a device where a file is to be written is refused: the rename that
    writes a file whole would put a regular file in its place (as root, `--out /dev/null` would end the
    machine's /dev/null). A link is replaced itself, never its target (`write_with`)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # nothing there yet (or nothing we may look at: the write says why)
    if stat.S_ISDIR(mode):
        raise OutputNotWritable(f"{path}: cannot be written (it is a folder)")
    kind = file_kind(mode) if not stat.S_ISLNK(mode) else None
    if kind:
        raise OutputNotWritable(f"{path}: cannot be written (it is {kind}, not a regular file: not replaced)")


def open_nofollow(root: Path, path: Path, flags: int, *, mode: int = 0o644) -> int:
    """`os.open(path, flags | O_NOFOLLOW)` after its folder is made, no folder on the way being a link out
    of `root`: for what cannot be written whole by rename (an append, a lock, a log a child process writes
    into). A link at `path` itself is refused, with one line; the descriptor is the caller's to close."""
    make_folder(root, path.parent)
    check_inside(root, path)
    try:
        # O_NONBLOCK: opening a FIFO for writing would wait for a reader that never comes (a hang, not an error).
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise OutputNotWritable(one_line(
                f"{path}: a link to {_link_target(path)}: not followed (sglstack writes this file itself; "
                "remove the link)")) from None
        if exc.errno == errno.ENXIO:
            raise _not_a_regular_file(path, "a FIFO") from None
        raise _not_writable(path, exc) from None
    kind = file_kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise _not_a_regular_file(path, kind)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def not_a_file(path: Path) -> str | None:
    """What is at `path` when it exists and is not a regular file (through a link within reach), else None."""
    try:
        return file_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        return f"a link to {_link_target(path)}, which does not exist" if path.is_symlink() else None
    except OSError as exc:
        return reason_of(exc)


def _not_a_regular_file(path: Path, kind: str) -> OutputNotWritable:
    error = OutputNotWritable(f"{path}: cannot be written ({kind}, not a regular file)")
    error.reason = f"{kind}, not a regular file"
    return error


def _not_writable(path: Path, exc: OSError) -> OutputNotWritable:
    """`PATH: cannot be written (why)`, with the why alone as `.reason`."""
    error = OutputNotWritable(f"{path}: cannot be written ({reason_of(exc)})")
    error.reason = reason_of(exc)
    return error


def refuse_link(root: Path, path: Path) -> None:
    """The line `open_nofollow` would refuse `path` with, asked before the work that then opens it starts."""
    check_inside(root, path)
    if path.is_symlink():
        raise OutputNotWritable(one_line(
            f"{path}: a link to {_link_target(path)}: not followed (sglstack writes this file itself; "
            "remove the link)"))


def open_log(root: Path, path: Path, *, append: bool = False, mode: int = 0o644) -> BinaryIO:
    """A log opened for writing (truncated, or appended to) as `open_nofollow` opens it: a server's or a
    build's output, whose descriptor a child process writes into, so it cannot be renamed in whole."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(open_nofollow(root, path, flags, mode=mode), "ab" if append else "wb")


def create_empty(root: Path, path: Path, *, mode: int = 0o644) -> bool:
    """Create `path` empty unless it exists (True when created); a link at `path` is refused, never
    followed (a link to a missing file would otherwise create that file wherever it points; one out of
    `root` is refused even when its file exists, as `check_inside` refuses it)."""
    check_inside(root, path)
    if path.is_symlink() and path.is_file():
        return False  # a link within the root to a file of ours
    try:
        fd = open_nofollow(root, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode=mode)
    except OutputNotWritable:
        if path.is_file() and not path.is_symlink():
            return False
        kind = not_a_file(path)
        if kind is not None and not path.is_symlink():  # a FIFO or a folder in its place: say so, not "File exists"
            raise _not_a_regular_file(path, kind) from None
        raise
    os.close(fd)
    return True


def probe_folder(root: Path, folder: Path, *, size: int = 0, name: str = "sglstack") -> None:
    """Raise `OutputNotWritable` unless a file of `size` bytes can be created, written, fsynced and removed
    in `folder` (made if missing, no link out of `root` on the way): a full disk, a read-only mount or a
    folder even root may not write to shows here, before a task changes anything. The probe is named after
    `name` (the file the task will write), so that one left by a killed process says what it was."""
    make_folder(root, folder)
    probe: str | None = None
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".probe")
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\n" * size)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise _not_writable(folder, exc) from None
    finally:
        if probe is not None:
            with contextlib.suppress(OSError):
                os.unlink(probe)


def keep_link(root: Path, path: Path, kept: Path) -> None:
    """Hard-link `kept` to the file at `path` (its old content stays reachable when `path` is replaced by
    rename; putting it back is then a rename, which needs no free space). Neither may be a symlink."""
    check_inside(root, kept)
    if path.is_symlink() or kept.is_symlink():
        raise OutputNotWritable(f"{path}: a link: not followed (sglstack writes this file itself; remove the link)")
    try:
        os.link(path, kept, follow_symlinks=False)
    except OSError as exc:
        raise OutputNotWritable(f"{kept}: cannot be written ({reason_of(exc)})") from None


def rename_inside(root: Path, source: Path, target: Path) -> None:
    """`os.replace(source, target)`, neither reached through a folder that is a link out of `root`: a rename
    moves a link itself, never what it points to, but a folder on the way that leads out would move, or
    replace, someone else's file."""
    check_inside(root, source)
    check_inside(root, target)
    try:
        os.replace(source, target)
        if os.path.lexists(source) and os.path.samestat(os.lstat(source), os.lstat(target)):
            os.unlink(source)  # two links to one file: rename(2) leaves both (a kept copy of a file left as it was)
    except OSError as exc:
        raise _not_writable(target, exc) from None


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "elsewhere"


def remove_file(root: Path, path: Path) -> None:
    """Remove `path` (a link is removed, never its target); missing is fine."""
    check_inside(root, path.parent)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputNotWritable(f"{path}: cannot be removed ({reason_of(exc)})") from None


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
        try:
            fill(Path(new))
        except OutputNotWritable as exc:
            # named where the file was going: the temporary folder it names is removed below
            error = OutputNotWritable(str(exc).replace(new, str(folder)))
            error.reason = exc.reason
            raise error from None
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
        raise OutputNotWritable(one_line(f"{folder}: cannot be written ({reason_of(exc)}){kept}")) from None
    finally:
        for leftover in (new, aside):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
