"""What takes the room in an image, as JSON on stdout (stdlib only): run by `invoke size` in a container
of the image with the network off, as `python -c` (so it reads any image with a Python, old builds too).

- every installed distribution's installed bytes (the files its RECORD lists);
- files present more than once by content (sha256), of at least MIN_DUPLICATE_BYTES: only files that share a
  size with another are hashed, so a 10 GB image costs one walk and a few hashes, not 10 GB of reading;
- shared libraries whose file name is present at two paths with different content (a CUDA 12 and a CUDA 13
  build of one library, say), each path with the distribution that installed it.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata as md
import json
import os
import re
import stat
import sys

MIN_DUPLICATE_BYTES = 64 * 1024  # below this a duplicate is noise (license files, __init__.py, stubs)
SKIP = ("/proc", "/sys", "/dev", "/run", "/tmp")  # kernel and runtime mounts: not the image's files
# A shared library by its file name; Python extension modules (`lib.cpython-311-...so`) are modules, not libraries.
SHARED_LIBRARY = re.compile(r"^lib(?![^/]*\.(?:cpython-|abi3\.))[^/]*\.so(\.[0-9.]+)?$")


def regular_files(top: str = "/") -> dict[str, int]:
    """Each regular file's path and size; a hard-linked file counted once (it takes its room once)."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, int] = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in SKIP)
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            out[path] = st.st_size
    return out


def sha256_of(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _real_folder(folder: str, cache: dict[str, str]) -> str:
    found = cache.get(folder)
    if found is None:
        found = cache[folder] = os.path.realpath(folder)
    return found


def resolved(path: str, cache: dict[str, str]) -> tuple[str, os.stat_result | None]:
    """os.path.realpath(path) and its lstat, resolving each folder once (an image's RECORDs name some 100,000
    files in a few thousand folders; realpath per file costs a syscall per path part); a link, resolved whole."""
    folder, name = os.path.split(path)
    real = os.path.join(_real_folder(folder, cache), name)
    try:
        st = os.lstat(real)
    except OSError:
        return os.path.realpath(path), None
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(real)
        try:
            st = os.lstat(real)
        except OSError:
            return real, None
    return real, st


def owners() -> tuple[dict[str, str], list[tuple[str, str, int, int]]]:
    """(path -> distribution, [(name, version, installed bytes, files), ...]) from every RECORD."""
    by_path: dict[str, str] = {}
    rows: list[tuple[str, str, int, int]] = []
    folders: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"] or "?"
        size = count = 0
        for entry in dist.files or ():
            path, st = resolved(str(dist.locate_file(entry)), folders)
            by_path[path] = name
            if st is not None:
                size += st.st_size
                count += 1
        rows.append((name, dist.version, size, count))
    rows.sort(key=lambda r: (-r[2], r[0]))
    return by_path, rows


def scan(top: str = "/") -> dict:
    """The report of the files under `top` (the whole image, in a container)."""
    files = regular_files(top)
    by_path, packages = owners()
    by_size: dict[int, list[str]] = collections.defaultdict(list)
    for path, size in files.items():
        if size >= MIN_DUPLICATE_BYTES:
            by_size[size].append(path)
    duplicates: list[dict] = []
    copy_of: dict[str, str] = {}  # path -> sha256, for files with a copy
    for size, paths in by_size.items():
        if len(paths) < 2:
            continue
        by_hash: dict[str, list[str]] = collections.defaultdict(list)
        for path in paths:
            digest = sha256_of(path)
            if digest:
                by_hash[digest].append(path)
        for digest, same in by_hash.items():
            if len(same) > 1:
                copy_of.update((p, digest) for p in same)
                duplicates.append({"sha256": digest, "bytes": size,
                                   "paths": [[p, by_path.get(p)] for p in sorted(same)]})
    libraries: dict[str, list[str]] = collections.defaultdict(list)
    for path in files:
        name = os.path.basename(path)
        if SHARED_LIBRARY.match(name):
            libraries[name].append(path)
    same_name = []
    for name, paths in libraries.items():
        # Copies of one content are the duplicates table's; here only one name with different builds.
        if len({copy_of.get(p, p) for p in paths}) > 1:
            same_name.append({"name": name, "paths": [[p, by_path.get(p), files[p]] for p in sorted(paths)]})
    return {"files": len(files), "bytes": sum(files.values()), "packages": packages,
            "duplicates": duplicates, "same_name": same_name}


def main() -> int:
    json.dump(scan(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
