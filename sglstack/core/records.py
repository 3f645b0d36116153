"""The build folder, UTC time (core/clock's, re-exported), the per-stack lock, and the append-only JSON-lines
stores under it (publish and deploy records, smoke history, the bisect log).

Every JSON-lines store goes through `append_jsonl` and `read_jsonl`, so that each has the same
guarantees: whole lines written with one write and an fsync, sorted keys, no interleaving between
concurrent writers and no reader seeing half an append (writers take a sibling lock file exclusively,
readers shared), a torn last line (a full disk, a kill mid-write) skipped by readers and moved aside by
the next writer, and a one-line error naming the file and line of any other bad entry.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError, one_line
from .folderlock import folder_lock
from .inputs import loads
from .safefiles import (
    OutputNotWritable,
    check_inside,
    containing_root,
    make_folder,
    not_a_file,
    open_log,
    open_nofollow,
    probe_folder,
    write_bytes,
)

T = TypeVar("T")
BUILD_DIR_ENV = "SGLSTACK_BUILD_DIR"
__all__ = ["BadLine", "OutputNotWritable", "append_jsonl", "build_root", "check_field_types", "read_jsonl",
           "read_jsonl_lenient", "require_store_writable", "require_writable", "stack_dir", "stack_lock"]


def build_root() -> Path:
    """build/, or SGLSTACK_BUILD_DIR: the one tree every output lives under (rendered files, build and
    smoke records, publish and deploy records)."""
    return Path(os.environ.get(BUILD_DIR_ENV) or "build")


# The layout under the build root, named once: build/STACK/ holds all of one stack's outputs (the render, the
# build record, smoke history, deployments, the bisect and upgrade folders); build/publish/ the releases.
RECORD_FILE = "record.json"  # a stack's build record, in its stack folder
BISECT_DIR, UPGRADE_DIR = "bisect", "upgrade"  # a stack's bisect log and upgrade report, in its stack folder


def stack_folder_name(stack_name: str, platform: str | None = None) -> str:
    """NAME; a further platform of a stack of several (`Stack.lock_platform`, `linux/arm64`): NAME.OS-ARCH."""
    return f"{stack_name}.{platform.replace('/', '-')}" if platform else stack_name


def stack_dir(stack_name: str, root: Path | None = None, *, platform: str | None = None) -> Path:
    """build/STACK (a further platform's: build/STACK.OS-ARCH) under `root` (default: the one build root)."""
    return (root if root is not None else build_root()) / stack_folder_name(stack_name, platform)


def stack_lock(stack_name: str, task: str) -> contextlib.AbstractContextManager[None]:
    """The one lock of a stack (`build/NAME/.lock`), taken by build, deploy, bisect and render: a second
    task of the same stack is refused with one line (`folderlock.folder_lock` says why not a wait)."""
    return folder_lock(stack_dir(stack_name), task, root=build_root(), stack=stack_name)


def require_writable(path: Path, *, what: str, create: bool = True) -> None:
    """Raise `OutputNotWritable` now, naming `path`, unless a file can be created at `path` later.

    Creates the missing parent folders (the task would create them anyway; with `create=False`, for a
    check made before the input is known good, the nearest existing one is probed instead) and probes
    the folder with a temporary file, which is what catches read-only mounts and permissions (root
    ignores mode bits).
    """
    def fail(reason: str) -> OutputNotWritable:
        return OutputNotWritable(f"{what} {path}: cannot be written ({reason})")

    if path.is_dir():
        raise fail("it is a folder")
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists() or p == p.parent)
    if existing.exists() and not existing.is_dir():
        raise fail(f"{existing} is not a folder")
    try:
        # With create=False (a check made before the input is known good) the nearest existing folder is
        # probed, and nothing is made.
        folder = path.parent if create else existing
        probe_folder(containing_root(folder, build_root()), folder, name=path.name)
    except OutputNotWritable as exc:
        if not exc.reason:
            raise  # a link out of the build folder: its own line says so
        raise fail(exc.reason) from None
    if path.exists() and not path.is_symlink() and not os.access(path, os.W_OK):
        raise fail("permission denied")


