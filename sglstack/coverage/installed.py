"""Kernel coverage of a built image from what its RECORDs say, without copying gigabytes out of it.

Coverage is a fact of the files' bytes: a device object's listing is cached by its sha256 (whether the file came
from a wheel `invoke coverage` fetched, or from an image), and pip writes each installed file's sha256 into the
distribution's RECORD. So the image is read only for its RECORDs (and the few loader sources the rules read);
that the installed files really are what RECORD says is checked in the image by hashing them
(`inimage/incontainer/recordcheck.py`), the part a verify may reuse per layer; only an object whose listing
is in no cache is copied out and listed, once.
"""

from __future__ import annotations

import csv
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters.cuobjdump import Cuobjdump, ListingCache, cuobjdump, is_device_object_name, list_files
from ..adapters.docker import created_container, run_to_completion
from ..config.schema import Stack
from ..core.inputs import loads
from ..core.resources import TOOLS_DIR
from ..inimage.incontainer.recordcheck import record_sha256
from .devicecode import coverage_cache_dir
from .image import archive_units, copy_out, find_record, image_sources, record_files
from .report import CoverageReport, PackageStatus, build_report
from .rules import LOADER_PATHS, Capability, DeviceObject, PackageObjects

RECORDCHECK = TOOLS_DIR / "recordcheck.py"
RECORDCHECK_TIMEOUT_S = 1800  # hashing ~10 GB of installed files on a loaded 2-core machine


@dataclass(frozen=True)
class Installed:
    """A CUDA distribution the coverage check wants, as the image has it (or why it cannot be read)."""

    package: str
    version: str
    site: str = ""
    dist_info: str = ""
    record: str = ""
    reason: str = ""  # set when the distribution is not in the image

    @property
    def found(self) -> bool:
        return not self.reason

    @property
    def where(self) -> str:
        return f"{self.site}/{self.dist_info}"

    def paths(self) -> frozenset[str]:
        """Every file of the distribution, RECORD itself included, as absolute paths in the image."""
        rel = {*record_files(self.record), f"{self.dist_info}/RECORD"}
        return frozenset(posixpath.join(self.site, p) for p in rel)


@dataclass(frozen=True)
class ImagePackages:
    platform: str
    capabilities: tuple[Capability, ...]
    packages: tuple[Installed, ...]


def read_installed(client: Any, image: str, stack: Stack, installed: Mapping[str, str] | None) -> ImagePackages | None:
    """The RECORD of each CUDA distribution the stack's coverage wants; None when there is nothing to check."""
    inputs = image_sources(client, image, stack, installed)
    if inputs is None:
        return None
    sites = inputs.sites
    out = []
    with created_container(client, image, name_prefix="sglstack-coverage", command=["/bin/true"], entrypoint=[],
                           network_disabled=True) as container:
        for source in inputs.sources:
            if not source.version:
                out.append(Installed(source.package, "", reason=f"{source.package} is not installed in the image"))
                continue
            dist_info = f"{source.package.replace('-', '_')}-{source.version}.dist-info"
            found = find_record(container, sites, dist_info)
            if found is None:
                out.append(Installed(source.package, source.version, dist_info=dist_info,
                                     reason=f"no {dist_info} in the image (looked in {', '.join(sites)})"))
                continue
            out.append(Installed(source.package, source.version, found[0], dist_info,
                                 found[1].decode("utf-8", "replace")))
    return ImagePackages(inputs.platform, inputs.caps, tuple(out))


def check_records(client: Any, image: str, packages: Sequence[Installed]) -> dict[str, dict[str, Any]]:
    """recordcheck.py's report for `packages`, by `site/dist_info` (one container per site folder)."""
    report: dict[str, dict[str, Any]] = {}
    by_site: dict[str, list[str]] = {}
    for p in packages:
        by_site.setdefault(p.site, []).append(p.dist_info)
    for site, dist_infos in sorted(by_site.items()):
        code, out = run_to_completion(client, image, ["python3", "-c", RECORDCHECK.read_text(encoding="utf-8"),
                                                      site, *dist_infos],
                                      name_prefix="sglstack-recordcheck", timeout=RECORDCHECK_TIMEOUT_S,
                                      entrypoint=[], network_disabled=True)
        lines = out.strip().splitlines()
        try:
            found = loads(lines[-1]) if code == 0 and lines else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            why = lines[-1] if lines else f"exit {code}"
            found = {d: {"error": f"the RECORD check did not run: {why}"} for d in dist_infos}
        report.update({f"{site}/{d}": v for d, v in found.items()})
    return report


