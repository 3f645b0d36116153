"""The coverage check on a built image: its installed CUDA objects, copied out, through the same rules.

The image is never run: a container is created (not started) to read files from with `get_archive`, and
always removed. Which files to copy comes from each pinned CUDA distribution's RECORD in the image's
site-packages; whole folders are copied where they hold little else, single files where they do not.
`build_coverage` is what `invoke build` calls in its verify step.
"""

from __future__ import annotations

import contextlib
import functools
import io
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker.errors

from ..adapters.cuobjdump import Cuobjdump, ListingCache, cuobjdump, is_device_object_name
from ..adapters.docker import created_container, engine_image
from ..config.platforms import platform_of_image
from ..config.schema import Stack
from ..core.errors import BuildError
from ..core.safefiles import write_with
from .devicecode import coverage_cache_dir, inspect_files
from .report import CoverageReport, PackageStatus, build_report
from .rules import LOADER_PATHS, Capability, PackageObjects, WheelSource, capabilities_of, device_code_wheels

# A folder is copied whole when the files in it that are not wanted add up to at most this much.
WASTE_LIMIT_BYTES = 64 << 20


class KernelCoverageMissing(BuildError):
    """The built image leaves a required capability without kernels (or its coverage cannot be checked)."""


def site_dirs(env: Iterable[str], python: str) -> list[str]:
    """Where the image's packages may be: the venv the Dockerfile makes (VIRTUAL_ENV), then system paths."""
    venv = next((e.split("=", 1)[1] for e in env if e.startswith("VIRTUAL_ENV=")), None)
    out = [f"{venv}/lib/python{python}/site-packages"] if venv else []
    out += [f"/usr/local/lib/python{python}/dist-packages", f"/usr/local/lib/python{python}/site-packages",
            "/usr/lib/python3/dist-packages"]
    return out


