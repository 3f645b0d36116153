"""Do the shared libraries every compiled file of an image needs exist in the image? (stdlib only)

Reads each ELF file's dynamic section (DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME) with `struct`, no
readelf, and finds each need the way the dynamic loader would: RPATH (when there is no RUNPATH),
LD_LIBRARY_PATH, RUNPATH (with $ORIGIN), the ld.so.conf folders, the default folders. A need the loader
path does not find may still be met inside the image by a library that another package of the image ships
and loads first (torch's libc10.so for the extensions that link it, NVIDIA's wheels preloaded by torch):
that is counted apart, by name. The driver's libraries (libcuda.so.1, libnvidia-ml.so.1) come from the
host at run time (the NVIDIA container runtime mounts them): named as such. Anything else is unresolved.

Runs inside the image (`imagecheck.py`), and on the host against a folder in tests (`root`).
"""

from __future__ import annotations

import glob
import os
import stat
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

ELF_MAGIC = b"\x7fELF"
# Only code for the image's own CPU is loaded by ld.so; cubins are ELF too (EM_CUDA = 190), and are not.
HOST_MACHINES = {62: "x86_64", 183: "aarch64"}
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 14, 15, 29
SHT_DYNAMIC = 6
PT_LOAD, PT_DYNAMIC = 1, 2
# Provided by the host's driver, never by an image: libcuda (the driver API) and NVML.
HOST_PROVIDED = ("libcuda.so.1", "libnvidia-ml.so.1")
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


class ElfError(ValueError):
    """The file starts like ELF but its headers cannot be read."""


@dataclass(frozen=True)
class ElfDynamic:
    machine: int
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    soname: str | None = None


def read_dynamic(path: str) -> ElfDynamic | None:
    """The dynamic section of the ELF file at `path`; None for a file that is not ELF."""
    with open(path, "rb") as fh:
        ident = fh.read(64)
        if not ident.startswith(ELF_MAGIC):
            return None
        if len(ident) < 52 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError(f"{path}: truncated or unknown ELF class")
        is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        if is64:
            (machine, phoff, shoff, phentsize, phnum, shentsize, shnum) = struct.unpack_from(
                end + "18xH12xQQ6xHHHH", ident)[:7]
        else:
            (machine, phoff, shoff, phentsize, phnum, shentsize, shnum) = struct.unpack_from(
                end + "18xH8xII6xHHHH", ident)[:7]
        entries, strtab = _dynamic_from_sections(fh, end, is64, shoff, shentsize, shnum)
        if entries is None:
            entries, strtab = _dynamic_from_segments(fh, end, is64, phoff, phentsize, phnum)
    if entries is None:
        return ElfDynamic(machine)  # a static executable or an object without dynamic linking

    def text(offset: int) -> str:
        if strtab is None:
            raise ElfError(f"{path}: dynamic section without a string table")
        stop = strtab.find(b"\0", offset)
        return strtab[offset:stop if stop >= 0 else len(strtab)].decode("utf-8", "replace")

    needed = tuple(text(v) for t, v in entries if t == DT_NEEDED)
    rpath = tuple(p for t, v in entries if t == DT_RPATH for p in text(v).split(":") if p)
    runpath = tuple(p for t, v in entries if t == DT_RUNPATH for p in text(v).split(":") if p)
    soname = next((text(v) for t, v in entries if t == DT_SONAME), None)
    return ElfDynamic(machine, needed, rpath, runpath, soname)


def _read(fh: BinaryIO, offset: int, size: int) -> bytes:
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise ElfError(f"{getattr(fh, 'name', '?')}: truncated at offset {offset}")
    return data


def _entries(data: bytes, end: str, is64: bool) -> list[tuple[int, int]]:
    fmt = end + ("qQ" if is64 else "iI")
    out = []
    for tag, value in struct.iter_unpack(fmt, data[:len(data) - len(data) % struct.calcsize(fmt)]):
        if tag == DT_NULL:
            break
        out.append((tag, value))
    return out


