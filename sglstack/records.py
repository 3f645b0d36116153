"""The build folder, UTC time, and the append-only JSON-lines stores under it (publish and deploy
records, smoke history).

Every JSON-lines store goes through `append_jsonl` and `read_jsonl`, so that each has the same
guarantees: whole lines, sorted keys, no interleaving between concurrent writers (each append holds an
exclusive lock), and a one-line error naming the file and line of a bad entry.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from .errors import SglstackError

T = TypeVar("T")
BUILD_DIR_ENV = "SGLSTACK_BUILD_DIR"


class OutputNotWritable(SglstackError):
    """A file the task will write at its end cannot be written: found before the long work starts."""


def build_root() -> Path:
    """build/, or SGLSTACK_BUILD_DIR: the one tree every output lives under (rendered files, build and
    smoke records, publish and deploy records)."""
    return Path(os.environ.get(BUILD_DIR_ENV) or "build")


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


def append_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append JSON lines under an exclusive lock: concurrent writers never interleave lines."""
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    if not text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.write(text)
            fh.flush()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_jsonl(path: Path, parse: Callable[[Any], T], bad_line: Callable[[int], Exception]) -> list[T]:
    """Every non-blank line of `path` through `parse` ([] when the file does not exist yet).

    `bad_line(n)` builds the caller's own error for line n (invalid JSON, or a row `parse` rejects with
    ValueError/KeyError/TypeError), so each record kind keeps its own message and error class.
    """
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            raise bad_line(n) from None
    return out
