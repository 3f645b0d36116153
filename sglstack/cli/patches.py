"""The patches: `invoke patches.list`, `patches.check`, `patches.apply`, `patches.verify` (their options, and
the tables each prints of what `sglstack.patches.host` returns)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.defaults import default_stacks_file
from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, TaskOptions, option, required, stacks_file_option
from ..core.resources import DEFAULT_PATCHES_DIR
from .cmdoptions import only_stack_option
from .options import command

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..core.jsonreport import JsonReport
    from ..inimage.patchkit import PatchResult
    from ..patches.host import CheckRow


@dataclass(frozen=True)
class ListOptions(ReportOptions):
    stacks_file: str = stacks_file_option("the matrix file (to show which stacks use each patch)")


@command(ListOptions, name="list")
def patches_list(o: ListOptions, as_json: JsonReport) -> int:
    """List the patches, their SGLang version ranges, targets, and the stacks that use them."""
    return list_command(o.stacks_file, as_json=as_json)


@dataclass(frozen=True)
class CheckOptions(ReportOptions):
    exactly_one = (("sglang", "stack"),)
    sglang: str | None = option("an SGLang release: check every patch against its wheel")
    stack: str | None = only_stack_option("check this stack's patches against its SGLang, with its policy")
    stacks_file: str = stacks_file_option()


@command(CheckOptions, name="check")
def patches_check(o: CheckOptions, as_json: JsonReport) -> int:
    """Apply patches to a temporary copy of an SGLang wheel (pip download, cached); no Docker needed."""
    return check_command(sglang=o.sglang, stack=o.stack, stacks_file=o.stacks_file, as_json=as_json)


@dataclass(frozen=True)
class ApplyOptions(TaskOptions):
    exactly_one = (("stack", "patch"),)
    root: str = required("folder holding the sglang/ package (unpacked wheel or site-packages)")
    stack: str | None = only_stack_option("apply this stack's patches")
    patch: str | None = option("apply this one patch")
    stacks_file: str = stacks_file_option()
    sglang: str | None = option("the SGLang release under ROOT (default: from ROOT's sglang-*.dist-info, or the "
                                "stack's)")
    manifest: str | None = option("write what was applied to this JSON file")


@command(ApplyOptions, name="apply")
def patches_apply(o: ApplyOptions) -> int:
    """Insert patch methods into their classes under ROOT, then verify them."""
    return apply_command(o.root, stack=o.stack, patch=o.patch, stacks_file=o.stacks_file,
                         sglang_version=o.sglang, manifest=o.manifest)


@dataclass(frozen=True)
class VerifyOptions(ReportOptions):
    exactly_one = (("stack", "patch"),)
    root: str = required("folder holding the sglang/ package")
    stack: str | None = only_stack_option("this stack's patches")
    patch: str | None = option("this one patch")
    stacks_file: str = stacks_file_option()
    manifest: str | None = option("also check the sha256 recorded by apply")


@command(VerifyOptions, name="verify")
def patches_verify(o: VerifyOptions, as_json: JsonReport) -> int:
    """Verify that patches are in place under ROOT (class members, compiles, EntryClass); change nothing."""
    return verify_command(o.root, stack=o.stack, patch=o.patch, stacks_file=o.stacks_file, manifest=o.manifest,
                          as_json=as_json)


# ---- what each task prints ------------------------------------------------------------------------------

def _patches_dir(patches_dir: Path | None) -> Path:
    return patches_dir or DEFAULT_PATCHES_DIR


def list_command(stacks_file: str | Path | None = None, patches_dir: Path | None = None,
                 console: Console | None = None, as_json: JsonReport = NO_JSON) -> int:
    """Print every patch, its version range, its target and the stacks that use it."""
    # at call time: the matrix and rich would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.console import plain, report_table
    from ..patches.host import all_specs

    patches_dir = _patches_dir(patches_dir)
    matrix = load_matrix(stacks_file or default_stacks_file(), patches_dir=patches_dir)
    specs = all_specs(patches_dir)
    table = report_table(("patch", "applies to", "fixed in", "target", "methods", "stacks"),
                         title=f"patches ({patches_dir.name}/)")
    listed = []
    for spec in specs:
        users = [name for name, stack in matrix.stacks.items() if spec.id in stack.patches]
        listed.append({"patch": spec.id, "applies_to": str(spec.applies_to),
                       "fixed_in": str(spec.fixed_in) if spec.fixed_in else None, "file": spec.file,
                       "class": spec.class_name, "methods": list(spec.method_names), "stacks": users})
        table.add_row(plain(spec.id), plain(spec.applies_to), plain(spec.fixed_in or "-"),
                      f"{plain(spec.file)}\n{plain(spec.class_name)}", "\n".join(map(plain, spec.method_names)),
                      ", ".join(users) or "-")
    (console or make_console()).print(table)
    as_json.emit({"patches": listed})
    return 0


def check_command(sglang: str | None = None, stack: str | None = None, stacks_file: str | Path | None = None,
                  patches_dir: Path | None = None, console: Console | None = None,
                  as_json: JsonReport = NO_JSON) -> int:
    """`--sglang V`: every patch against that release; `--stack NAME`: the stack's patches and policy."""
    # at call time: the matrix, rich and the wheel tools would slow `invoke --list`
    from ..core.console import console as make_console
    from ..core.console import plain
    from ..patches.host import check_patches

    checked = check_patches(sglang=sglang, stack=stack, stacks_file=stacks_file or default_stacks_file(),
                            patches_dir=_patches_dir(patches_dir))
    rows, out = checked.rows, console or make_console()
    failed = [r for r in rows if not r.ok]
    as_json.emit({"sglang": sglang, "stack": stack, "patches": [asdict(r) for r in rows], "failed": len(failed)})
    if not rows:
        out.print(f"{plain(checked.title)}: no patches to check")
        return 0
    out.print(_rows_table(plain(checked.title), rows))
    if failed:
        out.print(f"[red]{len(failed)} of {len(rows)} patch(es) would fail[/red]")
    return 1 if failed else 0


