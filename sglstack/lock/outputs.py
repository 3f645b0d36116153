"""Where a task may write a file a flag names (`--json PATH`, `bake --out`, `smoke --report`): a file, never
one of the checkout's inputs.

Tasks read the stacks file, its locks and the patches; a report written over one of them would replace the
matrix with JSON (and exit 0). Checked before any work, through links (realpath) and hard links
(samefile), so that the answer does not depend on how the path was spelled.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.resources import DEFAULT_PATCHES_DIR
from ..lockfile.model import LOCKS_DIR

PATCHES_DIR = DEFAULT_PATCHES_DIR  # the patches every stack names: their specs and code are read, never written


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def json_path_problem(json_path: str, stacks_file: Path, task: str, *, option: str = "--json") -> str | None:
    """Why `--json json_path` is bad input for `task` (a folder, no folder, an input), or None; the
    caller then checks that it can be written (`require_writable`)."""
    path = Path(json_path).expanduser()
    if path.is_dir():
        return f"{option} {json_path}: is a folder (give the path of a file)"
    if path.exists() and not path.is_file():  # the writer would refuse it after the work: refused before
        return f"{option} {json_path}: is not a regular file (a device, FIFO or socket is never replaced)"
    if not path.resolve().parent.is_dir():
        return f"{option} {json_path}: its folder does not exist"
    return input_path_problem(json_path, stacks_file, task, option=option)


def input_path_problem(out_path: str, stacks_file: Path | str, task: str, *, option: str) -> str | None:
    """Why the output `out_path` would overwrite an input (the stacks file, a lock, a patch), or None."""
    json_path, path, stacks_file = out_path, Path(out_path).expanduser(), Path(stacks_file)
    locks = stacks_file.parent / LOCKS_DIR
    inputs = [(stacks_file, f"the stacks file {stacks_file}"),
              *((lock, f"the lock {lock}") for lock in (sorted(locks.glob("*.txt")) if locks.is_dir() else []))]
    for known, what in inputs:
        if _same_file(path, known):
            return f"{option} {json_path}: is {what}, an input of {task} (never overwritten): give another path"
    if locks.is_dir() and Path(os.path.realpath(path)).parent == Path(os.path.realpath(locks)):
        return f"{option} {json_path}: is in {locks}, the folder of the stacks' locks: give another path"
    patches = Path(os.path.realpath(PATCHES_DIR))
    if patches in Path(os.path.realpath(path)).parents:
        return f"{option} {json_path}: is in {PATCHES_DIR}, the folder of the patches: give another path"
    return None
