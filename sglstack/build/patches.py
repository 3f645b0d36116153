"""Host-side patch commands: list, check against a real SGLang wheel, apply to a tree, verify a tree.

The engine is `sglstack.inimage.patchkit` (the same code the image build runs); this module picks the patches
and the version from the matrix, fetches wheels, prints tables and turns engine failures into the
one-line `sglstack.core.errors.PatchCommandError`.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from ..adapters.wheels import fetch_wheel, open_wheel
from ..config.matrix import DEFAULT_PATCHES_DIR, DEFAULT_STACKS_FILE, load_matrix
from ..config.schema import Stack
from ..core.console import console as make_console
from ..core.errors import ConfigError, PatchCommandError
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


def load_specs(ids: list[str] | tuple[str, ...], patches_dir: Path = DEFAULT_PATCHES_DIR) -> list[patchkit.PatchSpec]:
    try:
        return [patchkit.load_patch(patches_dir, pid) for pid in ids]
    except patchkit.PatchError as exc:
        raise PatchCommandError(str(exc)) from None


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


# ---- commands (called by tasks.py) -----------------------------------------------------------------


def list_command(
    stacks_file: str | Path = DEFAULT_STACKS_FILE, patches_dir: Path = DEFAULT_PATCHES_DIR, console=None
) -> int:
    """Print every patch, its version range, its target and the stacks that use it."""
    matrix = load_matrix(stacks_file, patches_dir=patches_dir)
    specs = load_specs(patchkit.patch_ids(patches_dir), patches_dir)
    table = Table(title=f"patches ({patches_dir.name}/)")
    for col in ("patch", "applies to", "fixed in", "target", "methods", "stacks"):
        table.add_column(col)
    for spec in specs:
        users = [name for name, stack in matrix.stacks.items() if spec.id in stack.patches]
        table.add_row(
            spec.id,
            str(spec.applies_to),
            spec.fixed_in or "-",
            f"{spec.file}\n{spec.class_name}",
            "\n".join(spec.method_names),
            ", ".join(users) or "-",
        )
    _console(console).print(table)
    return 0


def check_command(
    sglang: str | None = None,
    stack: str | None = None,
    stacks_file: str | Path = DEFAULT_STACKS_FILE,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    console=None,
) -> int:
    """`--sglang V`: every patch against that release; `--stack NAME`: the stack's patches and policy."""
    if stack is not None and sglang is None:
        chosen = load_matrix(stacks_file, patches_dir=patches_dir).get(stack)
        rows = check_stack_patches(chosen, patches_dir)
        title = f"stack '{stack}': sglang {chosen.sglang.label}"
    elif sglang is not None and stack is None:
        try:
            patchkit.Version.parse(sglang)
        except patchkit.InvalidVersion as exc:
            raise PatchCommandError(f"patches.check --sglang: {exc}") from None
        rows = check_version(sglang, patchkit.patch_ids(patches_dir), patches_dir=patches_dir)
        title = f"sglang {sglang}: every patch in {patches_dir.name}/"
    else:
        raise PatchCommandError("patches.check: give exactly one of --sglang VERSION or --stack NAME")
    out = _console(console)
    if not rows:
        out.print(f"{title}: no patches to check")
        return 0
    out.print(_rows_table(title, rows))
    failed = [r for r in rows if not r.ok]
    if failed:
        out.print(f"[red]{len(failed)} of {len(rows)} patch(es) would fail[/red]")
    return 1 if failed else 0


def apply_command(
    root: str | Path,
    stack: str | None = None,
    patch: str | None = None,
    stacks_file: str | Path = DEFAULT_STACKS_FILE,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    sglang_version: str | None = None,
    manifest: str | Path | None = None,
    console=None,
) -> int:
    """Apply (then verify) a stack's patches, or one patch, to ROOT, the folder holding `sglang/`."""
    root = _tree(root)
    ids, version, policy = _selection(stack, patch, stacks_file, patches_dir, sglang_version)
    try:
        version = patchkit.resolve_version(root, version)
        if version is None:
            _console(console).print(
                f"[yellow]notice:[/yellow] no sglang-*.dist-info under {root} and no "
                "--sglang-version: the version range and per-version hashes are not checked"
            )
        results = patchkit.apply_patches(root, patches_dir, ids, version, policy, manifest or None)
    except patchkit.PatchError as exc:
        raise PatchCommandError(str(exc)) from None
    _print_results(_console(console), f"applied to {root}", results)
    return 0


def verify_command(
    root: str | Path,
    stack: str | None = None,
    patch: str | None = None,
    stacks_file: str | Path = DEFAULT_STACKS_FILE,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    manifest: str | Path | None = None,
    console=None,
) -> int:
    """Verify that a stack's patches, or one patch, are in place under ROOT; change nothing."""
    root = _tree(root)
    ids, _, _ = _selection(stack, patch, stacks_file, patches_dir, None)
    try:
        recorded = patchkit.read_manifest(manifest) if manifest else None
        results = patchkit.verify_patches(root, patches_dir, ids, recorded)
    except patchkit.PatchError as exc:
        raise PatchCommandError(str(exc)) from None
    _print_results(_console(console), f"verified under {root}", results)
    return 0


# ---- helpers ---------------------------------------------------------------------------------------


def _selection(
    stack: str | None, patch: str | None, stacks_file, patches_dir: Path, sglang_version: str | None
) -> tuple[list[str], str | None, str]:
    if patch is not None and stack is None:
        load_specs([patch], patches_dir)
        return [patch], sglang_version, "notice"
    if stack is None or patch is not None:
        raise PatchCommandError("give exactly one of --stack NAME or --patch ID")
    chosen = load_matrix(stacks_file, patches_dir=patches_dir).get(stack)
    if not chosen.patches:
        raise PatchCommandError(f"stack '{stack}' has no patches")
    if sglang_version and chosen.sglang.version and sglang_version != chosen.sglang.version:
        raise PatchCommandError(f"stack '{stack}' pins sglang {chosen.sglang.version}, not {sglang_version}")
    return list(chosen.patches), sglang_version or chosen.sglang.version, chosen.patch_policy.on_upstream


def _tree(root: str | Path) -> Path:
    root = Path(root)
    if not (root / "sglang").is_dir():
        raise PatchCommandError(f"{root} holds no sglang/ package (pass the folder that contains it)")
    return root


def _rows_table(title: str, rows: list[CheckRow]) -> Table:
    table = Table(title=title)
    for col in ("patch", "sglang", "target", "result", "detail"):
        table.add_column(col)
    for r in rows:
        style = "green" if r.ok and r.outcome == "applied" else "yellow" if r.ok else "red"
        table.add_row(r.patch, r.sglang, f"{r.file}\n{r.class_name}", f"[{style}]{r.outcome}[/{style}]", r.detail)
    return table


def _print_results(out, title: str, results: list[patchkit.PatchResult]) -> None:
    table = Table(title=title)
    for col in ("patch", "target", "status", "sha256 after"):
        table.add_column(col)
    for r in results:
        table.add_row(r.id, f"{r.file}\n{r.class_name}", OUTCOMES.get(r.status, r.status), r.sha256_after[:16])
    out.print(table)
    for r in results:
        if r.notice:
            out.print(f"[yellow]notice:[/yellow] {r.notice}")


def _console(console):
    if console is not None:
        return console
    return make_console()
