"""Kernel coverage, pure: which code a GPU of each compute capability really gets from a stack's CUDA packages.

Three layers, no I/O:
- NVIDIA's compatibility rules: a target (SASS `sm_XY[a|f]`, PTX `compute_XY[a|f]`) x a capability ->
  runs natively, runs after a JIT compile, or not at all (`runs_on`, `cell`);
- each package's own choice of binary per GPU (sgl-kernel's per-architecture variants, FlashInfer's
  per-arch cubins), modelled from the package's loader source (`extensions`);
- the table, the stack's `coverage` policy and the label that summarises it (`coverage.report`).

`invoke coverage` feeds it wheels, the build feeds it the files of the built image (coverage_inspect.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..config.schema import Stack

Cell = Literal["native", "ptx", "missing"]
NATIVE: Cell = "native"
PTX: Cell = "ptx"
MISSING: Cell = "missing"
_RANK: dict[str, int] = {MISSING: 0, PTX: 1, NATIVE: 2}


# ---- NVIDIA's rules --------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Capability:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Capability:
        """'9.0' -> 9.0; a cuda_arch_list entry ('10.0a', '12.0+PTX') names the capability it builds for."""
        m = re.fullmatch(r"(\d+)\.(\d)a?(\+PTX)?", text.strip())
        if not m:
            raise ValueError(f"'{text}' is not a compute capability like '9.0' or '10.3'")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class Target:
    """One compiled image: SASS for `sm_XY` or PTX for `compute_XY`, plain, arch-specific (a) or family (f)."""

    kind: Literal["sass", "ptx"]
    major: int
    minor: int
    variant: Literal["", "a", "f"] = ""

    @classmethod
    def parse(cls, name: str, kind: Literal["sass", "ptx"]) -> Target:
        """'sm_90a' / 'compute_100f' (cuobjdump names PTX images sm_XY too); the last digit is the minor."""
        m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", name)
        if not m:
            raise ValueError(f"'{name}' is not a CUDA target like sm_90a or compute_100f")
        variant: Literal["", "a", "f"] = m.group(3)  # type: ignore[assignment]
        return cls(kind, int(m.group(1)), int(m.group(2)), variant)

    def __str__(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.major}{self.minor}{self.variant}"


def runs_on(target: Target, cap: Capability) -> bool:
    """NVIDIA's CUDA compatibility rules (CUDA Programming Guide, "Binary Compatibility", "PTX
    Compatibility", and the arch-specific / family-specific feature sets):

    - SASS sm_XY runs on X.Z for Z >= Y: the same major only (an sm_80 cubin does not load on 9.0);
    - SASS sm_XYa runs on X.Y only;
    - SASS sm_XYf runs within its family: the same major, Z >= Y (sm_100f: 10.0, 10.3; sm_120f: 12.0, 12.1);
    - PTX compute_XY is JIT-compiled on X.Y and every newer capability, across majors;
    - PTX compute_XYa only on X.Y; PTX compute_XYf only within its family, like sm_XYf.
    Measured on an H200 (9.0): sm_80/86/89 cubins fail, sm_90/sm_90a load, sm_100/100a/120a fail; PTX for
    sm_80 and for sm_90a runs, PTX for sm_100 fails.
    """
    same = (cap.major, cap.minor) == (target.major, target.minor)
    if target.variant == "a":
        return same
    in_family = cap.major == target.major and cap.minor >= target.minor
    if target.kind == "sass" or target.variant == "f":
        return in_family
    return (cap.major, cap.minor) >= (target.major, target.minor)


def cell(targets: Iterable[Target], cap: Capability) -> Cell:
    """native when some SASS runs, ptx when only PTX can be JIT-compiled for it, else missing."""
    best: Cell = MISSING
    for target in targets:
        if runs_on(target, cap):
            if target.kind == "sass":
                return NATIVE
            best = PTX
    return best


def worst(cells: Iterable[Cell]) -> Cell:
    return min(cells, key=_RANK.__getitem__, default=MISSING)


def capabilities_of(cuda_arch_list: Sequence[str]) -> tuple[Capability, ...]:
    """The table's columns: each capability of the stack's cuda_arch_list once, in its order."""
    out: list[Capability] = []
    for entry in cuda_arch_list:
        cap = Capability.parse(entry)
        if cap not in out:
            out.append(cap)
    return tuple(out)


# ---- what the packages contain ---------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceObject:
    """A file of a package (path relative to site-packages, as in the wheel) and the device code in it."""

    path: str
    sha256: str
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    images: int = 0

    @property
    def targets(self) -> tuple[Target, ...]:
        return (*(Target.parse(a, "sass") for a in self.sass), *(Target.parse(a, "ptx") for a in self.ptx))

    @property
    def has_device_code(self) -> bool:
        return bool(self.sass or self.ptx)

    def describe(self) -> str:
        return ", ".join(str(t) for t in sorted(self.targets, key=_target_order)) or "no device code"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "sass": list(self.sass), "ptx": list(self.ptx),
                "images": self.images}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceObject:
        return cls(data["path"], data["sha256"], tuple(data["sass"]), tuple(data["ptx"]), int(data["images"]))


@dataclass(frozen=True)
class PackageObjects:
    """The device-code-bearing files of one installed distribution, and the loader sources the models read."""

    package: str  # canonical name, e.g. "sglang-kernel"
    version: str
    source: str  # the wheel's file name, or "image:<path>"
    objects: tuple[DeviceObject, ...]
    loader_sources: Mapping[str, str] = field(default_factory=dict)  # path -> text (LOADER_SOURCES)


@dataclass(frozen=True)
class Extension:
    """One row of the table: what a GPU of each capability loads from one extension, and the cell."""

    package: str
    name: str
    cells: Mapping[str, Cell]  # capability ("9.0") -> cell
    detail: Mapping[str, str]  # capability -> what it loads and which targets serve it
    aliases: tuple[str, ...] = ()  # other paths with the same content (wheels have no symlinks)

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "name": self.name, "cells": dict(self.cells), "detail": dict(self.detail),
                "aliases": list(self.aliases)}


def extension_name(path: str) -> str:
    """`sgl_kernel/flash_ops.abi3.so` -> `sgl_kernel.flash_ops` (a Python extension module, by its import
    name); `lib/mscclpp.so.0.6.0` -> `lib/mscclpp.so` (a shared library, by its path); cubins by path."""
    parent, _, base = path.rpartition("/")
    dirs = parent.split("/") if parent else []
    m = re.fullmatch(r"([A-Za-z_]\w*)(\.abi3|\.cpython-[^.]+)?\.so", base)
    if m and (m.group(2) or not (base.startswith("lib") or {"lib", "lib64"} & set(dirs))):
        return ".".join([*dirs, m.group(1)])
    return re.sub(r"(\.so)(\.\d+)+$", r"\1", path)


def _generic(package: str, objects: Sequence[DeviceObject], caps: Sequence[Capability]) -> list[Extension]:
    """Each object with device code is one extension; the CUDA driver picks the image for the GPU."""
    by_hash: dict[str, list[DeviceObject]] = {}
    for obj in objects:
        if obj.has_device_code:
            by_hash.setdefault(obj.sha256, []).append(obj)
    rows = []
    for same in by_hash.values():
        named = sorted(same, key=lambda o: (len(extension_name(o.path)), o.path))
        first = named[0]
        cells = {str(c): cell(first.targets, c) for c in caps}
        detail = {str(c): _served(first, c) for c in caps}
        rows.append(Extension(package, extension_name(first.path), cells, detail,
                              tuple(o.path for o in named[1:])))
    return rows


def _target_order(t: Target) -> tuple[int, int, int, str]:
    return (t.kind == "ptx", t.major, t.minor, t.variant)


def _served(obj: DeviceObject, cap: Capability) -> str:
    running = [str(t) for t in sorted(obj.targets, key=_target_order) if runs_on(t, cap)]
    return f"{obj.path}: {', '.join(running) if running else 'none of ' + obj.describe()}"


# sgl-kernel 0.3.x, sgl_kernel/load_utils.py `_load_architecture_specific_ops`: compute capability
# major*10+minor == 90 loads sgl_kernel/sm90/common_ops.* (the fast-math Hopper build), every other GPU
# loads sgl_kernel/sm100/common_ops.* ("precise math for compatibility"); when that file is missing it
# falls back to sgl_kernel/common_ops.*, then to `import common_ops`. Compiled files (.so) come first.
# The distribution is renamed now and then (sgl-kernel to 0.3.x, sglang-kernel from 0.4, still with
# this loader in 0.4.10); the import package stays `sgl_kernel`. So the model applies to whichever
# package ships `sgl_kernel/`, whatever the stack names it.
SGL_KERNEL_LOADER = "sgl_kernel/load_utils.py"
SGL_KERNEL_IMPORT = "sgl_kernel/"
_SGL_KERNEL_LOADER_MARKS = ("compute_capability == 90", 'ops_subdir = "sm90"', 'ops_subdir = "sm100"')
# The loader sources the models read, by their path in site-packages: read from any package that has them.
LOADER_PATHS = (SGL_KERNEL_LOADER,)


def is_kernel_package(package: PackageObjects) -> bool:
    """Whether `package` is SGLang's kernel package (it ships the `sgl_kernel` import package)."""
    return (any(o.path.startswith(SGL_KERNEL_IMPORT) for o in package.objects)
            or SGL_KERNEL_LOADER in package.loader_sources)


