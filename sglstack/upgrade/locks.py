"""The upgrade's locks: one per platform of the stack (`locks/NAME.txt` for the first, `locks/NAME.OS-ARCH.txt`
for each further, as `invoke lock` writes them), resolved together and agreeing, each compared with the lock
it replaces, and with `--write` written together with the stacks file (all of them or none)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.schema import Stack
from ..core.records import UPGRADE_DIR, stack_dir
from ..core.replacing import replace_together, sibling_mode
from ..core.safefiles import make_folder
from ..diff.compare import lock_snapshot, snapshot_diff
from ..lock.flow import LockError, resolve_platforms, resolve_stack
from ..lockfile.model import Lock, disagreement_text, lock_path, platform_disagreements
from ..lockfile.text import read_lock, render_lock

# (the new stack, each platform's earlier lock, the base image's glibc) -> each platform's new lock
ResolveAll = Callable[[Stack, Mapping[str, Lock], str | None], dict[str, Lock]]
ResolveOne = Callable[[Stack, Lock | None, str | None], Lock]


def resolve_lock(stack: Stack, previous: Lock | None, base_glibc: str | None) -> Lock:
    """The project's lock resolution, the earlier lock as the starting point (unrelated pins stay put)."""
    return resolve_stack(stack, previous=previous, base_glibc=base_glibc)


def resolve_locks(stack: Stack, previous: Mapping[str, Lock], base_glibc: str | None) -> dict[str, Lock]:
    """Every platform's lock (`invoke lock`'s resolution), each from that platform's earlier lock."""
    return resolve_platforms(stack, previous=previous, base_glibc=base_glibc)


def lock_paths(stacks_file: str | Path, stack: Stack, name: str | None = None) -> dict[str, Path]:
    """Each platform of the stack -> its lock file (of stack `name`, default the stack's own), in the stack's
    order: the first is `locks/NAME.txt`."""
    return {p: lock_path(stacks_file, name or stack.name, stack.for_platform(p).lock_platform)
            for p in stack.platforms}


def previous_locks(stacks_file: str | Path, stack: Stack) -> dict[str, Lock]:
    """The stack's locks as they are now, by platform (a platform without one is left out)."""
    return {p: read_lock(path) for p, path in lock_paths(stacks_file, stack).items() if path.is_file()}


def new_locks(stack: Stack, previous: Mapping[str, Lock], base_glibc: str | None, resolve: ResolveOne,
              resolve_all: ResolveAll) -> dict[str, Lock]:
    """The new stack's lock of each platform; a stack of one platform is `resolve`'s one lock. Platforms that
    resolve a package to two versions are a LockError naming it and both (as `invoke lock` refuses them)."""
    if len(stack.platforms) == 1:
        return {stack.platforms[0]: resolve(stack, previous.get(stack.platforms[0]), base_glibc)}
    locks = resolve_all(stack, previous, base_glibc)
    missing = [p for p in stack.platforms if p not in locks]
    if missing:
        raise LockError(f"stack '{stack.name}': no lock for {', '.join(missing)}")
    if differ := platform_disagreements(locks):
        raise LockError(f"stack '{stack.name}': {disagreement_text(differ)}")
    return {p: locks[p] for p in stack.platforms}


def upgrade_locks(stacks_file: Path, stack: Stack, new_stack: Stack, *, write: bool, base_glibc: str | None,
                  resolve: ResolveOne, resolve_all: ResolveAll
                  ) -> tuple[dict[str, Lock], str | None, dict[str, dict[str, Any]]]:
    """Every platform's new lock from its earlier one, why they do not resolve (or agree), and what each
    changes (by platform: the first platform's is the report's closure, each further one's its own section),
    named where it will be written (`--write`: beside the stacks file; else the upgrade's report folder)."""
    old = previous_locks(stacks_file, stack)
    try:
        locks = new_locks(new_stack, old, base_glibc, resolve, resolve_all)
    except LockError as exc:
        return {}, str(exc).removeprefix(f"stack '{new_stack.name}': "), {}
    if write:
        where = {p: str(x) for p, x in lock_paths(stacks_file, new_stack).items()}
    else:
        out = stack_dir(new_stack.name) / UPGRADE_DIR
        where = {p: str(out / report_lock_name(new_stack.for_platform(p).lock_platform)) for p in locks}
    return locks, None, {p: closure(old.get(p), x, where[p]) for p, x in locks.items()}


def closure(old: Lock | None, new: Lock | None, where: str) -> dict[str, Any]:
    """What the new lock changes of the old one: the report's closure section."""
    if new is None:
        return {}
    if old is None:
        return {"before_count": None, "after_count": len(new.packages), "packages": [], "lock_path": where,
                "counts": {}, "note": "no earlier lock to compare with"}
    diff = snapshot_diff(lock_snapshot(old, "before"), lock_snapshot(new, "after"))
    rows = [{"name": c.name, "before": c.before, "after": c.after, "kind": c.kind} for c in diff.packages]
    counts = {k: sum(1 for r in rows if r["kind"] == k) for k in ("added", "removed", "changed")}
    return {"before_count": len(old.packages), "after_count": len(new.packages), "packages": rows,
            "counts": counts, "lock_path": where}


def report_lock_name(platform: str | None) -> str:
    """The file name of a platform's new lock in the report's folder (`lock.txt` for the first)."""
    return f"lock.{platform.replace('/', '-')}.txt" if platform else "lock.txt"


def write_upgrade(stacks_file: Path, text: str, lock_file: Path, lock: Lock,
                  others: Sequence[tuple[Path, Lock]] = ()) -> None:
    """The locks (the first platform's, then each further one's), then the stacks file, together
    (`replace_together`: all written whole first; if a later rename fails the earlier ones are undone, so
    they never disagree). The stacks file is replaced through a link to it (the link stays) and keeps its
    mode; a new lock takes its siblings' mode."""
    target = Path(os.path.realpath(stacks_file))
    make_folder(lock_file.parent, lock_file.parent)
    locks = [(path, render_lock(x, stacks_file=stacks_file.name).encode("utf-8"), sibling_mode(path, "*.txt"))
             for path, x in ((lock_file, lock), *others)]
    replace_together([*locks, (target, text.encode("utf-8"), sibling_mode(target, target.name))])
