"""Writing under the build root safely: whole files, no link followed out of its folder, one task per stack.

- `write_text`: a temp file in the same folder (created exclusively, so never through a link), fsync,
  then an atomic rename. A reader sees the old file or the new one, never half; a full disk or a
  read-only folder is a one-line `OutputNotWritable` naming the file, and leaves no temp file behind.
- `check_inside`: no folder on the way from the root to a path is a link that leads out of the root (a
  `context` or `Dockerfile` link to elsewhere would make us write, or delete, someone else's files).
- `open_nofollow` / `open_log` / `create_empty`: what cannot be written whole by rename (an append, a
  log a child process writes into, an empty file left for a person to fill): opened with O_NOFOLLOW after
  every folder on the way is checked, a link at the file refused. `copy_file` / `write_with`: as
  `write_text`, streamed. `probe_folder`: can a file be written there at all, asked before work starts.
  Every file sglstack writes goes through one of these (tests/unit/test_writers.py walks the code).
- `replace_folder`: a folder (the build context) filled beside the old one, then swapped in.
- `read_small_file`: reading a file a user names (a key), bounded: a FIFO, a device or a folder is refused
  without blocking on it, and no more than the limit is read whatever the file claims.
- `folder_lock`: the one lock a stack's build, deploy, bisect and render take (`build/NAME/.lock`): a
  second task of the same stack is refused at once with one line naming the holder, rather than left
  waiting: a build or a bisect holds it for an hour, and a silent wait looks like a hang to a person and
  times out a CI job with no word of why.
- `replace_together`: several files that must agree (stacks.yaml and a lock), each written whole beside
  its place (`staged`) before any is renamed in, the earlier ones put back if a later rename fails;
  `edit_in_place` for one. A file the user owns (stacks.yaml) is edited through a link to it (the target
  is replaced, the link stays) and keeps its mode; a new file takes the mode of its siblings
  (`sibling_mode`), else 0644 under the umask (mkstemp's 0600 is for secrets).
- `file_lock`: the lock of one input file (an flock on the file itself), refused at once like
  `folder_lock`: two `upgrade --write` of one matrix would each write the file they read, and the second
  would drop the first's entry.

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from .errors import SglstackError, one_line
from .signals import deferred

LOCK_NAME = ".lock"
# EX_TEMPFAIL (sysexits.h): "try again later". Distinct from every task's own codes (bisect's 1 is
# "undecided", 2 bad input), so a script can tell "busy" from a verdict.
BUSY_EXIT = 75


class OutputNotWritable(SglstackError):
    """A file the task writes cannot be written (full disk, read-only folder, a link out of its folder)."""

    reason = ""  # the cause alone ("No space left on device"), where a caller words its own line


class UnreadableFile(ValueError):
    """A file a user named cannot be read as one small regular file; the message is the reason alone (no
    path, no content), for the caller to put after the option or key that named it."""


class StackBusy(SglstackError):
    """Another task of the same stack holds its lock."""

    exit_code = BUSY_EXIT


class FileBusy(SglstackError):
    """Another task holds the lock of a file this one edits."""

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
        error = OutputNotWritable(f"{folder}: cannot be created ({_reason(exc)})")
        error.reason = _reason(exc)
        raise error from None


def write_text(root: Path, path: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write `path` whole or not at all (see the module's doc); returns `path`."""
    return write_bytes(root, path, text.encode("utf-8"), mode=mode)


def write_bytes(root: Path, path: Path, data: bytes, *, mode: int = 0o644) -> Path:
    return write_with(root, path, lambda fh: fh.write(data), mode=mode)


def copy_file(root: Path, source: Path, path: Path, *, mode: int = 0o644) -> Path:
    """Copy `source` to `path` as `write_bytes` writes (whole, no link followed), streamed: a wheel or a
    log need not fit in memory."""
    try:
        src = open(source, "rb")  # noqa: SIM115  # closed below; its own error names the source
    except OSError as exc:
        raise OutputNotWritable(f"{source}: cannot be read ({_reason(exc)})") from None
    with src:
        return write_with(root, path, lambda fh: shutil.copyfileobj(src, fh, 1 << 22), mode=mode)


