"""Host-side patch commands: list, check against a real SGLang wheel, apply to a tree, verify a tree.

The engine is `sglstack.inimage.patchkit` (the same code the image build runs); these pick the patches and
the version from the matrix, print tables and turn engine failures into the one-line
`sglstack.core.errors.PatchCommandError`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from ..config.matrix import DEFAULT_PATCHES_DIR, DEFAULT_STACKS_FILE, load_matrix
from ..core.console import console as make_console
from ..core.console import plain, report_table
from ..core.errors import PatchCommandError, PatchInputError, shown
from ..core.jsonreport import NO_JSON, JsonReport
from ..core.progress import progress
from ..core.versions import version_problem
from ..imagebuild.patches import OUTCOMES, CheckRow, check_stack_patches, check_version, command_error, load_specs
from ..inimage import patchkit

# ---- commands (the tasks of sglstack.cli.patches) ----------------------------------------------------


def list_command(
    stacks_file: str | Path = DEFAULT_STACKS_FILE, patches_dir: Path = DEFAULT_PATCHES_DIR, console=None,
    as_json: JsonReport = NO_JSON,
) -> int:
    """Print every patch, its version range, its target and the stacks that use it."""
    matrix = load_matrix(stacks_file, patches_dir=patches_dir)
    specs = load_specs(patchkit.patch_ids(patches_dir), patches_dir)
    table = report_table(("patch", "applies to", "fixed in", "target", "methods", "stacks"),
                         title=f"patches ({patches_dir.name}/)")
    listed = []
    for spec in specs:
        users = [name for name, stack in matrix.stacks.items() if spec.id in stack.patches]
        listed.append({"patch": spec.id, "applies_to": str(spec.applies_to),
                       "fixed_in": str(spec.fixed_in) if spec.fixed_in else None, "file": spec.file,
                       "class": spec.class_name, "methods": list(spec.method_names), "stacks": users})
        table.add_row(
            plain(spec.id),
            plain(spec.applies_to),
            plain(spec.fixed_in or "-"),
            f"{plain(spec.file)}\n{plain(spec.class_name)}",
            "\n".join(map(plain, spec.method_names)),
            ", ".join(users) or "-",
        )
    _console(console).print(table)
    as_json.emit({"patches": listed})
    return 0


def check_command(
    sglang: str | None = None,
    stack: str | None = None,
    stacks_file: str | Path = DEFAULT_STACKS_FILE,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    console=None,
    as_json: JsonReport = NO_JSON,
) -> int:
    """`--sglang V`: every patch against that release; `--stack NAME`: the stack's patches and policy."""
    if stack is not None and sglang is None:
        chosen = load_matrix(stacks_file, patches_dir=patches_dir).get(stack)
        with progress(f"patches.check: sglang {chosen.sglang.label}"):
            rows = check_stack_patches(chosen, patches_dir)
        title = f"stack '{stack}': sglang {chosen.sglang.label}"
    elif sglang is not None and stack is None:
        problem = version_problem(sglang)
        if problem:
            raise PatchInputError(f"patches.check --sglang {shown(sglang)}: {problem}")
        with progress(f"patches.check: sglang {sglang}"):
            rows = check_version(sglang, patchkit.patch_ids(patches_dir), patches_dir=patches_dir)
        title = f"sglang {plain(sglang)}: every patch in {plain(patches_dir.name)}/"
    else:
        raise PatchCommandError("patches.check: give exactly one of --sglang VERSION or --stack NAME")
    out = _console(console)
    failed = [r for r in rows if not r.ok]
    as_json.emit({"sglang": sglang, "stack": stack, "patches": [asdict(r) for r in rows], "failed": len(failed)})
    if not rows:
        out.print(f"{title}: no patches to check")
        return 0
    out.print(_rows_table(title, rows))
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
    problem = version_problem(sglang_version) if sglang_version is not None else None
    if problem:
        raise PatchInputError(f"patches.apply --sglang {shown(sglang_version or '')}: {problem}")
    root = _tree(root)
    ids, version, policy = _selection(stack, patch, stacks_file, patches_dir, sglang_version)
    try:
        version = patchkit.resolve_version(root, version)
        if version is None:
            _console(console).print(
                f"[yellow]notice:[/yellow] no sglang-*.dist-info under {plain(root)} and no "
                "--sglang: the version range and per-version hashes are not checked"
            )
        results = patchkit.apply_patches(root, patches_dir, ids, version, policy, manifest or None)
    except patchkit.PatchError as exc:
        error = command_error(exc)  # patchkit's own command line (in images) spells patches.apply's --sglang so
        raise type(error)(str(error).replace("--sglang-version ", "--sglang ")) from None
    _print_results(_console(console), f"applied to {plain(root)}", results)
    return 0


def verify_command(
    root: str | Path,
    stack: str | None = None,
    patch: str | None = None,
    stacks_file: str | Path = DEFAULT_STACKS_FILE,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    manifest: str | Path | None = None,
    console=None,
    as_json: JsonReport = NO_JSON,
) -> int:
    """Verify that a stack's patches, or one patch, are in place under ROOT; change nothing."""
    root = _tree(root)
    ids, _, _ = _selection(stack, patch, stacks_file, patches_dir, None)
    try:
        recorded = patchkit.read_manifest(manifest) if manifest else None
        results = patchkit.verify_patches(root, patches_dir, ids, recorded)
    except patchkit.PatchError as exc:
        raise command_error(exc) from None
    as_json.emit({"root": str(root), "patches": [asdict(r) for r in results]})
    if not as_json.stdout:
        _print_results(_console(console), f"verified under {plain(root)}", results)
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
        raise PatchInputError(f"stack '{stack}' has no patches")
    if sglang_version and chosen.sglang.version and sglang_version != chosen.sglang.version:
        raise PatchInputError(f"stack '{stack}' pins sglang {chosen.sglang.version}, not {sglang_version}")
    return list(chosen.patches), sglang_version or chosen.sglang.version, chosen.patch_policy.on_upstream


def _tree(root: str | Path) -> Path:
    root = Path(root)
    if not (root / "sglang").is_dir():
        raise PatchInputError(f"{root} holds no sglang/ package (pass the folder that contains it)")
    return root


def _rows_table(title: str, rows: list[CheckRow]) -> Table:
    table = report_table(("patch", "sglang", "target", "result", "detail"), title=title)
    for r in rows:
        style = "green" if r.ok and r.outcome == "applied" else "yellow" if r.ok else "red"
        table.add_row(plain(r.patch), plain(r.sglang), f"{plain(r.file)}\n{plain(r.class_name)}",
                      f"[{style}]{plain(r.outcome)}[/{style}]", plain(r.detail))
    return table


def _print_results(out, title: str, results: list[patchkit.PatchResult]) -> None:
    table = report_table(("patch", "target", "status", "sha256 after"), title=title)
    for r in results:
        table.add_row(plain(r.id), f"{plain(r.file)}\n{plain(r.class_name)}", plain(OUTCOMES.get(r.status, r.status)),
                      plain(r.sha256_after[:16]))
    out.print(table)
    for r in results:
        if r.notice:
            out.print(f"[yellow]notice:[/yellow] {plain(r.notice)}")


def _console(console):
    if console is not None:
        return console
    return make_console()
