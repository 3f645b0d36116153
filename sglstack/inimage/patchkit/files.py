"""The files of one patch run: pip's RECORD hashes, and writing every file of a step or none of them.

Each file is staged beside its target and renamed over it only when all are staged; a failure while
renaming puts back the files already replaced, so a read-only folder, a full disk or a signal leaves
the tree as it was.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import PatchUsageError, PatchWriteError
from .source import SourceFile
from .spec import PatchSpec


def record_hash(root: Path, rel: str) -> tuple[str, str] | None:
    """(hex sha256, RECORD path) as pip recorded the file at install time, if a RECORD lists it."""
    for record in sorted(root.glob("sglang-*.dist-info/RECORD")):
        try:
            text = record.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PatchUsageError(f"{record}: cannot read pip's RECORD: {exc}") from None
        # RECORD is CSV; only rows naming the file are parsed (it lists thousands of files).
        candidates = [ln for ln in text.splitlines() if rel in ln]
        for row in csv.reader(candidates):
            if len(row) >= 2 and row[0] == rel and row[1].startswith("sha256="):
                digest = base64.urlsafe_b64decode(row[1][len("sha256=") :] + "==").hex()
                return digest, f"{record.parent.name}/RECORD"
    return None


def matches_record(root: Path, rel: str, src: SourceFile) -> bool:
    recorded = record_hash(root, rel)
    return recorded is not None and src.hash_matches(recorded[0])


@dataclass(frozen=True)
class Write:
    path: Path
    data: bytes
    original: bytes | None  # what to put back if a later file of the same step fails; None: new file
    spec: PatchSpec | None  # the patch that changed it (None: the manifest), to name in errors


def write_all(writes: list[Write]) -> None:
    """Write every file or none: stage each beside its target, then rename them all over the targets.

    A failure (or a signal) while staging leaves every target untouched; one while renaming puts the
    files already renamed back as they were.
    """
    staged: list[tuple[Write, str]] = []
    try:
        for w in writes:
            staged.append((w, stage(w)))
        replaced: list[Write] = []
        try:
            for w, tmp in staged:
                os.replace(tmp, w.path)
                replaced.append(w)
        except BaseException as exc:
            for done in replaced:
                put_back(done)
            if isinstance(exc, OSError):
                raise write_error(w, f"cannot replace the file: {exc.strerror or exc}") from None
            raise
    finally:
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def stage(w: Write) -> str:
    """The path of a temporary file beside `w.path` holding `w.data`, with the target's mode."""
    try:
        mode = w.path.stat().st_mode & 0o7777 if w.path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(dir=w.path.parent, prefix=f".{w.path.name}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(w, f"cannot write in {w.path.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(w.data)
        os.chmod(tmp, mode)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_error(w, f"cannot write {w.path.name}: {exc.strerror or exc}") from None
        raise
    return tmp


def put_back(w: Write) -> None:
    """Best effort: the folder took a rename a moment ago, so it takes this one."""
    try:
        if w.original is None:
            os.unlink(w.path)
            return
        tmp = stage(Write(w.path, w.original, None, w.spec))
    except (OSError, PatchWriteError):
        return
    try:
        os.replace(tmp, w.path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_error(w: Write, reason: str) -> PatchWriteError:
    reason += ": nothing was changed"
    if w.spec is None:
        return PatchWriteError(f"manifest {w.path}: {reason}")
    return PatchWriteError(reason, patch=w.spec.id, file=w.spec.file, class_name=w.spec.class_name)