def sgl_kernel_variant(cap: Capability) -> str:
    return "sm90" if cap.major * 10 + cap.minor == 90 else "sm100"


def _common_ops(path: str) -> str | None:
    """'sm90', 'sm100', '' (the fallback at sgl_kernel/) for a compiled common_ops file, else None."""
    m = re.fullmatch(r"sgl_kernel/(?:(sm\d+)/)?common_ops\.[^/]*(?:\.so|\.pyd|\.dll)[^/]*", path)
    return (m.group(1) or "") if m else None


def _sgl_kernel(package: str, objects: Sequence[DeviceObject], caps: Sequence[Capability]) -> list[Extension]:
    variants: dict[str, DeviceObject] = {}
    rest = []
    for obj in sorted(objects, key=lambda o: o.path):
        where = _common_ops(obj.path)
        if where is None:
            rest.append(obj)
        else:
            variants.setdefault(where, obj)
    rows = _generic(package, rest, caps)
    if variants:
        cells: dict[str, Cell] = {}
        detail: dict[str, str] = {}
        for cap in caps:
            loaded = variants.get(sgl_kernel_variant(cap)) or variants.get("")
            if loaded is None:
                cells[str(cap)], detail[str(cap)] = MISSING, f"no {sgl_kernel_variant(cap)}/common_ops to load"
            else:
                cells[str(cap)], detail[str(cap)] = cell(loaded.targets, cap), _served(loaded, cap)
        rows.insert(0, Extension(package, "sgl_kernel.common_ops", cells, detail))
    return rows


