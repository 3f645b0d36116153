"""Whether a stack's lock may be built from: it must be what `invoke lock` wrote for the stack as it is now.

Checked before any build work (`build`, `bake`, `render`, `stacks --check` all come through `lock_for_build`):
- the inputs: the header's `stack-sha256` is the hash of the stack's resolution inputs now, else the lock is stale;
- the closure: every entry is one of the stack's own requirements or is required (`# via`) by an entry that is,
  and both ends of every resolver edge agree (`# via P` on the child, `# requires: C` on the parent): an entry
  added by hand, with the header's count made to agree, needs nothing to need it, so it is named here;
- the content: the `written-sha256` line is the hash of every other line the parser reads, so an entry changed by
  hand (a version, a hash, an edge made up to go with an added entry) no longer matches it.
A lock written before `written-sha256` existed is refused with the one thing to do: run `invoke lock` again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..config.schema import Stack
from ..core.errors import ConfigError
from ..lockfile.current import is_current, same_version, stale_message
from ..lockfile.model import Lock, lock_path
from ..lockfile.text import read_lock, written_sha256
from .plan import root_names


class StaleLock(ConfigError):
    """The stack entry changed since its lock was resolved."""


class UntrustedLock(ConfigError):
    """The lock is not what `invoke lock` would have written for this stack (edited by hand, or copied)."""


def lock_for_build(stacks_file: str | Path, stack: Stack) -> Lock | None:
    """The stack's current, trustworthy lock; None when it has none; a one-line `ConfigError` otherwise:
    `StaleLock` when the entry moved on, `UntrustedLock` when the file disagrees with itself or its stack.
    A stack of several platforms has a lock per platform: `stack.for_platform(P)` reads P's; the whole
    stack reads its first platform's."""
    path = lock_path(stacks_file, stack.name, stack.lock_platform)
    if not path.exists() and not path.is_symlink():
        return None
    lock = read_lock(path)
    if lock.stack != stack.name:
        raise UntrustedLock(f"this is the lock of stack '{lock.stack}', not of '{stack.name}': "
                            f"run invoke lock --stack {stack.name}", file=str(path), stack=stack.name)
    if lock.declared_written_sha256 is None:
        raise UntrustedLock(f"the lock has no 'written-sha256:' line (an older sglstack wrote it, or it was "
                            f"edited): run invoke lock --stack {stack.name}", file=str(path), stack=stack.name)
    if lock.platforms != stack.platforms[:1]:
        raise UntrustedLock(f"this lock is for {' '.join(lock.platforms)}, not {stack.platforms[0]} (each platform "
                            f"has its own lock): run invoke lock --stack {stack.name}", file=str(path),
                            stack=stack.name)
    if not is_current(lock, stack):
        raise StaleLock(stale_message(stack.name, path), stack=stack.name)
    problem = untrusted_reason(lock, stack)
    if problem:
        raise UntrustedLock(f"{problem}: the lock was edited by hand; run invoke lock --stack {stack.name}",
                            file=str(path), stack=stack.name)
    return lock


def platform_locks(stacks_file: str | Path, whole: Stack,
                   refused: Callable[[Path, ConfigError | None], None] | None = None) -> dict[str, Lock]:
    """The lock of each platform of a stack, by platform, each through `lock_for_build` (the build's own check);
    a platform without one is left out. A lock the build would refuse raises; with `refused`, it is handed
    there with its path (a missing one with None) and left out, so `stacks --check` reports every one."""
    locks: dict[str, Lock] = {}
    for platform in whole.platforms:
        one = whole.for_platform(platform)
        try:
            lock = lock_for_build(stacks_file, one)
        except ConfigError as exc:
            if refused is None:
                raise
            refused(lock_path(stacks_file, whole.name, one.lock_platform), exc)
            continue
        if lock is not None:
            locks[platform] = lock
        elif refused is not None:
            refused(lock_path(stacks_file, whole.name, one.lock_platform), None)
    return locks


def untrusted_reason(lock: Lock, stack: Stack) -> str | None:
    """Why the lock is not what would be derived for `stack` (the first reason, naming the entry), or None.

    In order: the header against the body (count, layers), the stack's pins, the resolver's edges, the
    closure from the stack's own requirements, and last the `written-sha256` of the whole (which can say that
    something changed, not what: every check before it names the entry)."""
    return (_header_problem(lock) or _pin_problem(lock, stack) or _edge_problem(lock)
            or _unrequired(lock, root_names(stack)) or _content_problem(lock))


