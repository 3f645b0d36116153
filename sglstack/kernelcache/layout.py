"""The kernel-cache artifact, and a store of them on disk in the OCI image layout (no registry needed).

One artifact is an OCI 1.1 manifest: `artifactType` says it is a kernel cache, its config is the key (JSON),
its one layer the cache folder as a gzip tar; pushed to a registry it gets the image manifest as `subject`
(`attest/kernelcache.py`). On a GPU node without a registry (the process runner) the same manifest and blobs
live in an OCI image layout folder: `oci-layout`, `index.json` (one entry per key, the key's digest in its
annotations) and `blobs/sha256/`. Tools that read OCI layouts (`oras`, `skopeo`) read it as it is.

A restore takes the artifact whose key is exactly the start's (`CacheKey`, read from the config blob and
checked, not from the annotation alone), checks each blob's sha256 as it reads it, and unpacks the layer.
No exact match: one line naming the first differing field of the nearest artifact, and nothing is restored.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from ..core import labels as lb
from ..core.errors import ConfigError
from ..core.inputs import loads, read_bytes
from ..core.safefiles import make_folder, open_nofollow, remove_file, rename_inside, write_bytes, write_with
from .files import LAYER_MEDIA_TYPE, HashingWriter, KernelCacheError, pack, unpack
from .key import CacheKey, mismatch_line, unknown_gpu_fields, unknown_line

ARTIFACT_TYPE = "application/vnd.sglstack.kernel-cache.v1"
KEY_MEDIA_TYPE = "application/vnd.sglstack.kernel-cache.key.v1+json"
# The OCI media types (the registry part names them too; the kernel cache does not import the registry).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
KEY_ANNOTATION = lb.KERNEL_CACHE_KEY_ANNOTATION
IMAGE_ANNOTATION = lb.KERNEL_CACHE_IMAGE_ANNOTATION
FILES_ANNOTATION = lb.KERNEL_CACHE_FILES_ANNOTATION
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
INDEX_LOCK = ".index.json.lock"
# DeepGEMM's and FlashInfer's caches of a large MoE model are hundreds of MB; no cache is 64 GiB.
MAX_CACHE_BYTES = 64 * 1024**3


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def artifact_manifest(key: CacheKey, layer_digest: str, layer_size: int, files: int,
                      subject: Mapping[str, Any] | None = None) -> bytes:
    """The artifact's manifest (deterministic: no timestamps); `subject` is the image manifest descriptor
    when it is attached to an image in a registry."""
    config = key.canonical()
    body: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": KEY_MEDIA_TYPE, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer_size}],
        "annotations": {KEY_ANNOTATION: key.digest(), IMAGE_ANNOTATION: key.image, FILES_ANNOTATION: str(files)},
    }
    if subject is not None:
        body["subject"] = dict(subject)
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Restore:
    """What a restore did: `matched` (the cache was restored) and the one line that says so or why not."""

    matched: bool
    line: str
    files: int = 0
    manifest_digest: str | None = None
    key_differences: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"matched": self.matched, "line": self.line, "files": self.files,
                "artifact": self.manifest_digest, "key_differences": list(self.key_differences)}


@dataclass(frozen=True)
class Packed:
    manifest_digest: str
    files: int
    layer_size: int


class LayoutStore:
    """An OCI image layout folder of kernel-cache artifacts. `root`: the folder no link may lead out of."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root or path

    @property
    def blobs(self) -> Path:
        return self.path / "blobs" / "sha256"

    def blob_path(self, digest: str) -> Path:
        algorithm, _, hexpart = digest.partition(":")
        if algorithm != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
            raise KernelCacheError(f"kernel cache store {self.path}: {digest[:80]!r} is not a sha256 digest")
        return self.blobs / hexpart

    # ---- writing ----------------------------------------------------------------------------------

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_digest(data)
        write_bytes(self.root, self.blob_path(digest), data)
        return digest

    def put(self, key: CacheKey, folder: Path) -> Packed:
        """Pack `folder` as the artifact of `key` (replacing an earlier one of the same key in the index). The
        layer is written to a temp file while its sha256 is taken, then renamed to its digest: one pass, and a
        cache of GBs is never in memory."""
        self._start()
        self._sweep_dead_packs()
        tmp = self.blobs / f".packing-{_HOST}-{os.getpid()}.tmp"
        packed: list[tuple[str, int, int]] = []

        def fill(fh: BinaryIO) -> None:
            writer = HashingWriter(fh)
            files = pack(folder, writer)
            packed.append((writer.digest, writer.size, files))

        try:
            write_with(self.root, tmp, fill)
            layer_digest, size, files = packed[0]
            rename_inside(self.root, tmp, self.blob_path(layer_digest))
        finally:
            remove_file(self.root, tmp)
        self.put_bytes(key.canonical())
        manifest = artifact_manifest(key, layer_digest, size, files)
        return Packed(self._list(key, manifest), files, size)

    def _sweep_dead_packs(self) -> None:
        """Remove the temp layers of packs whose process is gone: one killed outright (SIGKILL, no clean-up) left
        a partial layer of up to the cache's size in the store for good. A live pack's (another smoke sharing the
        store) is kept, and so is one of another host (a store on shared storage: its pids are not ours)."""
        for entry in os.scandir(self.blobs):
            found = _PACKING.match(entry.name)
            if found and found.group(1) == _HOST and not _pid_alive(int(found.group(2))):
                remove_file(self.root, Path(entry.path))

    def _start(self) -> None:
        make_folder(self.root, self.blobs)
        write_bytes(self.root, self.path / "oci-layout", b'{"imageLayoutVersion":"1.0.0"}\n')

    def fetch_layer(self, digest: str, size: int, fill: Callable[[BinaryIO], None]) -> bool:
        """Keep the layer `digest` of `size` bytes that `fill` writes (a download that checks what it writes and
        raises on a wrong byte): to a temp file, renamed to its digest only once whole and checked; on any
        failure or a signal nothing of it is left. False when the store already holds it intact (not fetched)."""
        path = self.blob_path(digest)
        if path.is_file() and not path.is_symlink():
            try:
                _check_file(path, digest, size)
                return False
            except KernelCacheError:
                pass  # a damaged copy: fetched again over it
        self._start()
        write_with(self.root, path, fill)
        try:
            _check_file(path, digest, size)  # `fill` checked as it wrote; this reads what was renamed in
        except KernelCacheError:
            self.remove_blob(digest)
            raise
        return True

    def layer_file(self, digest: str, size: int) -> Path:
        """The path of the layer blob `digest`, a regular file of `size` bytes (what an upload reads)."""
        path = self.blob_path(digest)
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise KernelCacheError(f"kernel cache store {self.path}: layer {digest[:19]} cannot be read "
                                   f"({exc.strerror})") from None
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise KernelCacheError(f"kernel cache store {self.path}: layer {digest[:19]} is not a file of the {size} "
                                   "bytes its manifest declares")
        return path

    def remove_blob(self, digest: str) -> None:
        remove_file(self.root, self.blob_path(digest))

    def import_artifact(self, key: CacheKey, manifest: bytes, layer: bytes | None = None) -> str:
        """Keep an artifact fetched from a registry (its manifest as it was, `subject` and all); its layer is
        already in the store (`fetch_layer`) unless given as bytes. The index entry is written last."""
        self._start()
        self.put_bytes(key.canonical())
        if layer is not None:
            self.put_bytes(layer)
        return self._list(key, manifest)

    def _list(self, key: CacheKey, manifest: bytes) -> str:
        """Store the manifest and make it the index's one entry for `key`; its digest."""
        manifest_digest = self.put_bytes(manifest)
        entry = {"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": len(manifest),
                 "artifactType": ARTIFACT_TYPE,
                 "annotations": {KEY_ANNOTATION: key.digest(), IMAGE_ANNOTATION: key.image,
                                 lb.OCI_REF_NAME_ANNOTATION: key.digest().removeprefix("sha256:")[:16]}}
        with self._index_lock():  # two smokes sharing a store: each keeps the other's entry
            kept = [m for m in self._index() if (m.get("annotations") or {}).get(KEY_ANNOTATION) != key.digest()]
            index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*kept, entry]}
            write_bytes(self.root, self.path / "index.json",
                        (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
        return manifest_digest

    def forget(self, key: CacheKey) -> bool:
        """Take `key`'s artifact out of the index (its blobs stay, unlisted): one whose warm start failed must not
        be restored by a deployment. False when none was listed."""
        if not (self.path / "index.json").exists():
            return False
        with self._index_lock():
            manifests = self._index()
            kept = [m for m in manifests if (m.get("annotations") or {}).get(KEY_ANNOTATION) != key.digest()]
            if len(kept) == len(manifests):
                return False
            index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": kept}
            write_bytes(self.root, self.path / "index.json",
                        (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
        return True

    @contextlib.contextmanager
    def _index_lock(self) -> Iterator[None]:
        """An exclusive flock on `.index.json.lock` while the index is read, changed and written (a few ms, so
        waited for): without it two stores writing at once each wrote the index they read, dropping the other's
        new entry. OCI tools ignore the file; the kernel drops the lock however its holder ends."""
        fd = open_nofollow(self.root, self.path / INDEX_LOCK, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def check(self) -> None:
        """Before anything is served: the store is a new or empty folder, or an OCI image layout whose index
        reads. A folder of other things is refused (the store would write its blobs among them)."""
        try:
            foreign = (self.path.is_dir() and not (self.path / "oci-layout").exists()
                       and any(True for _ in self.path.iterdir()))
        except OSError as exc:
            raise KernelCacheError(f"kernel cache store {self.path}: cannot be read ({exc.strerror})") from None
        if foreign:
            raise KernelCacheError(f"kernel cache store {self.path}: a folder that is neither empty nor an OCI image "
                                   "layout (no oci-layout file); name a new or empty folder, or a kernel cache store")
        self._index()

    # ---- reading ----------------------------------------------------------------------------------

    def _index(self) -> list[dict[str, Any]]:
        path = self.path / "index.json"
        if not path.exists():
            return []
        try:
            raw = read_bytes(path, limit=MAX_MANIFEST_BYTES, what="kernel cache store index")
        except ConfigError as exc:
            raise KernelCacheError(f"kernel cache store {path}: {exc}") from None
        try:
            manifests = loads(raw)["manifests"]
            if not isinstance(manifests, list):
                raise TypeError
        except (ValueError, KeyError, TypeError) as exc:
            raise KernelCacheError(f"kernel cache store {path}: not an OCI image index ({exc})") from None
        return [m for m in manifests if isinstance(m, dict)]

    def read_blob(self, digest: str, limit: int = MAX_MANIFEST_BYTES) -> bytes:
        try:
            data = read_bytes(self.blob_path(digest), limit=limit, what="kernel cache blob")
        except ConfigError as exc:  # missing, too large, not a regular file: one line, as the store's own
            raise KernelCacheError(f"kernel cache store {self.path}: {exc}") from None
        if sha256_digest(data) != digest:
            raise KernelCacheError(f"kernel cache store {self.path}: blob {digest[:19]} does not hash to its name")
        return data

    def artifacts(self) -> Iterator[tuple[str, CacheKey, dict[str, Any]]]:
        """(manifest digest, key, manifest) of each kernel-cache artifact the index lists and that reads back."""
        for entry in self._index():
            if entry.get("artifactType") != ARTIFACT_TYPE or not isinstance(entry.get("digest"), str):
                continue
            try:
                manifest = loads(self.read_blob(entry["digest"]))
                key = CacheKey.from_dict(loads(self.read_blob(manifest["config"]["digest"])))
            except (KernelCacheError, ValueError, KeyError, TypeError, OSError):
                continue  # unreadable or not ours: it restores nothing
            yield entry["digest"], key, manifest

    def layer_of(self, digest: str, manifest: Any) -> tuple[str, int]:
        """The (digest, size) of the artifact's one layer; a manifest that names none usable is refused."""
        try:
            layer = manifest["layers"][0]
            layer_digest, size = layer["digest"], layer["size"]
            if not isinstance(layer_digest, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise TypeError
            self.blob_path(layer_digest)
        except (KeyError, IndexError, TypeError, KernelCacheError):
            raise KernelCacheError(f"kernel cache store {self.path}: artifact {digest[:19]}: its manifest names no "
                                   "layer to restore; not restored") from None
        return layer_digest, size

    def restore(self, want: CacheKey, folder: Path, root: Path) -> Restore:
        """Restore the artifact of exactly `want` into `folder` (replaced whole); else say why not."""
        if unknown := unknown_gpu_fields(want):
            return Restore(False, unknown_line(unknown[0]), key_differences=tuple(unknown))
        nearest: tuple[int, str, CacheKey] | None = None
        for digest, key, manifest in self.artifacts():
            if not want.differences(key):
                layer_digest, layer_size = self.layer_of(digest, manifest)
                path = self.blob_path(layer_digest)
                _check_file(path, layer_digest, layer_size)
                files = unpack(root, folder, partial(_open, path), max_bytes=MAX_CACHE_BYTES)
                line = f"kernel cache: restored {files} files from {digest[:19]} (key {want.digest()[:19]} matched)"
                return Restore(True, line, files, digest)
            distance = len(want.differences(key))
            if nearest is None or distance <= nearest[0]:
                nearest = (distance, digest, key)
        if nearest is None:
            return Restore(False, f"kernel cache: no artifact in {self.path}; starting cold")
        return Restore(False, mismatch_line(want, nearest[2]), manifest_digest=nearest[1],
                       key_differences=tuple(want.differences(nearest[2])))


# `.packing-HOST-PID.tmp`, and the temp file `write_with` fills for it (`..packing-HOST-PID.tmp.XXXX.tmp`)
_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
_PACKING = re.compile(r"^\.{1,2}packing-([A-Za-z0-9._-]+)-(\d+)\.tmp(?:\.[^/]*\.tmp)?$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _open(path: Path) -> BinaryIO:
    return open(path, "rb")


def _file_digest(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def _check_file(path: Path, digest: str, size: int) -> None:
    try:
        got, got_size = _file_digest(path)
    except OSError as exc:
        raise KernelCacheError(f"kernel cache blob {digest[:19]}: cannot be read ({exc.strerror})") from None
    if (got, got_size) != (digest, size):
        raise KernelCacheError(f"kernel cache blob {digest[:19]}: its bytes do not hash to its digest; not restored")