def _dynamic_from_sections(fh: BinaryIO, end: str, is64: bool, shoff: int, shentsize: int,
                           shnum: int) -> tuple[list[tuple[int, int]] | None, bytes | None]:
    if not shoff or not shnum or shentsize < (64 if is64 else 40):
        return None, None
    table = _read(fh, shoff, shentsize * shnum)
    fmt = end + ("4xI8x8xQQI4x8x8x" if is64 else "4xI4x4xIII4x4x4x")

    def section(i: int) -> tuple[int, int, int, int]:
        kind, offset, size, link = struct.unpack_from(fmt, table, i * shentsize)
        return kind, offset, size, link

    for i in range(shnum):
        kind, offset, size, link = section(i)
        if kind == SHT_DYNAMIC:
            entries = _entries(_read(fh, offset, size), end, is64)
            if link >= shnum:
                raise ElfError(f"{getattr(fh, 'name', '?')}: .dynamic links to section {link} of {shnum}")
            _, str_offset, str_size, _ = section(link)
            return entries, _read(fh, str_offset, str_size)
    return None, None


def _dynamic_from_segments(fh: BinaryIO, end: str, is64: bool, phoff: int, phentsize: int,
                           phnum: int) -> tuple[list[tuple[int, int]] | None, bytes | None]:
    """Objects stripped of section headers: PT_DYNAMIC, and DT_STRTAB's address mapped through PT_LOAD."""
    if not phoff or not phnum:
        return None, None
    table = _read(fh, phoff, phentsize * phnum)
    fmt = end + ("I4xQQ8xQ8x8x" if is64 else "III4xI4x4x4x")
    loads, dynamic = [], None
    for i in range(phnum):
        kind, offset, vaddr, *rest = struct.unpack_from(fmt, table, i * phentsize)
        filesz = rest[-1]
        if kind == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return None, None
    entries = _entries(_read(fh, *dynamic), end, is64)
    addr = next((v for t, v in entries if t == DT_STRTAB), None)
    for vaddr, offset, filesz in loads:
        if addr is not None and vaddr <= addr < vaddr + filesz:
            fh.seek(offset + addr - vaddr)
            return entries, fh.read(min(filesz - (addr - vaddr), 1 << 24))
    return entries, None


# ---- where the loader looks ------------------------------------------------------------------------

def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def ld_conf_dirs(root: str = "/", conf: str = "/etc/ld.so.conf", _seen: set[str] | None = None) -> list[str]:
    """The folders /etc/ld.so.conf names (its `include` globs followed), in order."""
    seen = _seen if _seen is not None else set()
    if conf in seen:
        return []
    seen.add(conf)
    out: list[str] = []
    try:
        with open(_under(root, conf), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not pattern.startswith("/"):
                pattern = os.path.join(os.path.dirname(conf), pattern)
            for match in sorted(glob.glob(_under(root, pattern))):
                rel = "/" + os.path.relpath(match, root) if root not in ("", "/") else match
                out += ld_conf_dirs(root, rel, seen)
        else:
            out.append(line)
    return out


def system_dirs(machine: str, root: str = "/") -> list[str]:
    """ld.so's trusted folders for `machine`: ld.so.conf's, then the multiarch and default ones."""
    triple = MULTIARCH.get(machine)
    multiarch = [f"/lib/{triple}", f"/usr/lib/{triple}"] if triple else []
    return list(dict.fromkeys([*ld_conf_dirs(root), *multiarch, *DEFAULT_DIRS]))


def _expand(entry: str, origin: str) -> str:
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


@dataclass
class NeedsReport:
    files: int = 0  # ELF files for the image's CPU that were read
    needs: int = 0  # DT_NEEDED entries of those files
    by_path: int = 0  # found where the loader looks
    by_name: int = 0  # found only as a library of the same name elsewhere in the image (loaded first)
    host: dict[str, int] = field(default_factory=dict)  # host-provided library -> files needing it
    unresolved: dict[str, list[str]] = field(default_factory=dict)  # file -> its needs found nowhere
    unreadable: dict[str, str] = field(default_factory=dict)  # file -> why its headers could not be read
    # file -> its CPU, for shared objects built for another CPU than the image's (a wheel of the wrong
    # platform: ld.so refuses it, "wrong ELF class" or "cannot open shared object file")
    foreign: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"files": self.files, "needs": self.needs, "by_path": self.by_path, "by_name": self.by_name,
                "host_provided": dict(sorted(self.host.items())),
                "unresolved": {k: v for k, v in sorted(self.unresolved.items())},
                "unreadable": dict(sorted(self.unreadable.items())),
                "foreign": dict(sorted(self.foreign.items()))}


