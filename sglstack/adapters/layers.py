"""What each layer of a local image holds, read from the engine's own overlay2 folders (each layer's `diff`).

A layer is named by its diff id, the sha256 of its content, so what it holds never changes: each listing is
made once and cached by diff id (paths and kinds only, no content, except the first four bytes that say
whether a file is ELF). Only for an engine on this machine whose storage driver is overlay2 and whose folders
this process may read; anywhere else `image_layer_files` says None and verification reuses only whole images.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import docker.errors

from ..core.inputs import loads
from ..core.safefiles import write_text
from .docker import engine_image, is_local_docker_host
from .wheels import cache_root

LISTING_VERSION = 1  # bump when what a listing holds changes
FILE, ELF, LINK, WHITEOUT, OPAQUE = "f", "e", "l", "w", "o"  # the kinds verifyplan reads
_OPAQUE_XATTR = "trusted.overlay.opaque"


def listing_dir() -> Path:
    return cache_root() / "layers"


def layer_dirs(attrs: dict[str, Any]) -> list[tuple[str, Path]] | None:
    """[(diff id, the layer's diff folder)] bottom first, from `docker image inspect`; None where not overlay2."""
    driver = attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    diff_ids = list((attrs.get("RootFS") or {}).get("Layers") or [])
    if driver.get("Name") != "overlay2" or not data.get("UpperDir") or not diff_ids:
        return None
    top_first = [data["UpperDir"], *(d for d in (data.get("LowerDir") or "").split(":") if d)]
    if len(top_first) != len(diff_ids):
        return None
    return list(zip(diff_ids, (Path(d) for d in reversed(top_first)), strict=True))


def _kind(path: str, st: os.stat_result) -> str | None:
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return WHITEOUT
    if stat.S_ISLNK(st.st_mode):
        return LINK
    if stat.S_ISDIR(st.st_mode):
        try:
            return OPAQUE if os.getxattr(path, _OPAQUE_XATTR, follow_symlinks=False) == b"y" else None
        except OSError:
            return None
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as fh:
                return ELF if fh.read(4) == b"\x7fELF" else FILE
        except OSError:
            return FILE
    return FILE  # a device, fifo or socket a layer ships: present, and in any scope that takes everything


def list_layer(folder: Path) -> dict[str, str]:
    """{absolute path in the image: kind} of one layer's diff folder."""
    out: dict[str, str] = {}
    root = str(folder)
    for current, dirs, names in os.walk(root):
        for name in (*dirs, *names):
            full = os.path.join(current, name)
            kind = _kind(full, os.lstat(full))
            if kind is not None:
                out["/" + os.path.relpath(full, root)] = kind
    return out


def _readable(folder: Path) -> bool:
    # An opaque folder is told by a trusted.* attribute, which only a privileged reader sees: without the
    # privilege a deletion would go unseen, so such a reader lists nothing.
    try:
        os.getxattr(str(folder), _OPAQUE_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (61, 95):  # ENODATA (not opaque), EOPNOTSUPP
            return False
    return os.access(folder, os.R_OK | os.X_OK)


def cached_listing(diff_id: str, folder: Path) -> dict[str, str]:
    stored = listing_dir() / f"{diff_id.replace(':', '-')}-v{LISTING_VERSION}.json"
    if stored.is_file():
        try:
            data = loads(stored.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return {str(k): str(v) for k, v in data.items()}
        except ValueError:
            pass  # a damaged listing: list the layer again and write it over
    entries = list_layer(folder)
    write_text(stored.parent, stored, json.dumps(entries, sort_keys=True))
    return entries


LayerListing = tuple[str, Path, dict[str, str]]  # diff id, its folder here, {path: kind}


def image_layer_files(client: Any, image: str, docker_host: str | None) -> list[LayerListing] | None:
    """[(diff id, its folder here, {path: kind})] of every layer of `image`, bottom first; None where they cannot
    be read here. A regular file of a layer is read in its folder as it is in the image (no copy)."""
    if not is_local_docker_host(docker_host):
        return None
    try:
        attrs = engine_image(client, image).attrs
    except docker.errors.ImageNotFound:
        return None
    dirs = layer_dirs(attrs)
    if dirs is None or not all(_readable(folder) for _, folder in dirs):
        return None
    return [(diff_id, folder, cached_listing(diff_id, folder)) for diff_id, folder in dirs]


# A layer keyed by its files' content (verifyplan.by_content): at most this many files and bytes (the patch
# overlay, the tools, the manifests), read each verify; a larger one is keyed by its diff id alone.
SMALL_LAYER_FILES, SMALL_LAYER_BYTES = 256, 8 << 20


def _content_digest(path: str, kind: str) -> str:
    st = os.lstat(path)
    digest = hashlib.sha256(f"{kind}\0{st.st_mode:o}\0{st.st_uid}\0{st.st_gid}\0".encode())
    if kind == LINK:
        digest.update(os.readlink(path).encode("utf-8", "surrogateescape"))
    elif not stat.S_ISREG(st.st_mode):  # a device, fifo or socket: never opened (a fifo would block)
        raise OSError(f"not a regular file: {path}")
    else:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def small_layer_contents(layers: list[LayerListing]) -> dict[str, dict[str, str]]:
    """{diff id: {path: sha256 of its kind, mode, owner and bytes}} of each small layer's files and links."""
    out: dict[str, dict[str, str]] = {}
    for diff_id, folder, entries in layers:
        present = {p: k for p, k in entries.items() if k in (FILE, ELF, LINK)}
        if not present or len(present) > SMALL_LAYER_FILES:
            continue
        paths = {p: os.path.join(str(folder), p.lstrip("/")) for p in present}
        try:
            if sum(os.lstat(f).st_size for f in paths.values()) > SMALL_LAYER_BYTES:
                continue
            out[diff_id] = {p: _content_digest(paths[p], k) for p, k in present.items()}
        except OSError:
            continue  # a layer that cannot be read here is keyed by its diff id, as before
    return out
