"""Patches on the host: load their specs, unpack a wheel's targets, check patches against a real SGLang wheel.

The engine is `sglstack.inimage.patchkit` (the same code the image build runs); this module picks the patches
and the version, and fetches wheels. The tasks (`invoke patches.*`) are `sglstack.cli.patch_commands`.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..adapters.wheels import fetch_wheel, open_wheel
from ..config.matrix import DEFAULT_PATCHES_DIR
from ..config.schema import Stack
from ..core.errors import ConfigError, PatchCommandError, PatchInputError
from ..inimage import patchkit

# What `check` shows for each way a patch can come out.
OUTCOMES = {
    patchkit.APPLIED: "applied",
    patchkit.ALREADY_APPLIED: "already applied",
    patchkit.ALREADY_UPSTREAM: "already upstream",
}


@dataclass(frozen=True)
class CheckRow:
    patch: str
    sglang: str
    file: str
    class_name: str
    outcome: str  # applied / already upstream / conflict / drift / out of range / ...
    ok: bool
    detail: str


# ---- pure-ish pieces -------------------------------------------------------------------------------


def command_error(exc: patchkit.PatchError) -> PatchCommandError:
    """The host's one-line error for the engine's: the command itself wrong (an unknown patch id, a version
    that is none) is bad input, exit 2; anything else a patch that failed, exit 1."""
    return (PatchInputError if isinstance(exc, patchkit.PatchUsageError) else PatchCommandError)(str(exc))


def load_specs(ids: list[str] | tuple[str, ...], patches_dir: Path = DEFAULT_PATCHES_DIR) -> list[patchkit.PatchSpec]:
    try:
        return [patchkit.load_patch(patches_dir, pid) for pid in ids]
    except patchkit.PatchError as exc:
        raise command_error(exc) from None


def unpack_for_patches(wheel: Path, specs: list[patchkit.PatchSpec], dest: Path) -> Path:
    """Extract only the patched files and the dist-info METADATA/RECORD (the pre-image hashes)."""
    wanted = {s.file for s in specs}
    with open_wheel(wheel) as zf:
        try:
            for name in zf.namelist():
                top, _, rest = name.partition("/")
                if name in wanted or (top.endswith(".dist-info") and rest in ("METADATA", "RECORD")):
                    zf.extract(name, dest)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise PatchCommandError(f"{wheel.name}: cannot extract the patched files: {exc}") from None
    (dest / "sglang").mkdir(exist_ok=True)
    return dest


def check_version(
    version: str, ids: list[str] | tuple[str, ...], *, policy: str = "notice", patches_dir: Path = DEFAULT_PATCHES_DIR
) -> list[CheckRow]:
    """Apply each patch, on its own, to a temporary copy of SGLang `version`'s wheel; one row each."""
    specs = load_specs(ids, patches_dir)
    if not specs:
        return []
    wheel = fetch_wheel("sglang", version)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sglstack-patches-") as tmp:
        root = unpack_for_patches(wheel, specs, Path(tmp))
        for spec in specs:
            try:
                (result,) = patchkit.apply_patches(root, patches_dir, [spec.id], version, policy)
            except patchkit.PatchError as exc:
                reason = exc.reason.replace(f"under {root}", f"in {wheel.name}")
                rows.append(CheckRow(spec.id, version, spec.file, spec.class_name, exc.kind, False, reason))
                continue
            detail = {
                patchkit.APPLIED: f"inserted {', '.join(result.inserted)}",
                patchkit.ALREADY_APPLIED: "the methods are already in the class",
                patchkit.ALREADY_UPSTREAM: f"upstream has {', '.join(result.upstream_methods)}: retire the patch"
                + (f" (fixed in {spec.fixed_in})" if spec.fixed_in else ""),
            }[result.status]
            if result.status == patchkit.APPLIED and result.upstream_methods:
                detail += f"; upstream already has {', '.join(result.upstream_methods)}"
            rows.append(CheckRow(spec.id, version, spec.file, spec.class_name, OUTCOMES[result.status], True, detail))
    return rows


def check_stack_patches(stack: Stack, patches_dir: Path = DEFAULT_PATCHES_DIR) -> list[CheckRow]:
    """The stack's patches against its pinned SGLang release (`check_version` with the stack's policy)."""
    if not stack.patches:
        return []
    if stack.sglang.version is None:
        raise ConfigError(
            "builds SGLang from git: check a release with --sglang VERSION", stack=stack.name, key="sglang"
        )
    return check_version(
        stack.sglang.version, stack.patches, policy=stack.patch_policy.on_upstream, patches_dir=patches_dir
    )
