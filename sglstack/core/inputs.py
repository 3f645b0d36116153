"""Reading what a user or an outside system hands us (a smoke report, a build record, a lock, a diff input, a
registry's answer), bounded before the work is done: every way it can go wrong is one line naming the file.

- `read_small_file`: the same for a file whose content is never shown (a key): the reason alone, no path.
- `read_bytes` / `read_text`: a regular file only, opened without blocking (a FIFO named as a report would
  otherwise hang the task until someone writes to it; a device would be read forever), at most `limit`
  bytes whatever `stat` said, decoded as UTF-8.
- `loads`: JSON, nested at most `MAX_DEPTH` levels. Python's decoder recurses once per level and ends a
  document a few thousand levels deep in a `RecursionError`, which is no `ValueError`: every caller's
  "not JSON" branch missed it, and what walks the data next (a report's metrics, `json.dumps`) recurses
  too. Both come out as a `MalformedJSON`, a `ValueError`, so that the callers' "not JSON" branch holds.
- `read_json`: the two together, errors as `ConfigError` naming the file (exit 2).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import ConfigError

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a smoke report or a build record is ~100 KB, a lock ~50 KB
MAX_DEPTH = 64  # a smoke report nests 6 levels, a build record 4; the decoder's recursion ends near 1000


class MalformedJSON(ValueError):
    """Nested deeper than `MAX_DEPTH` (or deep enough to exhaust the decoder's recursion)."""


def read_bytes(path: str | Path, *, limit: int = MAX_INPUT_BYTES, what: str = "input file",
               file: str | None = None) -> bytes:
    """The whole of `path`, a regular file of at most `limit` bytes; else a one-line `ConfigError`."""
    file = str(path) if file is None else file
    try:
        return read_regular(path, limit=limit, what=what, file=file)
    except FileNotFoundError:
        raise ConfigError("file not found", file=file) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=file) from None


def read_regular(path: str | Path, *, limit: int, what: str, file: str) -> bytes:
    """`read_bytes` for a caller with its own words for an `OSError` (raised as is); a path that is not a
    regular file, or is over `limit`, is a `ConfigError`."""
    try:
        return _regular_bytes(path, limit)
    except UnreadableFile as exc:
        if exc.kind == "folder":
            raise ConfigError(f"is a directory, not a {what}", file=file) from None
        if exc.kind == "special":
            raise ConfigError("is not a regular file", file=file) from None  # a FIFO, a socket, a device
        raise ConfigError(f"is larger than the {_size(limit)} limit for a {what}", file=file) from None


class UnreadableFile(ValueError):
    """A file a user named cannot be read as one small regular file; the message is the reason alone (no
    path, no content), for the caller to put after the option or key that named it. `kind`: "folder",
    "special" (a FIFO, a socket, a device), "large" or "os" (the system refused)."""

    def __init__(self, reason: str, *, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path` (a link to one is fine), at most `limit` of them: for a file whose
    content must never be shown (a key), every failure an `UnreadableFile` that says why in words alone."""
    try:
        return _regular_bytes(path, limit)
    except OSError as exc:
        raise UnreadableFile(exc.strerror or type(exc).__name__, kind="os") from None


def file_kind(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file ("a FIFO", "a character device", ...); None for
    a regular file. The one table the readers here and the writers of `safefiles` name a file by."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def _refuse_irregular(mode: int) -> None:
    kind = file_kind(mode)
    if kind is not None:
        raise UnreadableFile(f"{kind}, not a regular file", kind="folder" if stat.S_ISDIR(mode) else "special")


def _regular_bytes(path: str | Path, limit: int) -> bytes:
    """The one reader of a file a user names: anything but a regular file is refused before a byte is read (a
    FIFO or a terminal would block the task forever, a device would feed it without end). The open is
    non-blocking, so a FIFO swapped in after a look at the path does not hang it, and the fstat of the open
    file decides; no more than `limit` bytes are read whatever `stat` said (the file may grow as we read).
    `OSError` is raised as is."""
    _refuse_irregular(os.stat(path).st_mode)  # a socket cannot even be opened: say what it is
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        _refuse_irregular(info.st_mode)
        if info.st_size > limit:
            raise UnreadableFile(f"larger than {_size(limit)}", kind="large")
        os.set_blocking(fd, True)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnreadableFile(f"larger than {_size(limit)}", kind="large")
    return data


def read_text(path: str | Path, *, limit: int = MAX_INPUT_BYTES, what: str = "input file",
              file: str | None = None) -> str:
    """`read_bytes`, decoded as UTF-8 (an undecodable byte: one line naming the file, line and byte)."""
    file = str(path) if file is None else file
    data = read_bytes(path, limit=limit, what=what, file=file)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded)", file=file,
                          line=line) from None


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads`, bounded (see the module's doc): too deep is a `MalformedJSON`, a `ValueError`."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise MalformedJSON(f"nested more than {max_depth} levels deep") from None
    if depth(value, stop=max_depth + 1) > max_depth:
        raise MalformedJSON(f"nested more than {max_depth} levels deep")
    return value


def read_json(path: str | Path, *, limit: int = MAX_INPUT_BYTES, what: str = "JSON file",
              file: str | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in `path`, bounded in size and depth; every failure a `ConfigError` naming it."""
    file = str(path) if file is None else file
    text = read_text(path, limit=limit, what=what, file=file)
    try:
        return loads(text, max_depth=max_depth)
    except ValueError as exc:
        raise ConfigError(f"not JSON: {exc}", file=file) from None


def depth(value: Any, *, stop: int) -> int:
    """How deep `value` nests (a scalar is 0, `[]` is 1), counted without recursion up to `stop`."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if deepest >= stop:
            return deepest
        pending.extend((child, level) for child in children)
    return deepest


def _size(limit: int) -> str:
    return f"{limit // 1024} KiB"
