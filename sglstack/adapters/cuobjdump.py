"""NVIDIA's `cuobjdump` as an adapter: which SASS (cubin) and PTX targets the device code of a file holds.

The binary is NVIDIA's own, from the `nvidia-cuda-cuobjdump` wheel, installed once into the sglstack cache
with pip (through whatever index pip is configured for), or the one named by SGLSTACK_CUOBJDUMP (a CUDA
toolkit's). sglstack parses no fat binary itself. Listings are cached by the file's sha256 and by the
cuobjdump release, and many files are listed in parallel: one `--list-elf` of a 360 MB library takes ~1 s.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..core.credentials import tool_environment
from ..core.errors import SglstackError, last_line
from ..core.inputs import loads
from ..core.records import append_jsonl
from .wheels import cache_dir as wheel_cache_dir

# The oldest release on PyPI is 13.2; one cuobjdump reads the fat binaries of every older toolkit (the 12.x
# builds of the cu129 stack included) and knows the names of the newer targets (sm_103, sm_110, sm_121).
CUOBJDUMP_REQUIREMENT = "nvidia-cuda-cuobjdump==13.2.86"
CUOBJDUMP_ENV = "SGLSTACK_CUOBJDUMP"
LIST_TIMEOUT_S = 600

_ELF_LINE = re.compile(r"^ELF file\s+\d+:\s+(?P<name>\S.*)$")
_PTX_LINE = re.compile(r"^PTX file\s+\d+:\s+(?P<name>\S.*)$")
# cuobjdump names each image `<file>.<n>.sm_XY[a|f].cubin` / `.ptx`; a PTX image named sm_XY is compute_XY.
_ARCH_SUFFIX = re.compile(r"\.(?P<arch>sm_\d+[af]?)\.(?:cubin|ptx)$")
_NO_DEVICE_CODE = "does not contain device code"


class CuobjdumpError(SglstackError):
    """cuobjdump could not be installed, or could not read a file (the message names it)."""


@dataclass(frozen=True)
class DeviceCode:
    """What cuobjdump lists for one file: SASS targets (`sm_90a`) and PTX targets (`sm_90` = compute_90)."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    images: int = 0  # how many cubin and PTX images in all (a library has one set per compilation unit)

    @property
    def has_device_code(self) -> bool:
        return bool(self.sass or self.ptx)

    def to_dict(self) -> dict[str, object]:
        return {"sass": list(self.sass), "ptx": list(self.ptx), "images": self.images}

    @classmethod
    def from_dict(cls, data: dict) -> DeviceCode:
        return cls(tuple(data["sass"]), tuple(data["ptx"]), int(data["images"]))


def parse_listing(stdout: str) -> DeviceCode:
    """The output of `cuobjdump --list-elf --list-ptx FILE` as targets (pure)."""
    sass: set[str] = set()
    ptx: set[str] = set()
    images = 0
    for line in stdout.splitlines():
        line = line.strip()
        for pattern, into in ((_ELF_LINE, sass), (_PTX_LINE, ptx)):
            m = pattern.match(line)
            if not m:
                continue
            arch = _ARCH_SUFFIX.search(m.group("name"))
            if arch is None:
                raise CuobjdumpError(f"cuobjdump listed an image without a target: '{line}'")
            into.add(arch.group("arch"))
            images += 1
    return DeviceCode(tuple(sorted(sass)), tuple(sorted(ptx)), images)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def cache_root() -> Path:
    """The sglstack cache (SGLSTACK_CACHE, default ~/.cache/sglstack): the parent of the wheel cache."""
    return wheel_cache_dir().parent


@dataclass(frozen=True)
class Cuobjdump:
    binary: Path
    release: str  # e.g. "V13.2.86", from `cuobjdump --version`: listings are cached per release

    def list(self, path: Path) -> DeviceCode:
        """`cuobjdump --list-elf --list-ptx PATH`; a file without device code lists nothing."""
        try:
            proc = subprocess.run([str(self.binary), "--list-elf", "--list-ptx", str(path)], capture_output=True,
                                  text=True, check=False, timeout=LIST_TIMEOUT_S, env=tool_environment())
        except subprocess.TimeoutExpired:
            raise CuobjdumpError(f"cuobjdump took over {LIST_TIMEOUT_S} s on {path}") from None
        if proc.returncode != 0:
            if _NO_DEVICE_CODE in proc.stderr:
                return DeviceCode()
            last = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), f"exit {proc.returncode}")
            raise CuobjdumpError(f"cuobjdump cannot read {path}: {last.strip()}")
        return parse_listing(proc.stdout)