def write_with(root: Path, path: Path, fill: Callable[[BinaryIO], object], *, mode: int = 0o644,
               durable: bool = True) -> Path:
    """`write_bytes` with the content written by `fill(fh)` (a stream, an archive member, a JSON dump).
    `durable=False` skips the fsync: for scratch files in a temporary folder, gone after the task anyway
    (an fsync of each of a wheel's 1.6 GB of members would cost more than unpacking them)."""
    make_folder(root, path.parent)
    check_inside(root, path)
    if path.is_dir() and not path.is_symlink():
        raise OutputNotWritable(f"{path}: cannot be written (it is a folder)")
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
        raise OutputNotWritable(f"{path}: cannot be written ({_reason(exc)})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def umask() -> int:
    """The process's umask (read by setting it, at once put back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sibling_mode(path: Path, pattern: str) -> int:
    """The permission bits for a new file at `path`: those of `path` if it exists, else those of the first
    sibling matching `pattern` (by name), else 0644 under the umask."""
    siblings = sorted(p for p in path.parent.glob(pattern) if not p.name.startswith(".")) \
        if path.parent.is_dir() else []
    for candidate in (path, *siblings):
        with contextlib.suppress(OSError):
            info = os.stat(candidate)
            if stat.S_ISREG(info.st_mode):
                return stat.S_IMODE(info.st_mode)
    return 0o644 & ~umask()


@contextlib.contextmanager
def staged(path: Path, data: bytes, *, mode: int, untouched: str = "it is as it was") -> Iterator[Path]:
    """`data` whole in a new temp file beside `path` (fsynced, `mode` set): the caller renames it onto
    `path` with `os.replace`. Whatever the block does, the temp file is gone after it; a failure to write
    it (a full disk, a read-only folder) is `OutputNotWritable` naming `path`."""
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise OutputNotWritable(f"{path}: cannot be written ({_reason(exc)}); {untouched}") from None
    try:
        yield Path(tmp)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def edit_in_place(path: Path, data: bytes) -> Path:
    """Replace the content of the user's file `path` whole or not at all, through a link (the file it
    points to is replaced; the link stays), its mode kept; returns the file replaced."""
    real = Path(os.path.realpath(path))
    replace_together([(real, data, sibling_mode(real, real.name))])
    return real


def replace_together(files: Sequence[tuple[Path, bytes, int]]) -> None:
    """Replace each `(path, data, mode)` whole, all of them or none: every new file is first written
    beside its place (where a full disk stops it, nothing replaced), then each is renamed into place in
    order; if a rename fails, the files renamed before it are put back (each old file is kept under a
    second name until the end, a hard link: putting it back is a rename, with no data to write). No link
    at a path is followed: pass the file a link leads to, to write through it."""
    with contextlib.ExitStack() as stack:
        untouched = "it is as it was" if len(files) == 1 else "no file was replaced"
        staged_files = [stack.enter_context(staged(path, data, mode=mode, untouched=untouched))
                        for path, data, mode in files]
        kept = [stack.enter_context(_kept(path)) for path, _, _ in files]
        done: list[int] = []
        with deferred():  # a signal between two renames would leave the files disagreeing
            for i, ((path, _, _), new) in enumerate(zip(files, staged_files, strict=True)):
                try:
                    os.replace(new, path)
                except OSError as exc:
                    undone = _put_back([(files[j][0], kept[j]) for j in reversed(done)])
                    raise OutputNotWritable(f"{path}: cannot be written ({_reason(exc)}); {undone or untouched}"
                                            ) from None
                done.append(i)


def _put_back(files: Sequence[tuple[Path, Path | None]]) -> str:
    """Put each kept old file back at its path (None: there was none); '' when all went back, else what
    is left where."""
    left = []
    for path, old in files:
        try:
            if old is None:
                path.unlink()
            else:
                os.replace(old, path)
        except OSError:  # a rename in this folder just worked: all but never reached
            left.append(f"{path} is the new one" + (f" (the old one was {old.name})" if old else ""))
    return "; ".join(left)


@contextlib.contextmanager
def _kept(path: Path) -> Iterator[Path | None]:
    """A second name for the file at `path` (a link at `path` itself, not its target), or None when there
    is none; removed after the block."""
    if not os.path.lexists(path):
        yield None
        return
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.old")
    try:
        try:
            os.link(path, aside, follow_symlinks=False)
        except OSError:  # a filesystem without hard links: a copy, before anything is replaced
            shutil.copy2(path, aside, follow_symlinks=False)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        raise OutputNotWritable(f"{path}: cannot be replaced ({_reason(exc)}); it is as it was") from None
    try:
        yield aside
    finally:
        with contextlib.suppress(OSError):
            os.unlink(aside)


def open_nofollow(root: Path, path: Path, flags: int, *, mode: int = 0o644) -> int:
    """`os.open(path, flags | O_NOFOLLOW)` after its folder is made, no folder on the way being a link out
    of `root`: for what cannot be written whole by rename (an append, a lock, a log a child process writes
    into). A link at `path` itself is refused, with one line; the descriptor is the caller's to close."""
    make_folder(root, path.parent)
    check_inside(root, path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise OutputNotWritable(one_line(
                f"{path}: a link to {_link_target(path)}: not followed (sglstack writes this file itself; "
                "remove the link)")) from None
        raise _not_writable(path, exc) from None


def _not_writable(path: Path, exc: OSError) -> OutputNotWritable:
    """`PATH: cannot be written (why)`, with the why alone as `.reason`."""
    error = OutputNotWritable(f"{path}: cannot be written ({_reason(exc)})")
    error.reason = _reason(exc)
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
        raise OutputNotWritable(f"{kept}: cannot be written ({_reason(exc)})") from None


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "elsewhere"


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
        raise OutputNotWritable(f"{path}: cannot be locked ({_reason(exc)})") from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputNotWritable(f"{path}: cannot be locked ({_reason(exc)})") from None
            raise FileBusy(f"{path} is busy: another task is rewriting it or writing from it: run `invoke {task}` "
                           "again when that one ends") from None
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