def _walk(folders: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """(path, is a regular file that ld.so could load) for every file and link under `folders`, each once."""
    seen: set[str] = set()
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                path = os.path.join(dirpath, name)
                if path in seen:
                    continue
                seen.add(path)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                # Shared objects by name, programs by their exec bit: other files are not loaded by ld.so,
                # and not opening them keeps a scan of an image's 10 GB of packages to seconds.
                loadable = ".so" in name or bool(mode & 0o111)
                yield path, stat.S_ISREG(mode) and loadable


def check_needs(folders: Sequence[str], *, root: str = "/", machine: str | None = None,
                ld_library_path: str = "", host_provided: Sequence[str] = HOST_PROVIDED) -> NeedsReport:
    """Every DT_NEEDED of every ELF file for the image's CPU under `folders` (paths inside `root`)."""
    report = NeedsReport()
    objects: dict[str, ElfDynamic] = {}
    names: set[str] = set()  # every file name under `folders`: what the image ships, by name
    for path, regular in _walk(_under(root, f) for f in folders):
        names.add(os.path.basename(path))
        if not regular:
            continue
        try:
            dyn = read_dynamic(path)
        except (OSError, ElfError, struct.error) as exc:
            report.unreadable[path] = str(exc)[:200]
            continue
        if dyn is not None and dyn.machine in HOST_MACHINES:
            objects[path] = dyn
            if dyn.soname:
                names.add(dyn.soname)
    arch = machine or next((HOST_MACHINES[d.machine] for d in objects.values()), "x86_64")
    for path in [p for p, d in objects.items() if HOST_MACHINES[d.machine] != arch and ".so" in os.path.basename(p)]:
        inside = "/" + os.path.relpath(path, root) if root not in ("", "/") else path
        report.foreign[inside] = HOST_MACHINES[objects.pop(path).machine]
    trusted = system_dirs(arch, root)
    env_dirs = [d for d in ld_library_path.split(":") if d]
    found_cache: dict[str, bool] = {}

    def exists(folder: str, name: str) -> bool:
        key = os.path.join(folder, name)
        if key not in found_cache:
            found_cache[key] = os.path.exists(_under(root, key) if folder.startswith("/") else key)
        return found_cache[key]

    for path, dyn in sorted(objects.items()):
        report.files += 1
        inside = "/" + os.path.relpath(path, root) if root not in ("", "/") else path
        origin = os.path.dirname(inside)
        search = [*([] if dyn.runpath else dyn.rpath), *env_dirs, *dyn.runpath]
        search = [os.path.normpath(_expand(d, origin)) for d in search] + trusted
        missing = []
        for need in dyn.needed:
            report.needs += 1
            hit = os.path.exists(_under(root, need)) if "/" in need else any(exists(d, need) for d in search)
            if hit:
                report.by_path += 1
            elif need in host_provided:
                report.host[need] = report.host.get(need, 0) + 1
            elif need in names:
                report.by_name += 1
            else:
                missing.append(need)
        if missing:
            report.unresolved[inside] = missing
    if root not in ("", "/"):
        report.unreadable = {"/" + os.path.relpath(k, root): v for k, v in report.unreadable.items()}
    return report
