"""An image's size, pure: by layer (what each layer adds), the largest packages, the files present twice,
the size budget of a stack, what grew against the last recorded build, and the bytes a node re-pulls.

The facts come from two places (read by `size/measure.py`): the engine's layer history (bytes and the
instruction of each layer, uncompressed as the engine stores them) and `inimage/incontainer/imagefiles.py` run in
a container of the image (installed bytes of each distribution, duplicates by sha256, one library name at
two paths). Nothing here talks to Docker, so the report, the budget and the growth table are tested without it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GB = 1_000_000_000  # sizes are decimal, as `docker images` and registries print them
MB = 1_000_000
TOP_PACKAGES = 20
# Instructions that change only the image's config: the engine lists them in the history with no layer.
_CONFIG_ONLY = re.compile(r"^(?:/bin/sh -c #\(nop\) )?\s*(ENV|LABEL|EXPOSE|SHELL|ARG|CMD|ENTRYPOINT|USER|VOLUME|"
                          r"STOPSIGNAL|HEALTHCHECK|MAINTAINER|ONBUILD)\b")
_SHELL_PREFIX = re.compile(r"^(?:RUN )?(?:\|\d+ \S+ )?/bin/(?:ba)?sh (?:-o pipefail )?-c ")
_LOCK_PART = re.compile(r"/run/sglstack-lock/([A-Za-z0-9._-]+)\.txt")
# A part the wheels stage unpacked, copied in (render.dockerfile.WHEELS_ROOT): `COPY /stage/torch/opt/venv/ ...`.
_COPIED_PART = re.compile(r"^COPY (?:--from=\S+ )?/stage/([A-Za-z0-9._-]+)/opt/venv/ ")


@dataclass(frozen=True)
class Layer:
    """One layer of the image, bottom first: its uncompressed bytes and what made it."""

    index: int
    bytes: int
    created_by: str
    diff_id: str | None = None  # the layer's content digest (RootFS.Layers), where the history maps onto it

    @property
    def step(self) -> str:
        return layer_step(self.created_by)


@dataclass(frozen=True)
class Duplicate:
    """One content (sha256) at several paths: every copy past the first is room taken twice."""

    sha256: str
    bytes: int
    paths: tuple[tuple[str, str | None], ...]  # (path, the distribution that installed it, if any)

    @property
    def wasted(self) -> int:
        return self.bytes * (len(self.paths) - 1)


@dataclass(frozen=True)
class SameName:
    """One shared library's file name at several paths with different content (two builds of one library)."""

    name: str
    paths: tuple[tuple[str, str | None, int], ...]  # (path, distribution, bytes)


@dataclass(frozen=True)
class SizeReport:
    image: str
    image_id: str
    bytes: int  # the engine's size of the whole image, uncompressed
    layers: tuple[Layer, ...]
    packages: tuple[tuple[str, str, int], ...]  # (name, version, installed bytes), largest first
    duplicates: tuple[Duplicate, ...] = ()
    same_name: tuple[SameName, ...] = ()
    files: int = 0
    seconds: float | None = None  # how long the report took to gather
    notes: tuple[str, ...] = field(default=())

    @property
    def duplicate_bytes(self) -> int:
        return sum(d.wasted for d in self.duplicates)

    @property
    def installed_bytes(self) -> int:
        return sum(p[2] for p in self.packages)


# ---- reading the facts -----------------------------------------------------------------------------

