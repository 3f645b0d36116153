"""`invoke lock`: its options, and what it prints of the lock `sglstack.lock.flow.lock_stack` wrote."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, repeatable, stacks_file_option
from .cmdoptions import stack_option
from .options import command

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from ..core.jsonreport import JsonReport
    from ..lock.flow import LockResult


@dataclass(frozen=True)
class LockOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    upgrade_package: tuple[str, ...] = repeatable("re-resolve only this package and what depends on it (repeatable)")


@command(LockOptions)
def lock(o: LockOptions, as_json: JsonReport) -> int:
    """Resolve everything the stack's image installs (uv, with hashes) into locks/STACK.txt."""
    return lock_command(o.stacks_file, o.stack, upgrade_packages=list(o.upgrade_package), as_json=as_json)


def lock_command(stacks_file: str, stack_name: str, *, upgrade_packages: Sequence[str] = (),
                 as_json: JsonReport = NO_JSON) -> int:
    """Lock the stack, print what was locked and what moved against the lock it replaced; 1 for a partial lock."""
    # at call time: the resolver, rich and the matrix would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..core.progress import progress
    from ..lock import flow

    console = make_console()
    load_matrix(stacks_file).get(stack_name)  # a typo is refused before the progress names it
    with progress(f"lock {stack_name}: resolving"):
        first = flow.lock_stack(stacks_file, stack_name, upgrade_packages=upgrade_packages)
    reports = [_lock_report(stack_name, result, console) for result in (first, *first.others)]
    # One platform: the report as it always was; several: the first's, with each further platform's beside it.
    as_json.emit({**reports[0][0], **({"other_platforms": [r for r, _ in reports[1:]]} if first.others else {})})
    return max(code for _, code in reports)


def _lock_report(stack_name: str, result: LockResult, console: Console) -> tuple[dict, int]:
    """What one platform's lock says (its JSON report), printed; 1 for a partial lock."""
    # at call time: rich and the diff would slow `invoke --list`
    from ..core.console import plain
    from ..core.errors import one_line
    from ..core.network import network_advice, network_problem
    from ..diff.compare import diff_to_json, lock_snapshot, print_diff, snapshot_diff

    lock = result.lock
    changes = None if result.previous is None else replace(snapshot_diff(
        lock_snapshot(result.previous, f"{result.path} (before)"), lock_snapshot(lock, f"{result.path} (now)")),
        unknown=())  # two locks know only packages: the sections no lock holds are not news
    report = {"stack": stack_name, "lock": str(result.path), "python": lock.python,
              "platforms": list(lock.platforms), "seconds": result.seconds,
              "packages": [{"name": p.name, "version": p.version, "layer": p.layer, "hashed": p.hashed}
                           for p in lock.packages],
              "unresolved": [{"layer": u.layer, "with_dependencies": u.with_dependencies, "reason": u.reason}
                             for u in lock.unresolved],
              "notes": list(lock.notes), "changes": diff_to_json(changes) if changes else None}
    console.print(f"[green]{stack_name}[/]: locked {len(lock.packages)} packages ({lock.hashed_count} hashed) "
                  f"for Python {lock.python} {' '.join(lock.platforms)} in {result.seconds:.1f} s -> {result.path}")
    for u in lock.unresolved:
        console.print(f"[yellow]{stack_name}[/]: not resolved: layer {plain(u)}", highlight=False)
    for note in lock.notes:
        console.print(f"[dim]{stack_name}: {plain(note)}[/]", highlight=False)
    if changes is not None:
        print_diff(changes, console)
    if lock.unresolved:
        # Written all the same (a lock that says what it could not see is what the build installs from),
        # but a partial lock is not a success: what is missing and why, in one line, exit 1.
        missing = "; ".join(f"{u.layer} ({u.reason})" for u in lock.unresolved)
        network = network_problem(u.reason for u in lock.unresolved)
        advice = f"; {network_advice(network, ca_option=None, ca_given=False)}" if network else ""
        print(f"error: stack '{stack_name}': the lock is partial: {len(lock.unresolved)} layer(s) not resolved: "
              f"{one_line(missing)}; {result.path} leaves them unhashed{advice}", file=sys.stderr)
        return report, 1
    return report, 0
