"""Replacing files that must agree (stacks.yaml and its new lock) whole, together or not at all.

`replace_together`: each file is written whole beside its place (`staged`) before any is renamed in, and the
earlier ones are put back if a later rename fails. A file the user owns (stacks.yaml) is edited through a link
to it (the caller passes the file the link leads to: the target is replaced, the link stays) and keeps its
mode; a new file takes the mode of its siblings (`sibling_mode`), else 0644 under the umask (mkstemp's 0600 is
for secrets). One of the safe writers tests/unit/test_writers.py allows, beside `safefiles`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from .safefiles import OutputNotWritable, holds, reason_of
from .signals import deferred


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
        raise OutputNotWritable(f"{path}: cannot be written ({reason_of(exc)}); {untouched}") from None
    try:
        yield Path(tmp)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def replace_together(files: Sequence[tuple[Path, bytes, int]]) -> None:
    """Replace each `(path, data, mode)` whole, all of them or none: every new file is first written
    beside its place (where a full disk stops it, nothing replaced), then each is renamed into place in
    order; if a rename fails, the files renamed before it are put back (each old file is kept under a
    second name until the end, a hard link: putting it back is a rename, with no data to write). No link
    at a path is followed: pass the file a link leads to, to write through it. A file that already holds
    its data and mode is left alone (its mtime too): an edit that changes nothing shows no change."""
    files = [(path, data, mode) for path, data, mode in files if not holds(path, data, mode)]
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
                    raise OutputNotWritable(f"{path}: cannot be written ({reason_of(exc)}); {undone or untouched}"
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
        raise OutputNotWritable(f"{path}: cannot be replaced ({reason_of(exc)}); it is as it was") from None
    try:
        yield aside
    finally:
        with contextlib.suppress(OSError):
            os.unlink(aside)