def layer_step(created_by: str) -> str:
    """A short name for what a layer adds: the lock part a pip step installs, else the instruction, trimmed."""
    text = " ".join(created_by.split())
    text = text.removesuffix(" # buildkit")
    if not text:
        return "base image"
    if m := _LOCK_PART.search(text):
        return f"pip: lock part {m[1]}"
    if m := _COPIED_PART.match(text):
        return "pip: the SGLang wheel" if m[1] == "sglang" else f"pip: lock part {m[1]}"
    if "#(nop)" in text:  # the classic builder's way of writing a non-RUN instruction
        return text.split("#(nop)", 1)[1].strip()[:100]
    text = _SHELL_PREFIX.sub("RUN ", text)
    if text.startswith("RUN ") and "apt-get install" in text:
        packages = text.split("apt-get install", 1)[1].split("&&", 1)[0].split()
        return "apt: " + " ".join(p for p in packages if not p.startswith("-"))
    if text.startswith("RUN ") and "pip install" in text and "sglang-" in text:
        return "pip: the SGLang wheel"
    return text[:100]


def layers_from_history(history: Sequence[Mapping[str, Any]], diff_ids: Sequence[str]) -> tuple[Layer, ...]:
    """The engine's history (newest first, as the API gives it) as layers, bottom first.

    Config-only instructions (ENV, LABEL, ...) have no layer and are left out. Each other entry is one
    layer of RootFS, in order; when the counts disagree (an image made by another tool) the layers
    are kept without their content digests rather than matched wrongly."""
    entries = []
    for entry in reversed(list(history)):
        created_by = str(entry.get("CreatedBy") or "")
        size = int(entry.get("Size") or 0)
        if size == 0 and _CONFIG_ONLY.match(" ".join(created_by.split())):
            continue
        entries.append((size, created_by))
    ids: Sequence[str | None] = diff_ids if len(diff_ids) == len(entries) else [None] * len(entries)
    return tuple(Layer(i, size, created_by, ids[i]) for i, (size, created_by) in enumerate(entries))


def report_from(image: str, image_id: str, image_bytes: int, layers: Sequence[Layer],
                files: Mapping[str, Any], seconds: float | None = None) -> SizeReport:
    """A report from the layers and the JSON `imagefiles.py` printed in the image."""
    packages = tuple((str(n), str(v), int(b)) for n, v, b, *_ in files.get("packages", ()))
    packages = tuple(sorted(packages, key=lambda p: (-p[2], p[0].lower())))
    duplicates = tuple(sorted(
        (Duplicate(str(d["sha256"]), int(d["bytes"]), tuple((str(p), o) for p, o in d["paths"]))
         for d in files.get("duplicates", ())),
        key=lambda d: (-d.wasted, d.paths[0][0])))
    same_name = tuple(sorted(
        (SameName(str(s["name"]), tuple((str(p), o, int(b)) for p, o, b in s["paths"]))
         for s in files.get("same_name", ())),
        key=lambda s: (-sum(p[2] for p in s.paths), s.name)))
    return SizeReport(image=image, image_id=image_id, bytes=image_bytes, layers=tuple(layers), packages=packages,
                      duplicates=duplicates, same_name=same_name, files=int(files.get("files", 0)), seconds=seconds)


# ---- the record's summary, the budget, what grew ---------------------------------------------------

def size_summary(report: SizeReport) -> dict[str, Any]:
    """What the build record keeps: enough to say later what grew (every layer step, every package)."""
    return {
        "bytes": report.bytes,
        "installed_bytes": report.installed_bytes,
        "duplicate_bytes": report.duplicate_bytes,
        "layers": [{"step": layer.step, "bytes": layer.bytes, "diff_id": layer.diff_id} for layer in report.layers],
        "packages": {name: size for name, _, size in report.packages},
    }


@dataclass(frozen=True)
class Growth:
    what: str  # "image", "layer: STEP" or "package: NAME"
    before: int | None
    after: int | None

    @property
    def delta(self) -> int:
        return (self.after or 0) - (self.before or 0)


