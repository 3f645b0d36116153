"""A stack's CUDA wheels and their device code: fetch each wheel for the stack's python and platform (once,
into the cache), list its device code with cuobjdump, and build the coverage report. `invoke coverage`
prints it; `invoke upgrade` checks a release's wheels with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..adapters.cuobjdump import Cuobjdump, ListingCache, cuobjdump
from ..adapters.wheels import WheelFetchError, WheelUnreachable, cache_dir, fetch_binary_wheel
from ..config.matrix import Stack
from ..config.platforms import MACHINE
from .devicecode import inspect_wheel, stored_wheel_result
from .report import CoverageReport, PackageStatus, build_report
from .rules import (
    PackageObjects,
    WheelSource,
    capabilities_of,
    device_code_wheels,
)

# glibc of the base image's Ubuntu (the CUDA images name it in their tag): the newest manylinux tag it runs.
UBUNTU_GLIBC = {"24.04": 39, "22.04": 35, "20.04": 31}
DEFAULT_GLIBC_MINOR = 39
# The Ubuntu release a base image names: `nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04` or the official `ubuntu:24.04`.
_UBUNTU = re.compile(r"ubuntu:?(\d+\.\d+)")


def ubuntu_glibc_minor(base_image: str) -> int | None:
    """glibc's minor version of the Ubuntu release the base image's name says (39 for 24.04), or None."""
    m = _UBUNTU.search(base_image)
    return UBUNTU_GLIBC.get(m.group(1)) if m else None


def pip_platform_tags(platform: str, base_image: str, glibc: str | None = None) -> tuple[str, ...]:
    """linux/amd64 on an Ubuntu 24.04 base -> manylinux_2_39_x86_64 ... manylinux_2_17_x86_64, manylinux2014.

    pip 23's --platform takes exact tags only, so every manylinux tag the image's glibc accepts is listed.
    The stack's declared `glibc` wins over what the base image's name suggests.
    """
    machine = MACHINE[platform]
    newest = ubuntu_glibc_minor(base_image) or DEFAULT_GLIBC_MINOR
    if glibc:
        newest = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)]
    return (*tags, f"manylinux2014_{machine}")


def wheel_dir(stack: Stack, platform: str) -> Path:
    """Wheels for another interpreter and platform live apart from the ones for this machine."""
    return cache_dir() / f"cp{stack.python.replace('.', '')}-{platform.replace('/', '-')}"


def fetch_source(source: WheelSource, stack: Stack, platform: str) -> Path:
    return fetch_binary_wheel(source.requirement, dest=wheel_dir(stack, platform), python_version=stack.python,
                              platform_tags=pip_platform_tags(platform, stack.base_image, stack.glibc),
                              index_url=source.index_url, extra_index=source.extra_index, logins=stack.credentials)


def wheel_fits(filename: str, stack: Stack, platform: str) -> bool:
    """Whether pip would install the wheel `filename` for the stack's Python on `platform` (its glibc)."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    minor = int(stack.python.split(".")[1])
    platforms = {"any", *pip_platform_tags(platform, stack.base_image, stack.glibc)}

    def python_fits(tag: Tag) -> bool:
        if tag.interpreter in (f"cp3{minor}", "py3", f"py3{minor}"):
            return True
        return tag.abi == "abi3" and tag.interpreter.startswith("cp3") and int(tag.interpreter[3:] or 99) <= minor

    return any(python_fits(t) and t.platform in platforms for t in tags)


def check_wheels(stack: Stack, platform: str, *, progress: Callable[[str], None] = lambda _m: None,
                 jobs: int | None = None, versions: Mapping[str, str] | None = None,
                 hashes: Mapping[str, Sequence[str]] | None = None) -> CoverageReport:
    """The report for one platform of a stack, from its wheels (each fetched once into the cache);
    `versions` ({name: version}, the lock's) pins the stack's `coverage.packages`; `hashes` ({name: the lock's
    sha256s}) finds a wheel's stored result without fetching or hashing it (a cached stack costs no wheel read)."""
    caps = capabilities_of(stack.cuda_arch_list)
    statuses: list[PackageStatus] = []
    packages: list[PackageObjects] = []
    tool: Cuobjdump | None = None
    listings: ListingCache | None = None
    unreachable: dict[str, str] = {}  # an index or URL found unreachable once is not probed again
    for source in device_code_wheels(stack, platform, versions):
        if not source.version:
            statuses.append(PackageStatus(source.package, "", "lock", False,
                                          f"{source.package} has no version in the stack's lock (invoke lock)"))
            continue
        locked = (hashes or {}).get(source.package, ()) if source.version == (versions or {}).get(source.package) \
            else ()
        if locked and tool is None:
            tool = cuobjdump()
            listings = ListingCache(tool.release)
        known = stored_wheel_result(locked, tool.release, lambda name: wheel_fits(name, stack, platform)) \
            if locked and tool else None
        if known is not None:
            packages.append(known)
            statuses.append(PackageStatus(source.package, source.version, known.source, True))
            continue
        where = source.index_url or source.requirement
        if where in unreachable:
            statuses.append(PackageStatus(source.package, source.version, where, False, unreachable[where]))
            continue
        progress(f"fetching {source.label}")
        try:
            wheel = fetch_source(source, stack, platform)
        except WheelFetchError as exc:
            if isinstance(exc, WheelUnreachable):
                unreachable[where] = str(exc)
            statuses.append(PackageStatus(source.package, source.version, where, False, str(exc)))
            continue
        if tool is None:
            tool = cuobjdump()
            listings = ListingCache(tool.release)
        progress(f"listing the device code of {wheel.name}")
        packages.append(inspect_wheel(wheel, source.package, source.version, tool, cache=listings, jobs=jobs))
        statuses.append(PackageStatus(source.package, source.version, wheel.name, True))
    return build_report(stack.name, platform, caps, stack.coverage, packages, statuses)
