"""Reading what a user or an outside system hands us (a smoke report, a build record, a lock, a diff input, a
registry's answer), bounded before the work is done: every way it can go wrong is one line naming the file.

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
    # O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise; fstat then refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"is a directory, not a {what}", file=file)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("is not a regular file", file=file)  # a FIFO, a socket, a device
        if info.st_size > limit:
            raise ConfigError(f"is larger than the {_size(limit)} limit for a {what}", file=file)
        os.set_blocking(fd, True)
        chunks, left = [], limit + 1
        while left > 0:  # no more than the limit, whatever stat said (the file may grow as we read)
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise ConfigError(f"is larger than the {_size(limit)} limit for a {what}", file=file)
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
