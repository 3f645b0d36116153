"""The device code in a wheel or in a folder of installed files, as `PackageObjects` (cuobjdump, cached).

A wheel's result is cached by the wheel's sha256 (a warm `invoke coverage` only hashes its wheels); every
object's listing is cached by the object's sha256, so an image holding the same sgl-kernel as a wheel that
was checked before costs no cuobjdump run at all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..adapters.cuobjdump import Cuobjdump, ListingCache, cache_root, is_device_object_name, list_files, sha256_file
from ..core.inputs import loads
from ..core.safefiles import write_text, write_with
from .rules import LOADER_PATHS, DeviceObject, PackageObjects

WHEEL_CACHE_VERSION = 1  # bump when what is stored per wheel changes


def coverage_cache_dir() -> Path:
    return cache_root() / "coverage"


def _site_path(member: str) -> str | None:
    """A wheel member's path under site-packages (purelib/platlib data folders included), None if elsewhere."""
    first, _, rest = member.partition("/")
    if first.endswith(".data"):
        kind, _, inner = rest.partition("/")
        return inner if kind in ("purelib", "platlib") and inner else None
    return member


def inspect_files(files: Mapping[str, Path], package: str, version: str, source: str, tool: Cuobjdump, *,
                  cache: ListingCache | None = None, loader_sources: Mapping[str, str] | None = None,
                  jobs: int | None = None) -> PackageObjects:
    """{site-packages path: local file} -> PackageObjects, listing each distinct file once, in parallel."""
    order = sorted(files)
    listed = list_files([files[p] for p in order], tool, cache=cache, jobs=jobs)
    objects = []
    for path in order:
        digest, code = listed[files[path]]
        objects.append(DeviceObject(path, digest, code.sass, code.ptx, code.images))
    return PackageObjects(package, version, source, tuple(objects), dict(loader_sources or {}))


def _stored(digest: str, release: str) -> Path:
    return coverage_cache_dir() / "wheels" / f"{digest}-{release}-v{WHEEL_CACHE_VERSION}.json"


def stored_wheel_result(digests: Iterable[str], release: str, fits: Callable[[str], bool]) -> PackageObjects | None:
    """A wheel's stored result found by a sha256 the lock names, without reading any wheel: pip installs only a
    file with one of those hashes, and a result is stored under the sha256 of the wheel it was made from. Of
    the lock's files of one release, only one whose name `fits` the stack's Python and platform is taken."""
    for digest in sorted(d.removeprefix("sha256:") for d in digests):
        stored = _stored(digest, release)
        if not stored.is_file():
            continue
        try:
            result = _from_json(loads(stored.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            continue  # a damaged entry: the wheel is fetched and listed again
        if fits(result.source):
            return result
    return None


def inspect_wheel(wheel: Path, package: str, version: str, tool: Cuobjdump, *, cache: ListingCache | None = None,
                  jobs: int | None = None) -> PackageObjects:
    """Every shared object, cubin and fatbin of a wheel; the result is cached by the wheel's sha256."""
    digest = sha256_file(wheel)
    stored = _stored(digest, tool.release)
    if stored.is_file():
        try:
            return _from_json(loads(stored.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged entry: inspect the wheel again and overwrite it
    with zipfile.ZipFile(wheel) as zf:
        members = {}
        for name in zf.namelist():
            site = _site_path(name)
            if site and not name.endswith("/") and is_device_object_name(site):
                members[site] = name
        names = set(zf.namelist())
        sources = {p: zf.read(p).decode("utf-8", "replace") for p in LOADER_PATHS if p in names}
    scratch = coverage_cache_dir() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=scratch) as tmp:
        files = {site: Path(tmp) / f"{i}.bin" for i, site in enumerate(sorted(members))}
        _extract(wheel, {members[site]: path for site, path in files.items()}, jobs)
        result = inspect_files(files, package, version, wheel.name, tool, cache=cache, loader_sources=sources,
                               jobs=jobs)
    write_text(stored.parent, stored, json.dumps(_to_json(result), sort_keys=True))
    return result


def _extract(wheel: Path, targets: Mapping[str, Path], jobs: int | None) -> None:
    """Members to flat local files (no member name becomes a path), several at once, largest first:
    inflating 1.6 GB of sgl-kernel is the cold run's largest cost after the download."""
    local = threading.local()
    opened: list[zipfile.ZipFile] = []
    with zipfile.ZipFile(wheel) as zf:
        sizes = {i.filename: i.file_size for i in zf.infolist()}

    def one(name: str) -> None:
        zf = getattr(local, "zf", None)
        if zf is None:
            zf = local.zf = zipfile.ZipFile(wheel)
            opened.append(zf)
        with zf.open(name) as src:
            write_with(targets[name].parent, targets[name], lambda dst: shutil.copyfileobj(src, dst, 1 << 22),
                       durable=False)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1))
    try:
        list(pool.map(one, sorted(targets, key=lambda n: -sizes.get(n, 0))))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on Ctrl-C, no queued member is still unpacked
        for zf in opened:
            zf.close()


def _to_json(p: PackageObjects) -> dict:
    return {"package": p.package, "version": p.version, "source": p.source,
            "objects": [o.to_dict() for o in p.objects], "loader_sources": dict(p.loader_sources)}


def _from_json(data: dict) -> PackageObjects:
    return PackageObjects(data["package"], data["version"], data["source"],
                          tuple(DeviceObject.from_dict(o) for o in data["objects"]), data["loader_sources"])
