"""Writing what render made: the build context folder (`write_build_context`) and `invoke render`'s
output folder (`render_stack_folder`). render/ returns content and writes nothing; this module owns the
temp folder, the swap and the removal of what an earlier render left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..config.imageref import names_a_digest
from ..config.matrix import Stack
from ..core.console import console as make_console
from ..core.console import plain
from ..core.errors import one_line
from ..core.folderlock import LOCK_NAME, folder_lock
from ..core.inputs import loads, read_small_file
from ..core.records import build_root, stack_dir
from ..core.resources import DEFAULT_PATCHES_DIR
from ..core.safefiles import (
    OutputNotWritable,
    check_inside,
    containing_root,
    remove_file,
    replace_folder,
    write_bytes,
    write_text,
)
from ..lock.trust import lock_for_build
from ..lockfile.model import Lock
from ..render.compose import ComposeOptions, deployment_files, moving_tag_ref
from ..render.dockerfile import BuildContext, build_context
from ..render.k8s import K8S_DIR, LWS_FILE, SERVICE_FILE, K8sOptions, k8s_spec, render_k8s


@dataclass(frozen=True)
class RenderedContext:
    stack: str
    dockerfile: Path
    context: Path
    files: tuple[Path, ...]


def write_build_context(stack: Stack, out_dir: Path, patches_dir: Path = DEFAULT_PATCHES_DIR,
                        lock: Lock | None = None) -> RenderedContext:
    """Write the Dockerfile and exactly the files it COPYs (or mounts) into `out_dir`, as render made them.

    The context is filled in a new folder beside the old one and swapped in whole (`safefiles`): a
    failure (a full disk, a signal) leaves the previous context as it was, and a `context` or
    `Dockerfile` that is a link out of the folder is refused, never written through or deleted.
    """
    rendered = build_context(stack, patches_dir, lock)
    root = containing_root(out_dir, build_root())
    context = out_dir / "context"

    def fill(folder: Path) -> None:
        for name in rendered.folders:
            (folder / name).mkdir(parents=True, exist_ok=True)
        for rel, data in rendered.files.items():
            write_bytes(folder, folder / rel, data, mode=rendered.modes[rel])

    check_inside(root, out_dir / "Dockerfile")  # refused before the context is swapped, not after
    if not _holds(context, rendered):  # a render that changes nothing leaves every file (and mtime) alone
        replace_folder(root, context, fill)
    dockerfile = write_text(root, out_dir / "Dockerfile", rendered.dockerfile)
    files = tuple(sorted(p for p in context.rglob("*") if p.is_file()))
    return RenderedContext(stack.name, dockerfile, context, files)


def _holds(context: Path, rendered: BuildContext) -> bool:
    """Whether `context` is a folder (not a link) of exactly the rendered folders and files, no link in it,
    each file with its bytes and mode."""
    if context.is_symlink() or not context.is_dir():
        return False
    wanted = [*rendered.files, *rendered.folders]
    folders = {str(p) for rel in wanted for p in PurePosixPath(rel).parents} - {"."} | set(rendered.folders)
    found_folders: set[str] = set()
    found_files: set[str] = set()
    for here, dirs, names in os.walk(context):
        where = Path(here).relative_to(context)
        if any(os.path.islink(os.path.join(here, name)) for name in dirs):
            return False
        found_folders.update(str(PurePosixPath(where, name)) for name in dirs)
        found_files.update(str(PurePosixPath(where, name)) for name in names)
    if found_files != set(rendered.files) or found_folders != folders:
        return False
    for rel, data in rendered.files.items():
        st = os.lstat(context / rel)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != rendered.modes[rel] \
                or st.st_size != len(data) or (context / rel).read_bytes() != data:
            return False
    return True


def write_compose(stack: Stack, image_ref: str, out_dir: Path, *, options: ComposeOptions | None = None,
                  smoke_report: str | None = None) -> list[Path]:
    """Write the compose file(s) and `compose.env.example` into `out_dir`; return the paths written."""
    files = deployment_files(stack, image_ref, options=options, smoke_report=smoke_report)
    root = containing_root(out_dir, build_root())
    return [write_text(root, out_dir / name, text) for name, text in files.items()]


# What `invoke render` wrote into its folder, so that a later render replaces or removes only those.
RENDER_MANIFEST = ".sglstack-render.json"
MAX_MANIFEST_BYTES = 1024 * 1024  # a list of a dozen names
CONTEXT_ENTRY = "context/"


def _written_before(out: Path) -> set[str]:
    try:  # bounded, and never a FIFO put in its place (a plain read would wait for a writer for ever)
        data = loads(read_small_file(out / RENDER_MANIFEST, MAX_MANIFEST_BYTES))
        return {str(name) for name in data["files"]}
    except (OSError, ValueError, KeyError, TypeError):  # UnreadableFile is a ValueError
        return set()


def foreign_files(out: Path, planned: list[str], owned: set[str] | None) -> list[str]:
    """The planned names that exist in `out` and that render did not write (`owned` None: every name is
    ours, the stack's own folder under the build root, which build and deploy write too)."""
    if owned is None:
        return []
    return [name for name in planned
            if name not in owned and os.path.lexists(out / name.rstrip("/"))]


def render_stack_folder(
    stacks_file: str, stack: Stack, out_dir: str | None = None, image: str | None = None,
    k8s_options: K8sOptions | None = None, platform: str | None = None,
) -> RenderedContext:
    """`invoke render`: the Dockerfile, its context, the compose files and, for an image by digest, the
    Kubernetes manifests. Reads no records: the compose file serves `image`, by default the stack's moving
    tag, which `invoke deploy` replaces with a digest; the manifests serve only a digest. `platform` renders
    what `build --platform` builds (that platform's base and lock) into its build folder (build/STACK.OS-ARCH
    for a platform past the first).

    An `--out DIR` of the user's keeps a list of what render wrote there (`.sglstack-render.json`): a
    file render did not write is never replaced or removed (a one-line refusal before anything is
    written). The stack's own folder under the build root is sglstack's, written by build and deploy too.
    """
    stack_name = stack.name  # `stack` as the matrix `stacks_file` gives it (its lock is beside that file)
    if platform is not None:  # one of the stack's platforms, refused in one line before anything is written
        stack = stack.for_platform(platform)
    own = stack_dir(stack_name, platform=stack.lock_platform)
    out = Path(out_dir) if out_dir else own
    own_folder = os.path.abspath(out) == os.path.abspath(own)
    ref = image or moving_tag_ref(stack)
    # Checked (schemas included) before anything is written: bad k8s options change no file.
    k8s_files = render_k8s(stack, ref, k8s_options) if names_a_digest(ref) else None
    if k8s_files is None:
        k8s_spec(stack, k8s_options or K8sOptions())
    compose_files = deployment_files(stack, ref)
    k8s_names = [f"{K8S_DIR}/{name}" for name in (LWS_FILE, SERVICE_FILE)]
    planned = ["Dockerfile", CONTEXT_ENTRY, *compose_files, *(k8s_names if k8s_files is not None else [])]
    owned = None if own_folder else _written_before(out)
    foreign = foreign_files(out, planned, owned)
    if foreign:
        raise OutputNotWritable(one_line(
            f"render --out {out}: {', '.join(foreign)} already there and not written by sglstack render: "
            "not replaced (move it away, or render into another folder)"))
    lock = lock_for_build(stacks_file, stack)  # a stale or edited lock: one line, and no folder made
    root = containing_root(out, build_root())
    fresh = not os.path.lexists(out)
    # A platform's own folder is written by that platform's build, which holds the stack's lock (build/STACK).
    held = folder_lock(stack_dir(stack_name), "render", root=root, stack=stack_name) \
        if own_folder and own != stack_dir(stack_name) else contextlib.nullcontext()
    with held, folder_lock(out, "render", root=root, stack=stack_name):
        if owned is None:
            return _render_into(stack_name, stack, out, root, lock, compose_files, k8s_files, k8s_names, owned, ref)
        there = {name for name in planned if os.path.lexists(out / name.rstrip("/"))}
        listed = os.path.lexists(out / RENDER_MANIFEST)
        try:
            return _render_into(stack_name, stack, out, root, lock, compose_files, k8s_files, k8s_names, owned, ref)
        except BaseException:
            _undo_render(out, root, [n for n in planned if n not in there], owned if listed else None, fresh)
            raise


def _undo_render(out: Path, root: Path, created: list[str], owned: set[str] | None, fresh: bool) -> None:
    """After a render into a user's `--out` failed (a full disk, a link, Ctrl-C): remove what it created
    there, and put the list of render's files back as it was (None: there was none); a folder render made
    is removed with its lock file once empty. Removals only, but for that list: they need no space."""
    with contextlib.suppress(OSError, OutputNotWritable):
        for name in created:
            path = out / name.rstrip("/")
            if name.endswith("/") and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                remove_file(root, path)
        if owned is None:
            remove_file(root, out / RENDER_MANIFEST)
        else:
            write_text(root, out / RENDER_MANIFEST, json.dumps({"files": sorted(owned)}, indent=2) + "\n")
        if fresh:
            for leftover in (out / K8S_DIR, out):
                if leftover == out:
                    remove_file(root, out / LOCK_NAME)
                with contextlib.suppress(OSError):
                    leftover.rmdir()


# long: the writes of render, in order, each one line on the console
def _render_into(stack_name: str, stack: Stack, out: Path, root: Path, lock: Lock | None,
                 compose_files: dict[str, str], k8s_files: dict[str, str] | None, k8s_names: list[str],
                 owned: set[str] | None, ref: str) -> RenderedContext:
    """Write the render into `out` (its folder lock held by the caller)."""
    if owned is not None:
        # The list first: the files of a render cut short are then its own, which the next one replaces.
        planned = {"Dockerfile", CONTEXT_ENTRY, *compose_files, *(k8s_names if k8s_files is not None else [])}
        write_text(root, out / RENDER_MANIFEST, json.dumps({"files": sorted(owned | planned)}, indent=2) + "\n")
    rendered = write_build_context(stack, out, lock=lock)
    console = make_console()
    console.print(f"[bold]{stack_name}[/]: Dockerfile   {plain(rendered.dockerfile)}")
    console.print(f"[bold]{stack_name}[/]: context      {plain(rendered.context)}/ ({len(rendered.files)} files)")
    for name, text in compose_files.items():
        console.print(f"[bold]{stack_name}[/]: compose      {plain(write_text(root, out / name, text))}")
    written = ["Dockerfile", CONTEXT_ENTRY, *compose_files]
    if k8s_files is None:
        console.print(f"[bold]{stack_name}[/]: k8s          not written: the manifests serve an image by digest "
                      "(--image REPO@sha256:...), not the tag " + plain(ref))
        for name in k8s_names:  # an earlier render's, which would serve another image
            if owned is None or name in owned:
                remove_file(root, out / name)
    else:
        for name, text in k8s_files.items():
            written_to = write_text(root, out / K8S_DIR / name, text)
            console.print(f"[bold]{stack_name}[/]: k8s          {plain(written_to)}")
        written += k8s_names
    write_text(root, out / RENDER_MANIFEST, json.dumps({"files": sorted(written)}, indent=2) + "\n")
    return rendered