def record_problems(where: str, result: Mapping[str, Any]) -> list[str]:
    """What a RECORD check found wrong with one distribution (pure); empty when its files are its RECORD's."""
    if result.get("error"):
        return [f"{where}: {result['error']}"]
    problems = []
    mismatched = result.get("mismatched") or []
    if mismatched:
        path, want, got = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        problems.append(f"{path} is not the file its RECORD names (sha256 {got}, RECORD says {want}){more}")
    missing = result.get("missing") or []
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        problems.append(f"{missing[0]} is in {where}/RECORD but not in the image{more}")
    return problems


def record_sha256s(text: str) -> dict[str, str]:
    """A RECORD's {path under site-packages: sha256 hex}, as recordcheck.py reads it."""
    out: dict[str, str] = {}
    for row in csv.reader(text.splitlines()):
        if len(row) >= 2 and row[0]:
            digest = record_sha256(row[1])
            if digest and not digest.startswith("unreadable:"):
                out[posixpath.normpath(row[0])] = digest
    return out


@dataclass(frozen=True)
class RecordCoverage:
    report: CoverageReport
    cached: int  # objects whose listing came from the cache, by their RECORD sha256
    listed: int  # objects listed with cuobjdump (read where their layer is, or copied out of the image)


def coverage_from_records(client: Any, image: str, stack: Stack, found: ImagePackages, *,
                          local: Mapping[str, Path] | None = None, jobs: int | None = None) -> RecordCoverage:
    """The coverage report of the image's CUDA distributions, their objects listed by RECORD sha256 (only the
    ones in no cache listed: read in place where `local` ({image path: file here}) has them, else copied out);
    the caller has checked, or reused a check, that the files are RECORD's."""
    tool: Cuobjdump | None = None
    listings: ListingCache | None = None
    statuses: list[PackageStatus] = []
    packages: list[PackageObjects] = []
    cached = listed = 0
    scratch = coverage_cache_dir() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with created_container(client, image, name_prefix="sglstack-coverage", command=["/bin/true"], entrypoint=[],
                           network_disabled=True) as container, \
            tempfile.TemporaryDirectory(prefix="image-", dir=scratch) as tmp:
        for pkg in found.packages:
            if not pkg.found:
                statuses.append(PackageStatus(pkg.package, pkg.version, pkg.dist_info or "image", False, pkg.reason))
                continue
            if tool is None:
                tool = cuobjdump()
                listings = ListingCache(tool.release)
            assert listings is not None
            files = record_files(pkg.record)
            hashes = record_sha256s(pkg.record)
            wanted = {p for p in files if is_device_object_name(p)}
            known = {p: code for p in wanted if p in hashes and (code := listings.get(hashes[p])) is not None}
            loaders = {p for p in LOADER_PATHS if p in files}
            needed = (wanted - set(known)) | loaders
            here = {p: path for p in needed if (path := (local or {}).get(f"{pkg.site}/{p}")) is not None}
            fetch = needed - set(here)
            dest = Path(tmp) / pkg.package
            dest.mkdir()
            copied = {**here, **(copy_out(container, pkg.site, archive_units(files, fetch), fetch, dest)
                                 if fetch else {})}
            texts = {p: copied.pop(p).read_text(encoding="utf-8", errors="replace") for p in loaders if p in copied}
            # Their bytes are RECORD's (checked by the caller): RECORD's sha256 keys the listing, nothing read twice.
            fresh = list_files(list(copied.values()), tool, cache=listings, jobs=jobs,
                               known={path: hashes[p] for p, path in copied.items() if p in hashes}) if copied else {}
            objects = [DeviceObject(p, hashes[p], c.sass, c.ptx, c.images) for p, c in known.items()]
            objects += [DeviceObject(p, fresh[local][0], fresh[local][1].sass, fresh[local][1].ptx,
                                     fresh[local][1].images) for p, local in copied.items()]
            cached += len(known)
            listed += len(copied)
            packages.append(PackageObjects(pkg.package, pkg.version, pkg.where,
                                           tuple(sorted(objects, key=lambda o: o.path)), texts))
            statuses.append(PackageStatus(pkg.package, pkg.version, pkg.where, True))
    report = build_report(stack.name, found.platform, found.capabilities, stack.coverage, packages, statuses)
    return RecordCoverage(report, cached, listed)
