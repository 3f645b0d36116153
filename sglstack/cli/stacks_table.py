"""`invoke stacks [--check [--resolve]]`: the matrix as a table; with --check, every stack's pin conflicts,
lock findings and (--resolve) the resolver's verdict, one line each, and the exit code.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from ..config.matrix import load_matrix
from ..core.console import console as make_console
from ..core.console import plain
from ..lock.conflicts import check_matrix, lock_findings, resolve_findings, sglang_requires_dist, trusted_locks
from ..lock.file import Lock
from ..lock.flow import resolve_for_base


def stacks_command(stacks_file: str, *, check: bool, resolve: bool = False,
                   requires_dist: Callable[[str], list[str]] = sglang_requires_dist,
                   resolver: Callable[..., Lock] = resolve_for_base) -> int:
    matrix = load_matrix(stacks_file)
    console = make_console()
    table = Table(title=f"stacks in {plain(matrix.file)}")
    for col in ("stack", "base image", "CUDA", "python", "torch", "kernel package", "flashinfer", "sglang",
                "patches", "overrides"):
        table.add_column(col)
    for s in matrix.stacks.values():
        cells = (s.name, s.base_image, s.cuda or "-", s.python, s.torch.version if s.torch else "-",
                 f"{s.sgl_kernel.package} {s.sgl_kernel.version}" if s.sgl_kernel else "-",
                 s.flashinfer.version if s.flashinfer else "-", s.sglang.label,
                 ", ".join(s.patches) or "-", str(len(s.overrides)))
        table.add_row(*map(plain, cells))
    console.print(table)
    if not check:
        return 0
    findings = (check_matrix(matrix, requires_dist) + lock_findings(matrix, stacks_file)
                + (resolve_findings(matrix, resolver, trusted_locks(matrix, stacks_file)) if resolve else []))
    for f in findings:
        style = {"conflict": "red", "stale-override": "red", "stale-lock": "red", "bad-lock": "red",
                 "override": "yellow", "no-lock": "yellow", "resolved": "green", "skipped": "dim",
                 "incomplete": "yellow"}[f.kind]
        console.print(f"[{style}]{f.kind:>14}[/] {plain(matrix.file)}: stack '{plain(f.stack)}': {plain(f.message)}")
    failures = [f for f in findings if f.is_failure]
    # What could not be checked is not "OK": a partial check is exit 1 and says so.
    incomplete = sorted({f.stack for f in findings if f.is_incomplete})
    verdict = (f"; not checked whole: the resolver could not reach everything of {', '.join(incomplete)} "
               "(incomplete above)" if incomplete else "" if failures else ": matrix OK")
    console.print(f"{len(matrix.stacks)} stacks, {len(failures)} problem(s){verdict}", highlight=False)
    return 1 if failures or incomplete else 0
