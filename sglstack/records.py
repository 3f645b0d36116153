"""Append-only JSON-lines record files under the build directory (publish and deploy history).

One writer and one reader, so that every records file has the same guarantees: whole lines, sorted keys,
no interleaving between concurrent writers, and a one-line error naming the file and line of a bad entry.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def build_root() -> Path:
    """build/, or SGLSTACK_BUILD_DIR: the one place all records (build, publish, deploy) live under."""
    return Path(os.environ.get("SGLSTACK_BUILD_DIR", "build"))


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