def _by_step(summary: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in summary.get("layers") or ():
        out[str(layer["step"])] = out.get(str(layer["step"]), 0) + int(layer["bytes"])
    return out


def size_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any], *, min_bytes: int = MB,
                 limit: int = 20) -> list[Growth]:
    """What changed in size from one summary to the other: the image, then layers and packages that moved
    by at least `min_bytes`, largest change first (a name breaks ties, so the order never depends on a dict's)."""
    rows = [Growth("image", int(before["bytes"]) if before else None, int(after["bytes"]))]
    if before is None:
        return rows
    moved: list[Growth] = []
    for kind, a, b in (("layer", _by_step(before), _by_step(after)),
                       ("package", dict(before.get("packages") or {}), dict(after.get("packages") or {}))):
        for name in set(a) | set(b):
            row = Growth(f"{kind}: {name}", a.get(name), b.get(name))
            if abs(row.delta) >= min_bytes:
                moved.append(row)
    moved.sort(key=lambda r: (-abs(r.delta), r.what))
    return rows + moved[:limit]


def growth_table(rows: Sequence[Growth]) -> str:
    """Plain text (it goes into one error, a log line and a test's assertion alike)."""

    def gb(value: int | None) -> str:
        return "-" if value is None else f"{value / GB:.3f}"

    width = max([len(r.what) for r in rows] + [4])
    lines = [f"{'what':<{width}}  {'before GB':>10}  {'after GB':>10}  {'change MB':>10}"]
    for row in rows:
        lines.append(f"{row.what:<{width}}  {gb(row.before):>10}  {gb(row.after):>10}  {row.delta / MB:>+10.1f}")
    return "\n".join(lines)


@dataclass(frozen=True)
class OverBudget:
    """A build over its stack's size budget: the one-line error, and the table that says what grew."""

    headline: str
    table: str


def over_budget(stack: str, summary: Mapping[str, Any], max_gb: float,
                previous: Mapping[str, Any] | None) -> OverBudget | None:
    """None within the budget; else the failure: the image's size against `size.max_gb`, and what grew
    since the stack's last recorded build (or, with none, the largest layers and packages)."""
    size = int(summary["bytes"])
    if size <= max_gb * GB:
        return None
    head = (f"stack '{stack}': image is {size / GB:.3f} GB, over its size budget (size.max_gb: {max_gb:g}) "
            f"by {(size - max_gb * GB) / MB:.1f} MB")
    if previous is not None:
        return OverBudget(f"{head}; see what grew since the last recorded build above",
                          growth_table(size_changes(previous, summary)))
    largest = [Growth(f"layer: {step}", None, b) for step, b in _by_step(summary).items()]
    largest += [Growth(f"package: {n}", None, b) for n, b in (summary.get("packages") or {}).items()]
    largest.sort(key=lambda r: (-(r.after or 0), r.what))
    return OverBudget(f"{head}; no earlier build of the stack is recorded: its largest parts are above",
                      growth_table(largest[:15]))


def recorded_size(record: Any, stack: str) -> Mapping[str, Any] | None:
    """The size summary of a build record of `stack`, if it holds one (older records do not)."""
    if not isinstance(record, Mapping) or record.get("stack") != stack:
        return None
    size = record.get("size")
    return size if isinstance(size, Mapping) and isinstance(size.get("bytes"), int) else None


# A CUDA library by its file name: cuBLAS, cuDNN, cuFFT, CUPTI, NVRTC, nvJitLink, NVPERF, NCCL, CuTe DSL ...
CUDA_LIBRARY = re.compile(r"^lib(?:cu|nv|nccl|cute)", re.IGNORECASE)


def site_relative(path: str) -> str:
    """A path as the stack's declarations name it: under site-packages when it is there."""
    return path.split("/site-packages/", 1)[1] if "/site-packages/" in path else path.lstrip("/")


def undeclared_copies(same_name: Sequence[SameName], declared: Sequence[str]) -> list[SameName]:
    """The CUDA libraries present in more than one build once the declared copies (globs on the path under
    site-packages) are set aside: each must exist once in the image."""
    out = []
    for group in same_name:
        if not CUDA_LIBRARY.match(group.name):
            continue
        left = tuple(p for p in group.paths if not any(fnmatch.fnmatchcase(site_relative(p[0]), g) for g in declared))
        if len(left) > 1:
            out.append(SameName(group.name, left))
    return out


