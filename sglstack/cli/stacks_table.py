"""`invoke stacks [--check [--resolve]]`: the matrix as a table; with --check, every stack's pin conflicts,
lock findings and (--resolve) the resolver's verdict, one line each, and the exit code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.matrix import load_matrix
from ..core.console import console as make_console
from ..core.console import fitted_table, plain
from ..core.jsonreport import NO_JSON, JsonReport
from ..lock.conflicts import check_matrix, lock_findings, resolve_findings, sglang_requires_dist, trusted_locks
from ..lock.flow import resolve_for_base
from ..lockfile.model import Lock
from ..serving import DraftMismatch, draft_check, serving_spec

COLUMNS = ("stack", "base image", "CUDA", "python", "torch", "kernel package", "flashinfer", "sglang", "patches",
           "overrides")
NARROW = ("stack", "base image", "CUDA", "torch", "sglang", "patches")  # at a narrow terminal, without -o wide


def stacks_command(stacks_file: str, *, check: bool, resolve: bool = False,
                   requires_dist: Callable[[str], list[str]] = sglang_requires_dist,
                   resolver: Callable[..., Lock] = resolve_for_base, as_json: JsonReport = NO_JSON,
                   wide: bool = False) -> int:
    matrix = load_matrix(stacks_file)
    console = make_console()
    cells_of, rows = [], []
    for s in matrix.stacks.values():
        cells = (s.name, s.base_image, s.cuda or "-", s.python, s.torch.version if s.torch else "-",
                 f"{s.sgl_kernel.package} {s.sgl_kernel.version}" if s.sgl_kernel else "-",
                 s.flashinfer.version if s.flashinfer else "-", s.sglang.label,
                 ", ".join(s.patches) or "-", str(len(s.overrides)))
        cells_of.append(tuple(map(plain, cells)))
        rows.append({"stack": s.name, "base_image": s.base_image, "cuda": s.cuda, "python": s.python,
                     "torch": s.torch.version if s.torch else None,
                     "kernel_package": {"name": s.sgl_kernel.package, "version": s.sgl_kernel.version}
                     if s.sgl_kernel else None, "flashinfer": s.flashinfer.version if s.flashinfer else None,
                     "sglang": s.sglang.label, "patches": list(s.patches), "overrides": len(s.overrides)})
    console.print(fitted_table(console, COLUMNS, cells_of, narrow=NARROW, wide=wide,
                               title=f"stacks in {plain(matrix.file)}"))
    document: dict[str, Any] = {"file": str(matrix.file), "stacks": rows}
    if not check:
        as_json.emit(document)
        return 0
    # Where a stack's model and draft are on this machine (a mounted folder, the Hugging Face cache), a draft
    # that cannot fit is bad input, refused before the resolver's long work.
    misfits = [line for s in matrix.stacks.values() if s.serving.speculative
               for line in draft_check(serving_spec(s), container=True)]
    if misfits:
        raise DraftMismatch(misfits)
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
    as_json.emit({**document, "findings": [{"stack": f.stack, "kind": f.kind, "message": f.message, "failure":
                                            f.is_failure} for f in findings], "problems": len(failures),
                  "incomplete": incomplete})
    verdict = (f"; not checked whole: the resolver could not reach everything of {', '.join(incomplete)} "
               "(incomplete above)" if incomplete else "" if failures else ": matrix OK")
    console.print(f"{len(matrix.stacks)} stacks, {len(failures)} problem(s){verdict}", highlight=False)
    return 1 if failures or incomplete else 0