def _header_problem(lock: Lock) -> str | None:
    if lock.declared_counts is not None:
        counts = (len(lock.packages), lock.hashed_count, len(lock.packages) - lock.hashed_count)
        if counts != lock.declared_counts:
            n, h, u = lock.declared_counts
            return (f"the header says {n} packages ({h} hashed, {u} unhashed), the body has {counts[0]} "
                    f"({counts[1]} hashed, {counts[2]} unhashed)")
    layers = set(lock.layers)
    for p in lock.packages:
        if p.layer not in layers:
            return f"{p.name} is in layer '{p.layer}', which the header's layers ({' '.join(lock.layers)}) lack"
    return None


def _pin_problem(lock: Lock, stack: Stack) -> str | None:
    for name, want in sorted(stack.pins().items()):
        entry = lock.get(name)
        if entry is None:
            return f"the stack pins {name}=={want}, the lock has no {name}"
        if entry.version and not same_version(entry.version, want):
            return f"the stack pins {name}=={want}, the lock has {name}=={entry.version}"
    return None


def _edge_problem(lock: Lock) -> str | None:
    """Every edge ends at an entry, and is written at both ends (`invoke lock` writes `requires` as the
    inverse of `via`): a removed entry leaves a name pointing at nothing, an added one a `via` its parent lacks."""
    names = set(lock.pins)
    children: dict[str, set[str]] = {}
    for p in lock.packages:
        for parent in p.required_by:
            if parent not in names:
                return f"{p.name} is required by {parent}, which is not in the lock"
            children.setdefault(parent, set()).add(p.name)
        for child in p.requires or ():
            if child not in names:
                return f"{p.name} requires {child}, which is not in the lock"
    for p in lock.packages:
        for child in sorted(set(p.requires or ()) - children.get(p.name, set())):
            return f"{p.name} requires {child}, whose '# via' does not name {p.name}"
        for child in sorted(children.get(p.name, set()) - set(p.requires or ())):
            return f"{child} is required by {p.name} ('# via'), whose '# requires:' does not name {child}"
    return None


def _reached(roots: Iterable[str], children: Mapping[str, Iterable[str]]) -> set[str]:
    """Every name a path of `children` edges leads to from `roots` (the roots included)."""
    reached: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += children.get(name, ())
    return reached


def _unrequired(lock: Lock, roots: frozenset[str]) -> str | None:
    """The first entry (in file order) that no path of `# via` edges leads to from the stack's own requirements."""
    children: dict[str, list[str]] = {}
    for p in lock.packages:
        for parent in p.required_by:
            children.setdefault(parent, []).append(p.name)
    needed = _reached((p.name for p in lock.packages if p.name in roots), children)
    for p in lock.packages:
        if p.name not in needed:
            return (f"{p.requirement} is required by nothing the stack installs (no layer of the stack names it, "
                    f"and no '# via' leads from it to one that does)")
    return None


def unrequired_in_image(lock: Lock, roots: frozenset[str], installed: Mapping[str, str],
                        requires: Mapping[str, Iterable[str]]) -> list[str]:
    """The lock's entries installed in the image that nothing the stack asked for requires, by the installed
    distributions' own metadata (`requires`: canonical name -> the names its Requires-Dist lists, any marker
    or extra taken as met). The lock's `# via` lines are the resolver's word and can be made up along with an
    added entry and a recomputed `written-sha256`; the metadata in the image is the packages' own."""
    locked = {p.name for p in lock.packages}
    children = {name: [c for c in requires.get(name, ()) if c in locked] for name in locked}
    needed = _reached((name for name in locked if name in roots), children)
    return [f"{p.requirement} is installed from the lock, but no package the stack asks for requires it (by "
            "the Requires-Dist of what the image holds): the lock names it without need"
            for p in lock.packages if p.name in installed and p.name not in needed]


def _content_problem(lock: Lock) -> str | None:
    if lock.declared_written_sha256 is not None and lock.declared_written_sha256 != written_sha256(lock):
        return ("its lines differ from its written-sha256 (an entry, hash or header line was added, changed or removed "
                "after invoke lock wrote it)")
    return None


def lock_differences(lock: Lock, fresh: Lock) -> list[str]:
    """What `lock` holds that a fresh resolution from it (its pins preferred) does not: an entry it does not
    need, or another version. What only the fresh one has is left out: an index reachable here and not where
    the lock was written brings more, and that is no edit."""
    out = []
    for p in lock.packages:
        other = fresh.get(p.name)
        if other is None:
            out.append(f"{p.requirement} is in the lock, and nothing resolved needs it")
        elif p.version and other.version and not same_version(p.version, other.version):
            out.append(f"{p.name}: {p.version} in the lock, {other.version} resolved")
    return out