def record_files(text: str) -> dict[str, int]:
    """A RECORD's files under site-packages as {path: size}; entries outside it ('../bin/x') are dropped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        path, _, rest = line.partition(",")
        size = rest.rpartition(",")[2]
        norm = posixpath.normpath(path) if path else ""
        if not norm or norm.startswith(("../", "/")) or norm == "..":
            continue
        out[norm] = int(size) if size.isdigit() else 0
    return out


def archive_units(files: Mapping[str, int], wanted: Iterable[str], waste_limit: int = WASTE_LIMIT_BYTES) -> list[str]:
    """The fewest paths to copy: for each wanted file its highest folder (never site-packages itself) whose
    unwanted content stays within `waste_limit`, else the file alone; nested units are dropped."""
    wanted = set(wanted)
    waste: dict[str, int] = {}
    for path, size in files.items():
        if path not in wanted:
            parts = path.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                waste[folder] = waste.get(folder, 0) + size
    units: set[str] = set()
    for path in wanted:
        parts = path.split("/")
        best = path
        for depth in range(len(parts) - 1, 0, -1):
            folder = "/".join(parts[:depth])
            if waste.get(folder, 0) > waste_limit:
                break
            best = folder
        units.add(best)
    return sorted(u for u in units if not any(u.startswith(o + "/") for o in units))


class _ChunkStream(io.RawIOBase):
    """The Docker SDK's archive chunks as a file, for tarfile's streaming mode."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._buf))
        buffer[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


@contextlib.contextmanager
def tar_stream(container: Any, path: str) -> Iterator[tarfile.TarFile]:
    """`container.get_archive(path)` read as it arrives (folders of GBs never sit in memory)."""
    chunks, _stat = container.get_archive(path, chunk_size=1 << 20)
    with tarfile.open(fileobj=io.BufferedReader(_ChunkStream(chunks), 1 << 20), mode="r|") as tar:
        yield tar


def read_file(container: Any, path: str) -> bytes | None:
    """One file of the (stopped) container, or None when it does not exist."""
    try:
        with tar_stream(container, path) as tar:
            for member in tar:
                if member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read() if fh else None
    except docker.errors.NotFound:
        return None
    return None


def _copy_from(src: IO[bytes], dst: IO[bytes]) -> None:
    shutil.copyfileobj(src, dst, 1 << 22)


def copy_out(container: Any, site: str, units: Iterable[str], wanted: set[str], dest: Path) -> dict[str, Path]:
    """The wanted site-packages files of each copied unit, as flat files in dest: {site path: local file}."""
    out: dict[str, Path] = {}
    for unit in units:
        parent = posixpath.dirname(unit)
        with tar_stream(container, f"{site}/{unit}") as tar:
            for member in tar:
                path = posixpath.normpath(posixpath.join(parent, member.name)) if parent else \
                    posixpath.normpath(member.name)
                if not member.isfile() or path not in wanted or path in out:
                    continue
                fh = tar.extractfile(member)
                if fh is None:
                    continue
                local = dest / f"{len(out)}.bin"
                write_with(dest, local, functools.partial(_copy_from, fh), durable=False)
                out[path] = local
    return out


@dataclass(frozen=True)
class ImageSources:
    """What an image's coverage reads: its platform, the stack's capabilities, the CUDA distributions the stack's
    coverage wants, and the image's site-packages folders."""

    platform: str
    caps: tuple[Capability, ...]
    sources: tuple[WheelSource, ...]
    sites: list[str]


def image_sources(client: Any, image: str, stack: Stack, installed: Mapping[str, str] | None) -> ImageSources | None:
    """None when the stack lists no capability or pins none of the CUDA distributions coverage reads."""
    caps = capabilities_of(stack.cuda_arch_list)
    attrs = engine_image(client, image).attrs
    # the image's own platform (never another's wheels for an architecture nothing maps: url_for refuses it)
    platform = platform_of_image(str(attrs.get("Os") or ""), str(attrs.get("Architecture") or "amd64"))
    sources = device_code_wheels(stack, platform, installed)
    if not caps or not sources:
        return None
    return ImageSources(platform, tuple(caps), tuple(sources),
                        site_dirs((attrs.get("Config") or {}).get("Env") or [], stack.python))


def find_record(container: Any, sites: list[str], dist_info: str) -> tuple[str, bytes] | None:
    """(site, RECORD bytes) of the first site-packages folder holding `dist_info`."""
    return next(((site, text) for site in sites
                 if (text := read_file(container, f"{site}/{dist_info}/RECORD")) is not None), None)


def image_coverage(client: Any, image: str, stack: Stack, *, jobs: int | None = None,
                   installed: Mapping[str, str] | None = None) -> CoverageReport | None:
    """The coverage report of an image's installed CUDA packages (`installed`: the image's {name: version},
    for the stack's `coverage.packages`); None when the stack pins none of them or lists no capability."""
    inputs = image_sources(client, image, stack, installed)
    if inputs is None:
        return None
    platform, caps, sources, sites = inputs.platform, inputs.caps, inputs.sources, inputs.sites
    statuses: list[PackageStatus] = []
    packages: list[PackageObjects] = []
    tool: Cuobjdump | None = None
    listings: ListingCache | None = None
    scratch = coverage_cache_dir() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with created_container(client, image, name_prefix="sglstack-coverage", command=["/bin/true"], entrypoint=[],
                           network_disabled=True) as container, tempfile.TemporaryDirectory(prefix="image-",
                                                                                     dir=scratch) as tmp:
        for source in sources:
            if not source.version:
                statuses.append(PackageStatus(source.package, "", "image", False,
                                              f"{source.package} is not installed in the image"))
                continue
            dist_info = f"{source.package.replace('-', '_')}-{source.version}.dist-info"
            found = find_record(container, sites, dist_info)
            if found is None:
                statuses.append(PackageStatus(source.package, source.version, dist_info, False,
                                              f"no {dist_info} in the image (looked in {', '.join(sites)})"))
                continue
            site, record = found
            files = record_files(record.decode("utf-8", "replace"))
            wanted = {p for p in files if is_device_object_name(p)}
            loaders = {p for p in LOADER_PATHS if p in files}
            dest = Path(tmp) / source.package
            dest.mkdir()
            copied = copy_out(container, site, archive_units(files, wanted | loaders), wanted | loaders, dest)
            texts = {p: copied.pop(p).read_text(encoding="utf-8", errors="replace") for p in loaders if p in copied}
            if tool is None:
                tool = cuobjdump()
                listings = ListingCache(tool.release)
            packages.append(inspect_files(copied, source.package, source.version, f"{site}/{dist_info}", tool,
                                          cache=listings, loader_sources=texts, jobs=jobs))
            statuses.append(PackageStatus(source.package, source.version, f"{site}/{dist_info}", True))
    return build_report(stack.name, platform, caps, stack.coverage, packages, statuses)


@dataclass(frozen=True)
class BuildCoverage:
    labels: Mapping[str, str]  # the coverage label, stamped with the verified labels
    record: Mapping[str, Any] | None  # the table, for record.json


def build_coverage(client: Any, image_id: str, stack: Stack, *, serving_image: bool = True,
                   installed: Mapping[str, str] | None = None) -> BuildCoverage:
    """The build's check: raise KernelCoverageMissing like a pin mismatch; else the label and the table."""
    report = image_coverage(client, image_id, stack, installed=installed) if serving_image else None
    if report is None:
        return BuildCoverage({}, None)
    return judged_coverage(stack, report)


def judged_coverage(stack: Stack, report: CoverageReport, **extra: Any) -> BuildCoverage:
    """The build's verdict on an image's report (KernelCoverageMissing), else its label and its table (with
    `extra` keys beside it in the record)."""
    if report.violations:
        first = report.violations[0]
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise KernelCoverageMissing(f"stack '{stack.name}': the image's kernels do not cover cuda_arch_list: "
                                    f"{first}{more}; declare an exception under 'coverage' or fix the build")
    if not report.complete:
        missing = "; ".join(p.reason for p in report.packages if not p.checked)
        raise KernelCoverageMissing(f"stack '{stack.name}': kernel coverage cannot be checked: {missing}")
    return BuildCoverage(report.labels(), {**report.to_dict(), **extra})