def _release_of(binary: Path) -> str:
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False, timeout=60,
                              env=tool_environment())
    except OSError as exc:
        raise CuobjdumpError(f"cannot run {binary}: {exc}") from None
    m = re.search(r"\bV(\d+\.\d+\.\d+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise CuobjdumpError(f"{binary} --version did not name a release: {proc.stdout.strip()[-200:]}")
    return "V" + m.group(1)


def install_dir(requirement: str = CUOBJDUMP_REQUIREMENT) -> Path:
    return cache_root() / "tools" / requirement.replace("==", "-")


def _installed_binary(root: Path) -> Path | None:
    found = sorted(root.glob("nvidia/*/bin/cuobjdump"))
    return found[0] if found else None


def install_cuobjdump(requirement: str = CUOBJDUMP_REQUIREMENT) -> Path:
    """Install the wheel once (pip --target into a temporary folder, then renamed); return the binary."""
    final = install_dir(requirement)
    binary = _installed_binary(final)
    if binary:
        return binary
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=final.parent))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--target", str(tmp), requirement],
            capture_output=True, text=True, check=False, env=tool_environment())
        staged = _installed_binary(tmp)
        if proc.returncode != 0 or staged is None:
            last = last_line(proc.stderr) if proc.stderr.strip() else "no cuobjdump in the wheel"
            raise CuobjdumpError(f"pip install {requirement}: {last}")
        staged.chmod(staged.stat().st_mode | 0o111)
        try:
            tmp.rename(final)
        except OSError:
            if _installed_binary(final) is None:  # not a concurrent install that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    binary = _installed_binary(final)
    assert binary is not None
    return binary


def cuobjdump() -> Cuobjdump:
    """SGLSTACK_CUOBJDUMP when set, else the pinned wheel's binary (installed on first use)."""
    named = os.environ.get(CUOBJDUMP_ENV)
    if named:
        binary = Path(named).expanduser()
        if not binary.is_file():
            raise CuobjdumpError(f"{CUOBJDUMP_ENV}={named} is not a file")
    else:
        binary = install_cuobjdump()
    return Cuobjdump(binary, _release_of(binary))


class ListingCache:
    """sha256 -> DeviceCode for one cuobjdump release, in one JSON-lines file (appended, never rewritten)."""

    def __init__(self, release: str, root: Path | None = None) -> None:
        self.path = (root or cache_root() / "coverage") / f"cuobjdump-{release}.jsonl"
        self._known: dict[str, DeviceCode] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = loads(line)
                    self._known[row["sha256"]] = DeviceCode.from_dict(row)
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from a killed writer: that file is simply listed again

    def get(self, sha256: str) -> DeviceCode | None:
        return self._known.get(sha256)

    def add(self, listings: dict[str, DeviceCode]) -> None:
        new = {k: v for k, v in listings.items() if k not in self._known}
        append_jsonl(self.path, ({"sha256": k, **v.to_dict()} for k, v in sorted(new.items())))
        self._known.update(new)


def list_files(paths: Sequence[Path], tool: Cuobjdump, *, cache: ListingCache | None = None,
               jobs: int | None = None,
               known: Mapping[Path, str] | None = None) -> dict[Path, tuple[str, DeviceCode]]:
    """Hash and list many files in parallel: {path: (sha256, DeviceCode)}; each distinct file listed once.

    `known` gives the sha256 of files whose bytes the caller has already checked against it (a RECORD the same
    verify hashed): those are not read twice. Any other file is hashed here, so a listing is cached under the
    sha256 of the bytes it listed."""
    known = known or {}
    pool = ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1))
    try:
        hashes = dict(zip(paths, pool.map(lambda p: known.get(p) or sha256_file(p), paths), strict=True))
        todo: dict[str, Path] = {}
        for path, digest in hashes.items():
            if (cache is None or cache.get(digest) is None) and digest not in todo:
                todo[digest] = path
        listed = dict(zip(todo, pool.map(tool.list, todo.values()), strict=True))
    finally:
        # On an error or Ctrl-C, the queued files are dropped: only the running listings finish.
        pool.shutdown(wait=True, cancel_futures=True)
    if cache is not None:
        cache.add(listed)
    out: dict[Path, tuple[str, DeviceCode]] = {}
    for path, digest in hashes.items():
        code = listed.get(digest) or (cache.get(digest) if cache else None)
        assert code is not None
        out[path] = (digest, code)
    return out


def is_device_object_name(name: str) -> bool:
    """Files that may carry loadable device code: shared objects (`x.so`, `x.so.1.2`), cubins, fatbins.

    Static archives (`.a`) are link-time inputs that nothing loads at run time, so they are not listed.
    """
    base = name.rsplit("/", 1)[-1]
    return bool(re.search(r"\.so(\.\d+)*$", base)) or base.endswith((".cubin", ".fatbin"))
