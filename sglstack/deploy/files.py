"""The files a deployment writes (compose file, env example, k8s manifests), and putting back what they
replaced when the deployment is undone."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from ..core.records import build_root as default_build_root
from ..core.safefiles import (
    OutputNotWritable,
    check_inside,
    containing_root,
    create_empty,
    keep_link,
    not_a_file,
    remove_file,
    rename_inside,
    write_text,
)
from ..render.compose import ENV_EXAMPLE_FILE
from .store import display_path

# What each written path held before: a hard link to its old file beside it, None where there was none.
Saved = dict[Path, Path | None]
SAVED_SUFFIX = ".previous"


def write_files(out_dir: Path, files: dict[str, str]) -> Saved:
    """Write the rendered files (each whole, never through a link out of the build folder); return what
    each path held before, kept as a hard link beside it (`.NAME.previous`): putting it back is then a
    rename, which needs no free space (the disk may be full by the time a failed deploy is undone)."""
    root = containing_root(out_dir, default_build_root())
    saved: Saved = {}
    try:
        for name, text in files.items():
            path = out_dir / name
            check_inside(root, path)
            kind = not_a_file(path) if not path.is_symlink() else None
            if kind is not None:  # a folder or a FIFO there is not ours to replace, nor to remove when undoing
                raise OutputNotWritable(f"{path}: cannot be written ({kind}, not a regular file)")
            saved[path] = None
            if path.is_file() and not path.is_symlink():
                kept = path.with_name(f".{path.name}{SAVED_SUFFIX}")
                remove_file(root, kept)  # a leftover of a killed deploy
                keep_link(root, path, kept)
                saved[path] = kept
            write_text(root, path, text)
    except BaseException:
        restore_files(saved)
        raise
    return saved


def restore_files(saved: Saved) -> None:
    """Put back what `write_files` replaced (renames and removals only: no free space needed)."""
    for path, kept in saved.items():
        root = containing_root(path.parent, default_build_root())
        if kept is None:
            remove_file(root, path)
        else:
            try:
                rename_inside(root, kept, path)
            except OutputNotWritable as exc:
                raise OutputNotWritable(f"{path}: cannot be put back ({exc.reason or exc})") from None
    saved.clear()


def discard_saved(saved: Saved) -> None:
    """Forget what `write_files` kept (the new files stay); nothing is left beside them."""
    for kept in saved.values():
        if kept is not None:
            with contextlib.suppress(OSError):
                kept.unlink()
    saved.clear()


def ensure_env_file(out_dir: Path, env_file: str, say: Callable[[str], None]) -> None:
    """The compose file's env file beside it, created empty (mode 0600) when there is none."""
    path = Path(env_file)
    if path.is_absolute():
        return  # checked before anything changed
    path = out_dir / path
    # Public models need no token; compose refuses a missing env_file, so start from an empty one. A link
    # there is refused: compose would feed whatever it points to into the container's environment.
    if create_empty(containing_root(out_dir, default_build_root()), path, mode=0o600):
        say(f"created an empty {display_path(path)}: put HF_TOKEN there for gated models ({ENV_EXAMPLE_FILE})")