# What a probe writes: more than the few records one deploy, restore or undeploy appends.
STORE_PROBE_BYTES = 16384


def require_store_writable(path: Path, *, what: str) -> None:
    """Raise `OutputNotWritable` now, naming `path`, unless `append_jsonl(path, ...)` can work: before a
    task changes something its record must then describe (a deploy replacing the running service).

    Refuses a link anywhere on the way (the store, its lock, or a folder leading out of the build root),
    then really writes: opens the lock and the store as `append_jsonl` does, and writes, fsyncs and
    removes a record-sized probe file in the store's folder (a full disk, a read-only mount, a folder
    root may not write to). It cannot promise space a moment later: the writers say what they did anyway.
    """
    def fail(reason: str) -> OutputNotWritable:
        return OutputNotWritable(one_line(f"{what} {path}: cannot be written ({reason})"))

    root = containing_root(path.parent, build_root())
    check_inside(root, path)
    if not path.parent.is_dir():
        # A first record: nothing is made before the task changes something (a refused task leaves no
        # folder behind); the nearest folder there is takes the probe, where the store's folder will be made.
        nearest = next(p for p in Path(os.path.abspath(path.parent)).parents if p.is_dir())
        try:
            probe_folder(containing_root(nearest, build_root()), nearest, size=STORE_PROBE_BYTES, name=path.name)
        except OutputNotWritable as exc:
            raise fail(exc.reason or str(exc)) from None
        return
    for part in (path, _lock_file(path)):
        if part.is_symlink():
            raise fail(f"{part.name} is a link to {os.readlink(part)}; records are never written through a link")
    try:
        with _locked(path, exclusive=True):
            if path.exists():
                os.close(open_nofollow(root, path, os.O_WRONLY | os.O_APPEND))
            probe_folder(root, path.parent, size=STORE_PROBE_BYTES, name=path.name)
    except OutputNotWritable as exc:
        raise fail(exc.reason or str(exc)) from None


def write_output(path: Path, data: str | bytes) -> Path:
    """Write a task's output file whole (`safefiles.write_bytes`): one under the build root no link leads
    out of, or one a flag names elsewhere (`--json PATH`), no link leading out of its own folder."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    return write_bytes(containing_root(path, build_root()), path, body)


def _lock_file(path: Path) -> Path:
    """The sibling lock of a JSON-lines file: `.NAME.lock`. Not the file itself, so that a reader's
    shared lock and a writer's exclusive one meet even while a writer moves a torn tail aside."""
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    lock = _lock_file(path)
    try:
        fd = open_nofollow(containing_root(lock.parent, build_root()), lock, os.O_RDWR | os.O_CREAT)
    except OutputNotWritable as exc:
        if exclusive:
            if not exc.reason:
                raise  # a link: its own line names it
            error = OutputNotWritable(f"{lock}: the lock cannot be opened ({exc.reason})")
            error.reason = exc.reason
            raise error from None
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
    root = containing_root(path.parent, build_root())
    make_folder(root, path.parent)
    check_inside(root, path)
    with _locked(path, exclusive=True):
        fd = open_nofollow(root, path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
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
        with open_log(containing_root(torn.parent, build_root()), torn, append=True) as fh:
            fh.write(tail + b"\n")
    except (OSError, OutputNotWritable):
        pass  # kept if possible; the store itself must heal either way
    os.ftruncate(fd, start)
    _warn(f"{path}: a torn last line ({len(tail)} bytes, a write cut short) was moved to {torn.name}")
    return start


class BadStore(ConfigError):
    """A record store that is not a file (a FIFO, a folder, a link to nothing): bad input, as a bad line is."""


@dataclass(frozen=True)
class BadLine:
    """A line of a JSON-lines store that is not a record of its kind: where, and why (one line). Line 0 is
    the whole store (it is not a file)."""

    path: Path
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}" if self.line == 0 else f"{self.path}:{self.line}: {self.why}"