def apply_command(root: str | Path, stack: str | None = None, patch: str | None = None,
                  stacks_file: str | Path | None = None, patches_dir: Path | None = None,
                  sglang_version: str | None = None, manifest: str | Path | None = None,
                  console: Console | None = None) -> int:
    """Apply (then verify) a stack's patches, or one patch, to ROOT, the folder holding `sglang/`."""
    # at call time: the matrix and rich would slow `invoke --list`
    from ..core.console import console as make_console
    from ..core.console import plain
    from ..patches.host import apply_to_tree

    applied = apply_to_tree(root, stack=stack, patch=patch, stacks_file=stacks_file or default_stacks_file(),
                            patches_dir=_patches_dir(patches_dir), sglang_version=sglang_version, manifest=manifest)
    out = console or make_console()
    if applied.version is None:
        out.print(f"[yellow]notice:[/yellow] no sglang-*.dist-info under {plain(root)} and no --sglang: the version "
                  "range and per-version hashes are not checked")
    _print_results(out, f"applied to {plain(root)}", applied.results)
    return 0


def verify_command(root: str | Path, stack: str | None = None, patch: str | None = None,
                   stacks_file: str | Path | None = None, patches_dir: Path | None = None,
                   manifest: str | Path | None = None, console: Console | None = None,
                   as_json: JsonReport = NO_JSON) -> int:
    """Verify that a stack's patches, or one patch, are in place under ROOT; change nothing."""
    # at call time: the matrix and rich would slow `invoke --list`
    from ..core.console import console as make_console
    from ..core.console import plain
    from ..patches.host import verify_tree

    results = verify_tree(root, stack=stack, patch=patch, stacks_file=stacks_file or default_stacks_file(),
                          patches_dir=_patches_dir(patches_dir), manifest=manifest)
    as_json.emit({"root": str(Path(root)), "patches": [asdict(r) for r in results]})
    if not as_json.stdout:
        _print_results(console or make_console(), f"verified under {plain(root)}", results)
    return 0


def _rows_table(title: str, rows: list[CheckRow]) -> Table:
    from ..core.console import plain, report_table  # at call time: rich

    table = report_table(("patch", "sglang", "target", "result", "detail"), title=title)
    for r in rows:
        style = "green" if r.ok and r.outcome == "applied" else "yellow" if r.ok else "red"
        table.add_row(plain(r.patch), plain(r.sglang), f"{plain(r.file)}\n{plain(r.class_name)}",
                      f"[{style}]{plain(r.outcome)}[/{style}]", plain(r.detail))
    return table


def _print_results(out: Any, title: str, results: list[PatchResult]) -> None:
    # at call time: rich
    from ..core.console import plain, report_table
    from ..patches.host import OUTCOMES

    table = report_table(("patch", "target", "status", "sha256 after"), title=title)
    for r in results:
        table.add_row(plain(r.id), f"{plain(r.file)}\n{plain(r.class_name)}", plain(OUTCOMES.get(r.status, r.status)),
                      plain(r.sha256_after[:16]))
    out.print(table)
    for r in results:
        if r.notice:
            out.print(f"[yellow]notice:[/yellow] {plain(r.notice)}")