def loader_notes(package: PackageObjects) -> list[str]:
    """A note when a package's loader no longer reads as the one modelled here."""
    if not is_kernel_package(package):
        return []
    name = package.package
    text = package.loader_sources.get(SGL_KERNEL_LOADER)
    if text is None:
        return [f"{name} has no {SGL_KERNEL_LOADER}: the 0.3.x variant rule (9.0 -> sm90, else sm100) is assumed"]
    if not all(mark in text for mark in _SGL_KERNEL_LOADER_MARKS):
        return [f"{name}'s {SGL_KERNEL_LOADER} changed: the 0.3.x variant rule (9.0 -> sm90, else sm100) "
                f"is assumed; check it against the new loader"]
    return []


# FlashInfer (0.6.x) loads its trtllm-gen cubins by the architecture in the kernel's name:
# include/flashinfer/trtllm/fmha/fmhaKernels.cuh `isSMCompatible` takes Sm100f kernels on 10.0 and 10.3,
# Sm100a kernels on 10.0 only, Sm103a on 10.3 only, and otherwise only a kernel of the GPU's own SM; the
# gemm / batched-gemm runners name their CudaArch the same way (trtllm/gen/CudaArchDecl.h). So: a tag
# SmXYf is taken within the family (same major, minor >= Y), any other tag on that exact capability only,
# and a cubin without a tag (deep-gemm, chosen by FlashInfer's kernel map) on every GPU.
_CUBIN_TAG = re.compile(r"[Ss]m(\d+)(\d)([af]?)(?![0-9])")


def flashinfer_cubin_takes(name: str, cap: Capability) -> bool:
    tags = _CUBIN_TAG.findall(name.rsplit("/", 1)[-1])
    if not tags:
        return True
    major, minor, variant = int(tags[-1][0]), int(tags[-1][1]), tags[-1][2]
    if variant == "f":
        return cap.major == major and cap.minor >= minor
    return (cap.major, cap.minor) == (major, minor)


def _cubin_group(path: str) -> str | None:
    """flashinfer_cubin/cubins/<hash>/fmha/trtllm-gen/x.cubin -> fmha/trtllm-gen (version hashes dropped)."""
    parts = path.split("/")
    if len(parts) < 5 or parts[:2] != ["flashinfer_cubin", "cubins"] or not path.endswith(".cubin"):
        return None
    return "/".join(re.sub(r"(-[0-9a-f]{7})+$", "", p) for p in parts[3:-1]) or "cubins"