def read_jsonl(path: Path, parse: Callable[[Any], T], bad_line: Callable[[int], Exception]) -> list[T]:
    """Every non-blank line of `path` through `parse` ([] when the file does not exist yet), read under
    the store's shared lock.

    A torn last line (no newline, not a whole JSON value: a writer was killed or the disk filled) is
    skipped with a warning; the next append moves it aside. Any other bad line is `bad_line(n)`, the
    caller's own error for line n (invalid JSON, or a row `parse` rejects with ValueError/KeyError/
    TypeError), so each record kind keeps its own message and error class.
    """
    rows, bad = read_jsonl_lenient(path, parse)
    if bad and bad[0].line == 0:
        raise BadStore(str(bad[0]))
    if bad:
        raise bad_line(bad[0].line)
    return rows


def read_jsonl_lenient(path: Path, parse: Callable[[Any], T]) -> tuple[list[T], list[BadLine]]:
    """`read_jsonl` that keeps going: the rows `parse` accepts, and each other line with why it is not one.

    For a reader that shows what it can (`invoke status`) and names every bad line, and for a strict
    reader that wants to say why (`parse`'s ValueError/TypeError text, or the missing key of a KeyError)."""
    if not os.path.lexists(path):
        return [], []
    kind = not_a_file(path)
    if kind is not None:  # read as empty, it would say "nothing recorded" of a store that cannot be read
        return [], [BadLine(path, 0, f"not a file of records ({kind})")]
    with _locked(path, exclusive=False):
        raw = path.read_bytes()
    lines = raw.split(b"\n")
    out: list[T] = []
    bad: list[BadLine] = []
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
            bad.append(BadLine(path, n, "not valid JSON"))
            continue
        try:
            out.append(parse(value))
        except KeyError as exc:
            bad.append(BadLine(path, n, f"no '{exc.args[0]}'" if exc.args else "a key is missing"))
        except (ValueError, TypeError) as exc:
            bad.append(BadLine(path, n, one_line(str(exc)) or "not a record of this file"))
    return out, bad


# ---- one typed reader of recorded rows ------------------------------------------------------------

_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "true or false"), (int, "a whole number"), (float, "a number"), (str, "a string"),
    (dict, "an object"), (list, "a list"), (type(None), "null"),
)


def json_type(value: object) -> str:
    """What a JSON value is, in words ("a string", "an object", ...)."""
    return next((words for kind, words in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _accepts(hint: Any, value: object) -> tuple[bool, str]:
    """(whether `value` fits the annotation `hint`, the annotation in words)."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return True, "anything"
    if origin in (typing.Union, types.UnionType):
        answers = [_accepts(arg, value) for arg in typing.get_args(hint)]
        return any(ok for ok, _ in answers), " or ".join(words for _, words in answers)
    if hint is type(None):
        return value is None, "null"
    if hint is bool:
        return isinstance(value, bool), "true or false"
    if hint is int:  # JSON true is not a number of workers
        return isinstance(value, int) and not isinstance(value, bool), "a whole number"
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    if hint is str:
        return isinstance(value, str), "a string"
    if origin in (dict, Mapping, collections.abc.Mapping) or hint in (dict, Mapping):
        return isinstance(value, dict), "an object"
    if origin in (list, tuple, Sequence, collections.abc.Sequence) or hint in (list, tuple):
        return isinstance(value, list), "a list"
    return True, "anything"  # a type no record field uses: not ours to judge


def check_field_types(cls: type, data: Mapping[str, object]) -> None:
    """Raise TypeError naming the first field of dataclass `cls` whose value in `data` (a JSON row) is of
    the wrong type, e.g. "'options' is a string, not an object". Missing fields and unknown keys are the
    caller's: older rows lack fields with defaults, newer ones carry fields this sglstack does not know."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data:
            ok, wanted = _accepts(hints[f.name], data[f.name])
            if not ok:
                raise TypeError(f"'{f.name}' is {json_type(data[f.name])}, not {wanted}")
