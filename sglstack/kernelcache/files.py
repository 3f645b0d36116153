"""A kernel-cache folder as files: listed, packed into one tar.gz layer, unpacked into a fresh folder.

Packing keeps regular files and folders only (a link in a cache could point anywhere on the node), in
sorted order. Unpacking writes each member through `core/safefiles` into a folder filled aside and
swapped in whole (`replace_folder`): a member with an absolute path, a `..`, a link or a device is
refused in one line and nothing is left half-restored.

Each file keeps its modification time to the nanosecond (a PAX `mtime` record, read back as text, never
through a float): FlashInfer's JIT builds with ninja, and ninja rebuilds an output whose time differs from
the one its deps log recorded (`.ninja_deps`: "stored deps info out of date") or that is older than its
inputs. A restore stamped with the time of the restore made every warm start on the H100 and H200 recompile
FlashInfer's norm module with nvcc (about 30 s of the prefill CUDA-graph capture) while adding no file. The
same image's installed headers carry the same times on every node, so the packed times stay valid there.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, BinaryIO

from ..core.errors import SglstackError, one_line
from ..core.safefiles import make_folder, replace_folder, write_with

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# zlib's default. On 258 MiB of shared libraries (2 busy cores): level 9 packed in 55 s to a layer 0.6% smaller
# than level 6's 14.6 s; level 1 in 3.7 s to one 10% larger, which every restore then downloads.
COMPRESS_LEVEL = 6


class KernelCacheError(SglstackError):
    """A kernel cache that cannot be packed, stored or restored (one line; the server then starts cold)."""


def cache_files(folder: Path) -> dict[str, int]:
    """Every regular file under `folder` (relative POSIX path -> size); {} when there is no folder.
    Links are not followed (a cache's own link would point out of it)."""
    return {rel: size for rel, (size, _) in cache_state(folder).items()}


def new_files(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """The files a start added (a kernel compiled), sorted: none on a warm start that compiled nothing."""
    return sorted(set(after) - set(before))


class HashingWriter:
    """Writes through to `out`, taking the sha256 and the size of what passed (one pass over a large layer)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self._hash, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        self.size += len(data)
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()


FileState = tuple[int, int]  # (size, modification time in ns)

# Files a JIT writes on every load, compiled or not: its log and its lock (FlashInfer's `flashinfer_jit.log`,
# `tmp/*.lock`). Ninja's own logs are rewritten when it builds, but also when it only compacts them.
_BOOKKEEPING_SUFFIXES = (".log", ".lock", ".ninja_log", ".ninja_deps")


def cache_state(folder: Path) -> dict[str, FileState]:
    """Every regular file under `folder` -> (size, mtime in ns), sorted: what a start rewrote, not only what it
    added; {} when there is no folder. Links are not followed (a cache's own link would point out of it)."""
    out: dict[str, FileState] = {}
    if not folder.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                out[Path(path).relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return dict(sorted(out.items()))


def shown_name(rel: str) -> str:
    """A cache file's relative path as text that prints and encodes as UTF-8: a name of bytes that are not UTF-8
    (os.walk hands them over as surrogates) shows its bytes as `\\xff` escapes."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def rewritten_files(before: Mapping[str, FileState], after: Mapping[str, FileState]) -> list[str]:
    """Files that were there before a start and were written again by it (a kernel rebuilt in place, as ninja
    does when it judges an output stale): sorted, logs and locks left out."""
    return sorted(rel for rel, state in after.items()
                  if rel in before and before[rel] != state and not rel.endswith(_BOOKKEEPING_SUFFIXES))


def _pax_mtime(mtime_ns: int) -> str:
    sec, ns = divmod(mtime_ns, 1_000_000_000)
    return f"{sec}.{ns:09d}"


def _packed_mtime_ns(member: tarfile.TarInfo) -> int | None:
    """The member's exact time from its PAX record; None for a layer packed without one (restore time used)."""
    raw = member.pax_headers.get("mtime", "")
    sec, _, frac = raw.partition(".")
    if not sec.isdigit() or (frac and not frac.isdigit()) or len(frac) > 9:
        return None
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0") or 0)


def pack(folder: Path, out: BinaryIO | HashingWriter) -> int:
    """Write `folder`'s regular files as a gzip tar to `out`, streamed (a member's bytes pass a megabyte at a
    time): sorted, owner 0, each file's own mtime to the ns in a PAX record (see the module's note), no time or
    name in the gzip header (the same files pack to the same digest, so they are not uploaded again); returns
    how many files went in."""
    files = cache_files(folder)
    with gzip.GzipFile(filename="", mode="wb", compresslevel=COMPRESS_LEVEL, fileobj=out, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            path = folder / rel
            info = tarfile.TarInfo(rel)
            st = os.lstat(path)
            info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
            info.mtime, info.pax_headers = st.st_mtime_ns // 1_000_000_000, {"mtime": _pax_mtime(st.st_mtime_ns)}
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    return len(files)


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if name.startswith("/") or ".." in Path(name).parts or "\x00" in name:
        return f"a member path outside the cache folder ({one_line(name)[:80]!r})"
    if not (member.isfile() or member.isdir()):
        return f"{one_line(name)[:80]!r} is a link or device, not a file"
    return None


def unpack(root: Path, folder: Path, layer: Callable[[], BinaryIO], *, max_bytes: int) -> int:
    """Replace `folder` with the files of the gzip tar `layer()` opens; returns how many. `root` is the folder
    no link may lead out of. At most `max_bytes` unpacked (a cache is not allowed to fill the node's disk)."""

    def fill(tmp: Path) -> None:
        try:
            filled[0] = _fill(tmp)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise KernelCacheError(f"kernel cache layer: not a gzip tar ({one_line(str(exc))[:120]}); not "
                                   "restored") from None

    def _fill(tmp: Path) -> int:
        total = count = 0
        with layer() as fh, tarfile.open(fileobj=fh, mode="r:gz") as tar:
            for member in tar:
                problem = _member_problem(member)
                if problem:
                    raise KernelCacheError(f"kernel cache layer: {problem}; not restored")
                if member.isdir():
                    make_folder(tmp, tmp / member.name)
                    continue
                total += member.size
                if total > max_bytes:
                    raise KernelCacheError(f"kernel cache layer: more than {max_bytes} bytes unpacked; not restored")
                source = tar.extractfile(member)
                assert source is not None
                write_with(tmp, tmp / member.name, _copier(source), mode=0o755 if member.mode & 0o111 else 0o644,
                           durable=False)
                mtime_ns = _packed_mtime_ns(member)
                if mtime_ns is not None:
                    os.utime(tmp / member.name, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
                count += 1
        return count

    filled = [0]
    replace_folder(root, folder, fill)
    return filled[0]


def _copier(source: IO[bytes]) -> Callable[[BinaryIO], None]:
    def copy(out: BinaryIO) -> None:
        while chunk := source.read(1 << 20):
            out.write(chunk)
    return copy
