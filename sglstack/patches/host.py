"""Patches on the host: load their specs, unpack a wheel's targets, check patches against a real SGLang wheel.

The engine is `sglstack.inimage.patchkit` (the same code the image build runs); this module picks the patches
and the version, fetches wheels, and patches or verifies a tree. The tasks (`invoke patches.*`, `upgrade`,
`bisect`) print what these return.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..adapters.wheels import fetch_wheel, open_wheel
from ..config.matrix import DEFAULT_PATCHES_DIR, load_matrix
from ..config.schema import Stack
from ..core.errors import ConfigError, PatchCommandError, PatchInputError, shown
from ..core.progress import progress
from ..core.versions import version_problem
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


def all_specs(patches_dir: Path = DEFAULT_PATCHES_DIR) -> list[patchkit.PatchSpec]:
    """Every patch in `patches_dir`, by id."""
    return load_specs(patchkit.patch_ids(patches_dir), patches_dir)


def stack_patch_problem(root: Path, stack: Stack, version: str | None,
                        patches_dir: Path = DEFAULT_PATCHES_DIR) -> str | None:
    """The stack's patches applied to the SGLang tree under ROOT with its policy, as the build would; why they
    do not apply (`KIND: reason`, the engine's words), or None."""
    try:
        patchkit.apply_patches(root, patches_dir, stack.patches, version, stack.patch_policy.on_upstream)
    except patchkit.PatchError as exc:
        return f"{exc.kind}: {exc}"
    return None


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


# ---- `invoke patches.check`: a release, or a stack's patches with its policy ----------------------------

@dataclass(frozen=True)
class Checked:
    title: str  # what was checked, in words
    rows: list[CheckRow]


def check_patches(*, sglang: str | None = None, stack: str | None = None, stacks_file: str | Path,
                  patches_dir: Path = DEFAULT_PATCHES_DIR) -> Checked:
    """`sglang`: every patch against that release's wheel; `stack`: the stack's patches and policy."""
    if stack is not None and sglang is None:
        chosen = load_matrix(stacks_file, patches_dir=patches_dir).get(stack)
        with progress(f"patches.check: sglang {chosen.sglang.label}"):
            rows = check_stack_patches(chosen, patches_dir)
        return Checked(f"stack '{stack}': sglang {chosen.sglang.label}", rows)
    if sglang is not None and stack is None:
        problem = version_problem(sglang)
        if problem:
            raise PatchInputError(f"patches.check --sglang {shown(sglang)}: {problem}")
        with progress(f"patches.check: sglang {sglang}"):
            rows = check_version(sglang, patchkit.patch_ids(patches_dir), patches_dir=patches_dir)
        return Checked(f"sglang {sglang}: every patch in {patches_dir.name}/", rows)
    raise PatchCommandError("patches.check: give exactly one of --sglang VERSION or --stack NAME")


# ---- a tree patched or verified (`invoke patches.apply / patches.verify`) ----------------------------

def select_patches(stack: str | None, patch: str | None, stacks_file: str | Path, patches_dir: Path,
                   sglang_version: str | None) -> tuple[list[str], str | None, str]:
    """The patch ids (one `patch`, or `stack`'s), the SGLang version they are for, and the policy on a patch
    already upstream ("notice" for a single patch)."""
    if patch is not None and stack is None:
        load_specs([patch], patches_dir)
        return [patch], sglang_version, "notice"
    if stack is None or patch is not None:
        raise PatchCommandError("give exactly one of --stack NAME or --patch ID")
    chosen = load_matrix(stacks_file, patches_dir=patches_dir).get(stack)
    if not chosen.patches:
        raise PatchInputError(f"stack '{stack}' has no patches")
    if sglang_version and chosen.sglang.version and sglang_version != chosen.sglang.version:
        raise PatchInputError(f"stack '{stack}' pins sglang {chosen.sglang.version}, not {sglang_version}")
    return list(chosen.patches), sglang_version or chosen.sglang.version, chosen.patch_policy.on_upstream


def sglang_tree(root: str | Path) -> Path:
    """ROOT, the folder that holds an installed `sglang/` package."""
    root = Path(root)
    if not (root / "sglang").is_dir():
        raise PatchInputError(f"{root} holds no sglang/ package (pass the folder that contains it)")
    return root


@dataclass(frozen=True)
class Applied:
    version: str | None  # None: no dist-info and no --sglang, so ranges and per-version hashes were not checked
    results: list[patchkit.PatchResult]


def apply_to_tree(root: str | Path, *, stack: str | None = None, patch: str | None = None,
                  stacks_file: str | Path, patches_dir: Path = DEFAULT_PATCHES_DIR,
                  sglang_version: str | None = None, manifest: str | Path | None = None) -> Applied:
    """A stack's patches, or one patch, applied (then verified) under ROOT."""
    problem = version_problem(sglang_version) if sglang_version is not None else None
    if problem:
        raise PatchInputError(f"patches.apply --sglang {shown(sglang_version or '')}: {problem}")
    tree = sglang_tree(root)
    ids, version, policy = select_patches(stack, patch, stacks_file, patches_dir, sglang_version)
    try:
        version = patchkit.resolve_version(tree, version)
        return Applied(version, patchkit.apply_patches(tree, patches_dir, ids, version, policy, manifest or None))
    except patchkit.PatchError as exc:
        error = command_error(exc)  # patchkit's own command line (in images) spells patches.apply's --sglang so
        raise type(error)(str(error).replace("--sglang-version ", "--sglang ")) from None


def verify_tree(root: str | Path, *, stack: str | None = None, patch: str | None = None,
                stacks_file: str | Path, patches_dir: Path = DEFAULT_PATCHES_DIR,
                manifest: str | Path | None = None) -> list[patchkit.PatchResult]:
    """Whether a stack's patches, or one patch, are in place under ROOT; changes nothing."""
    tree = sglang_tree(root)
    ids, _, _ = select_patches(stack, patch, stacks_file, patches_dir, None)
    try:
        recorded = patchkit.read_manifest(manifest) if manifest else None
        return patchkit.verify_patches(tree, patches_dir, ids, recorded)
    except patchkit.PatchError as exc:
        raise command_error(exc) from None