def copies_message(stack: str, copies: Sequence[SameName], *, limit: int = 4) -> str:
    shown = "; ".join(f"{c.name} at {', '.join(site_relative(p) for p, _, _ in c.paths)}" for c in copies[:limit])
    more = f"; and {len(copies) - limit} more" if len(copies) > limit else ""
    return (f"stack '{stack}': {len(copies)} CUDA librar{'y is' if len(copies) == 1 else 'ies are'} in the image "
            f"in more than one build: {shown}{more} (declare an accepted copy under size.library_copies with its "
            f"reason)")


def pull_bytes(have: Sequence[str], layers: Sequence[Layer]) -> tuple[int, list[Layer]]:
    """The bytes a node that holds layers `have` (content digests) fetches for an image of `layers`, and which."""
    held = set(have)
    fetched = [layer for layer in layers if layer.diff_id is None or layer.diff_id not in held]
    return sum(layer.bytes for layer in fetched), fetched


# ---- output ----------------------------------------------------------------------------------------

def report_to_json(report: SizeReport, *, top: int = TOP_PACKAGES) -> dict[str, Any]:
    return {
        "image": report.image, "image_id": report.image_id, "bytes": report.bytes,
        "installed_bytes": report.installed_bytes, "files": report.files,
        "layers": [{"index": la.index, "step": la.step, "bytes": la.bytes, "diff_id": la.diff_id,
                    "created_by": la.created_by} for la in report.layers],
        "largest_packages": [{"name": n, "version": v, "bytes": b} for n, v, b in report.packages[:top]],
        "packages": len(report.packages),
        "duplicate_bytes": report.duplicate_bytes,
        "duplicates": [{"sha256": d.sha256, "bytes": d.bytes, "wasted": d.wasted,
                        "paths": [{"path": p, "distribution": o} for p, o in d.paths]} for d in report.duplicates],
        "same_name": [{"name": s.name, "paths": [{"path": p, "distribution": o, "bytes": b} for p, o, b in s.paths]}
                      for s in report.same_name],
        "seconds": report.seconds,
    }


def report_text(report: SizeReport, *, top: int = TOP_PACKAGES, duplicates: int = 15) -> str:
    """The report as plain text: layers (what each adds), largest packages, duplicates, one name twice."""
    lines = [f"image {report.image} ({report.image_id[:19]}): {report.bytes / GB:.2f} GB uncompressed, "
             f"{len(report.layers)} layers, {len(report.packages)} distributions installing "
             f"{report.installed_bytes / GB:.2f} GB, {report.files} files",
             "", "layers (bottom first)    MB  adds"]
    for layer in report.layers:
        lines.append(f"  {layer.index:>3}  {layer.bytes / MB:>12,.1f}  {layer.step}")
    lines += ["", f"{min(top, len(report.packages))} largest packages    MB"]
    for name, version, size in report.packages[:top]:
        lines.append(f"  {name + '==' + version:<44} {size / MB:>10,.1f}")
    lines += ["", f"files present more than once (same sha256): {len(report.duplicates)} contents, "
                  f"{report.duplicate_bytes / MB:,.1f} MB taken twice"]
    for dup in report.duplicates[:duplicates]:
        owners = sorted({o or "-" for _, o in dup.paths})
        lines.append(f"  {dup.wasted / MB:>8,.1f} MB  x{len(dup.paths)}  {dup.paths[0][0]}  ({', '.join(owners)})")
    lines += ["", f"shared libraries with one name at several paths, different content: {len(report.same_name)}"]
    for same in report.same_name[:duplicates]:
        where = "; ".join(f"{p} [{o or '-'}, {b / MB:,.1f} MB]" for p, o, b in same.paths)
        lines.append(f"  {same.name}: {where}")
    if report.seconds is not None:
        lines += ["", f"measured in {report.seconds:.1f} s"]
    return "\n".join(lines)