def _flashinfer_cubin(objects: Sequence[DeviceObject], caps: Sequence[Capability]) -> list[Extension]:
    groups: dict[str, list[DeviceObject]] = {}
    rest = []
    for obj in objects:
        group = _cubin_group(obj.path)
        if group is None:
            rest.append(obj)
        else:
            groups.setdefault(group, []).append(obj)
    rows = []
    for group, members in sorted(groups.items()):
        cells: dict[str, Cell] = {}
        detail: dict[str, str] = {}
        for cap in caps:
            taken = [o for o in members if flashinfer_cubin_takes(o.path, cap)]
            if not taken:
                cells[str(cap)], detail[str(cap)] = MISSING, f"none of {len(members)} cubins is named for {cap}"
                continue
            per = [cell(o.targets, cap) for o in taken]
            cells[str(cap)] = worst(per)
            arches = [str(t) for t in sorted({t for o in taken for t in o.targets if t.kind == "sass"},
                                             key=_target_order)]
            short = sum(c != NATIVE for c in per)
            detail[str(cap)] = (f"{len(taken)} of {len(members)} cubins ({', '.join(arches) or 'no SASS'})"
                                + (f", {short} without native code" if short else ""))
        rows.append(Extension("flashinfer-cubin", f"flashinfer_cubin/{group}", cells, detail))
    return rows + _generic("flashinfer-cubin", rest, caps)


def extensions(package: PackageObjects, caps: Sequence[Capability]) -> list[Extension]:
    """The rows of one package: its own loader model where it has one, else one row per object."""
    if is_kernel_package(package):
        return _sgl_kernel(package.package, package.objects, caps)
    if package.package == "flashinfer-cubin":
        return _flashinfer_cubin(package.objects, caps)
    return _generic(package.package, package.objects, caps)


# ---- which packages carry CUDA code ----------------------------------------------------------------

# flashinfer-python ships CUDA sources only (FlashInfer JIT-compiles them at run time, with the image's nvcc);
# its compiled kernels come in flashinfer-cubin and, from FlashInfer's own index, flashinfer-jit-cache.
FLASHINFER_DEVICE_CODE = ("flashinfer-cubin", "flashinfer-jit-cache")


@dataclass(frozen=True)
class WheelSource:
    """One pinned distribution that ships CUDA code, and where pip gets it for the stack."""

    package: str  # canonical name
    version: str
    requirement: str  # `name==version`, or a direct wheel URL
    index_url: str | None = None
    extra_index: bool = False  # the index is added to pip's own (FlashInfer's), not instead of it

    @property
    def label(self) -> str:
        return f"{self.package} {self.version}"


def device_code_wheels(stack: Stack, platform: str, versions: Mapping[str, str] | None = None) -> list[WheelSource]:
    """The kernel package (with the deep_gemm and other objects inside it), FlashInfer's cubin/JIT-cache
    wheels, and torch with its companions, as the stack pins them (the same indexes and URLs the Dockerfile
    uses); then the stack's `coverage.packages` at the version `versions` (the lock's or the image's) gives
    each, or at version "" when it gives none (the caller reports that package as not checked)."""
    out: list[WheelSource] = []
    if stack.sgl_kernel:
        pin = stack.sgl_kernel
        req = pin.url_for(platform) or f"{pin.package}=={pin.version}"
        out.append(WheelSource(pin.package, pin.version, req, None if pin.url else pin.index_url))
    if stack.flashinfer:
        for name in stack.flashinfer.packages:
            if canonicalize_name(name) in FLASHINFER_DEVICE_CODE:
                out.append(WheelSource(canonicalize_name(name), stack.flashinfer.version,
                                       f"{name}=={stack.flashinfer.version}", stack.flashinfer.index_url, True))
    if stack.torch:
        for text in stack.torch.requirements():
            parsed = Requirement(text)
            version = next(iter(parsed.specifier)).version
            out.append(WheelSource(canonicalize_name(parsed.name), version, text, stack.torch.index_url))
    seen = {w.package for w in out}
    for name in stack.coverage.packages:
        if name not in seen:
            version = (versions or {}).get(name, "")
            out.append(WheelSource(name, version, f"{name}=={version}" if version else name))
    return out


# ---- the policy and the report ---------------------------------------------------------------------


