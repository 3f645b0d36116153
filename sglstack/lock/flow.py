"""`invoke lock`: resolve everything a stack's image installs with uv, and write `locks/NAME.txt`.

What is resolved is what the image installs, layer by layer (the names are render's layers): torch and
its family, sgl-kernel, FlashInfer, the extra layers, SGLang's requirements with the declared overrides
applied (uv reads them from SGLang's own wheel METADATA; an override replaces that requirement wherever
it occurs), and SGLang itself. One resolution covers them all, for the stack's Python and platform.

How each kind of layer appears in the lock:
- A `no_deps` layer (upstream's NCCL forced over torch's own, or a direct sgl-kernel wheel) installs its
  files and nothing else, replacing whatever version an earlier layer brought. So it is hashed on its own
  (`uv pip compile --no-deps`) and left out of the main resolution (`--excludes`): the lock holds the
  forced version only, which is what the image ends up with.
- A layer whose index or URL cannot be reached is "unresolved": its pins are written `# unhashed:` with
  the reason, and the build installs that layer as it would without a lock. For a layer with its own
  dependencies (torch from PyTorch's index) those dependencies float. The rest of the stack must still
  agree with it, so its exact pins are stood in for by the same public versions from the default index
  (`torch==2.9.1` for `torch==2.9.1+cu130`): what torch and the rest both need (triton, filelock, ...)
  is locked at versions that satisfy that release, and what only the stand-ins need (PyPI's torch
  brings CUDA 12.8 `nvidia-*` packages, not cu130's) is not locked at all. The lock says all of this.
- A git-sourced SGLang is exported at its commit (as the build exports it) and uv reads the
  requirements of that commit's pyproject, so its dependencies are locked exactly as a PyPI SGLang's.
  SGLang itself is the wheel the image builds from that commit: its entry is `# unhashed: sglang==V`
  (V from that pyproject), and `# sglang-git-commit: SHA` names the commit. The exported folder is
  temporary and never appears in the lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..adapters.uv import (
    Resolution,
    ResolutionConflict,
    ResolveRequest,
    ResolverError,
    SourceUnreachable,
    compile_many,
)
from ..config.matrix import load_matrix
from ..config.platforms import unpacks_wheels
from ..config.schema import Stack
from ..core.clock import utc_timestamp
from ..core.errors import ConfigError, did_you_mean
from ..core.folderlock import file_lock
from ..core.records import require_writable
from ..lockfile.current import stack_input_hash
from ..lockfile.model import (
    Lock,
    LockedPackage,
    UnresolvedLayer,
    disagreement_text,
    lock_path,
    platform_disagreements,
    with_edges,
)
from ..lockfile.text import read_lock, write_locks, written_sha256
from .entries import (
    PlatformPart,
    closure,
    conflict_message,
    hashed_entries,
    no_deps_request,
    owner_of,
    public_pin,
    unhashed_entries,
    unreachable_reason,
)
from .plan import (
    SGLANG,
    SGLANG_REQUIREMENTS,
    GitTree,
    LockError,
    LockUnreachable,
    base_image_glibc,
    git_tree,
    plan_layers,
    python_platform,
)

# How resolutions run (the tests of the layer logic pass their own).
CompileFn = Callable[[Sequence[ResolveRequest]], list[Resolution | ResolverError]]


def _resolve_platform(stack: Stack, platform: str, previous: Lock | None, upgrade: tuple[str, ...],
                      compile_fn: CompileFn = compile_many, tree: GitTree | None = None,
                      glibc: str | None = None) -> PlatformPart:
    run = _PlatformResolution(stack, platform, previous, upgrade, tree, glibc)
    # The no-deps parts and the first main attempt run side by side.
    first = compile_fn([run.main_request(), *(no_deps_request(stack, layer, run.target)
                                              for layer in run.no_deps_layers)])
    packages, indexes = run.no_deps_results(first[1:])
    main = run.main_resolution(first[0], compile_fn)
    packages += run.placed(main)
    packages += run.unhashed_layers(packages)
    order = {layer.name: i for i, layer in enumerate(run.plan)}
    packages = list({p.name: p for p in reversed(packages)}.values())  # one entry per name: the first
    packages.sort(key=lambda p: (order[p.layer], p.name))
    return PlatformPart(tuple(packages), tuple(run.unresolved[x.name] for x in run.plan if x.name in run.unresolved),
                 tuple(run.notes), tuple(dict.fromkeys([*main.indexes_used, *indexes])), main.uv_version)


class _PlatformResolution:
    """One platform's resolution as it goes: the layers, those out of reach, and the public pins standing in."""

    def __init__(self, stack: Stack, platform: str, previous: Lock | None, upgrade: tuple[str, ...],
                 tree: GitTree | None, glibc: str | None) -> None:
        self.stack, self.upgrade, self.tree = stack, upgrade, tree
        self.plan = plan_layers(stack, platform, tree)
        self.target = python_platform(platform, glibc)
        self.deps_layers = [layer for layer in self.plan if not layer.no_deps]
        # A git SGLang's own wheel is built in the image, so there is nothing to hash for it alone.
        self.no_deps_layers = [layer for layer in self.plan if layer.no_deps and not (tree and layer.name == SGLANG)]
        self.preferences = tuple(p.requirement for p in (previous.packages if previous else ())
                                 if p.hashed and not p.url)
        self.unresolved: dict[str, UnresolvedLayer] = {}
        self.stand_ins: dict[str, tuple[str, ...]] = {}  # layer -> public pins standing in for its own
        self.notes: list[str] = []

    def main_request(self) -> ResolveRequest:
        requirements: list[str] = []
        excludes = [n for layer in self.no_deps_layers for n in layer.names]
        for layer in self.deps_layers:
            if layer.name in self.stand_ins:
                requirements += self.stand_ins[layer.name]
            elif layer.name in self.unresolved:
                excludes += layer.names
            else:
                requirements += layer.requirements
        indexes = tuple(dict.fromkeys(layer.index_url for layer in self.deps_layers
                                      if layer.index_url and layer.name not in self.unresolved))
        return ResolveRequest(requirements=tuple(dict.fromkeys(requirements)), python_version=self.stack.python,
                              python_platform=self.target, indexes=indexes,
                              only_binary=unpacks_wheels(self.stack.whole_platforms),
                              overrides=tuple(o.pin for o in self.stack.overrides),
                              excludes=tuple(dict.fromkeys(excludes)), preferences=self.preferences,
                              upgrade_packages=self.upgrade, logins=self.stack.credentials)

    def no_deps_results(self, results: Sequence[Resolution | ResolverError]) -> tuple[list[LockedPackage], list[str]]:
        """(entries, indexes used) of the no-deps layers; one out of reach is kept unhashed."""
        packages: list[LockedPackage] = []
        indexes: list[str] = []
        for layer, result in zip(self.no_deps_layers, results, strict=True):
            if isinstance(result, SourceUnreachable):
                self.unresolved[layer.name] = UnresolvedLayer(layer.name, False, unreachable_reason(result, layer))
                packages += unhashed_entries(self.stack, layer, unreachable_reason(result, layer))
            elif isinstance(result, ResolverError):
                raise LockError(f"stack '{self.stack.name}': layer {layer.name}: {result}")
            else:
                indexes += result.indexes_used
                packages += hashed_entries(self.stack, layer, result.packages, required_by=False)
        return packages, indexes

    def main_resolution(self, main: Resolution | ResolverError, compile_fn: CompileFn) -> Resolution:
        """The main resolution, retried with each layer whose index is out of reach left out (or stood in for)."""
        name = self.stack.name
        for _ in range(len(self.plan) + 1):
            if not isinstance(main, ResolverError):
                break
            if isinstance(main, SourceUnreachable):
                owner = owner_of(main.url, self.deps_layers)
                if owner is None or owner.name in self.unresolved:
                    raise LockUnreachable(f"stack '{name}': {main}")
                self.unresolved[owner.name] = UnresolvedLayer(owner.name, True, unreachable_reason(main, owner))
                public = tuple(public_pin(r) for r in owner.requirements)
                if all(public):
                    self.stand_ins[owner.name] = tuple(p for p in public if p)
                if owner.name == SGLANG_REQUIREMENTS:
                    self.unresolved[SGLANG] = UnresolvedLayer(SGLANG, False, unreachable_reason(main, owner))
            elif self.stand_ins:
                # The stand-ins themselves do not resolve (e.g. a release only the unreachable index has):
                # leave those layers out entirely, and say so.
                self.notes.append(f"no stand-in from the default index for {', '.join(self.stand_ins)}: {main}")
                self.stand_ins.clear()
            elif isinstance(main, ResolutionConflict):
                raise LockError(f"stack '{name}': the resolver found a conflict for {self.target}: "
                                f"{conflict_message(main)}{self.wheels_only_hint(main)}")
            else:
                raise LockError(f"stack '{name}': {main}")
            main = compile_fn([self.main_request()])[0]
        if isinstance(main, ResolverError):
            raise (LockUnreachable if isinstance(main, SourceUnreachable) else LockError)(f"stack '{name}': {main}")
        return main

    def wheels_only_hint(self, conflict: ResolutionConflict) -> str:
        """Why a source distribution does not count, where it is the cause (uv's hint names `--no-build`)."""
        platforms = self.stack.whole_platforms
        if not unpacks_wheels(platforms) or "no usable wheels" not in conflict.explanation:
            return ""
        return (f"; a stack built for {' '.join(platforms)} installs wheels only (each is unpacked for its "
                "platform, never built): pin a version with a wheel for every platform")

    def placed(self, main: Resolution) -> list[LockedPackage]:
        """Which resolved packages the image really installs from the lock, each in the layer that installs it."""
        stand_in_names = {canonicalize_name(Requirement(p).name) for pins in self.stand_ins.values() for p in pins}
        resolved = {p.name: p for p in main.packages}
        children: dict[str, set[str]] = {}
        for p in main.packages:
            for parent in p.required_by:
                children.setdefault(parent, set()).add(p.name)
        kept_names = set(resolved) - stand_in_names
        roots = [n for layer in self.deps_layers if layer.name not in self.unresolved for n in layer.names]
        kept = closure(roots, children, kept_names) - ({SGLANG} if self.tree else set())  # a git SGLang: below
        dropped = len(kept_names - kept - {SGLANG})
        for layer_name, pins in self.stand_ins.items():
            self.notes.append(f"layer {layer_name} was not resolved; {' '.join(pins)} from the default index stood in "
                              f"for its pins, so that what it shares with the rest of the stack is locked at versions "
                              f"that satisfy that release; {dropped} package(s) only the stand-ins need are not "
                              f"locked (the layer brings its own from its index)")
        layer_of = self._layer_of(children, kept)
        deps_layers = self.deps_layers
        fallback = (SGLANG_REQUIREMENTS if self.stack.sglang.install_deps
                    else deps_layers[-1].name if deps_layers else SGLANG)
        shared_note = ""
        if self.stand_ins:
            shared_note = (f"also needed by the unresolved {', '.join(self.stand_ins)} layer: checked against its "
                           "stand-ins")
        packages: list[LockedPackage] = []
        for name in sorted(kept):
            p = resolved[name]
            note = shared_note if shared_note and set(p.required_by) & stand_in_names else None
            layer = next(x for x in self.plan if x.name == layer_of.get(name, fallback))
            packages += hashed_entries(self.stack, layer, (p,), note=note)
        return packages

    def _layer_of(self, children: dict[str, set[str]], kept: set[str]) -> dict[str, str]:
        layer_of: dict[str, str] = {}
        for layer in self.plan:
            for name in layer.names:
                layer_of.setdefault(name, SGLANG if name == "sglang" else layer.name)
        for layer in self.deps_layers:
            if layer.name in self.unresolved:
                continue
            for name in sorted(closure(layer.names, children, kept)):
                layer_of.setdefault(name, layer.name)
        return layer_of

    def unhashed_layers(self, so_far: list[LockedPackage]) -> list[LockedPackage]:
        """The entries of the layers out of reach, and a git SGLang's own wheel (built in the image)."""
        out: list[LockedPackage] = []
        for layer in self.deps_layers:
            if layer.name in self.unresolved:
                out += unhashed_entries(self.stack, layer, self.unresolved[layer.name].reason, self.tree)
        if self.tree and not any(p.layer == SGLANG for p in [*so_far, *out]):
            # What the image installs: the wheel it builds from the commit, at that pyproject's version.
            out.append(LockedPackage(name=SGLANG, version=self.tree.version, layer=SGLANG,
                                     unhashed=self.tree.reason))
        return out


def resolve_platforms(stack: Stack, *, previous: Mapping[str, Lock] | None = None, upgrade: Sequence[str] = (),
                      compile_fn: CompileFn = compile_many, base_glibc: str | None = None) -> dict[str, Lock]:
    """One lock per platform of the stack (`Stack.for_platform`), which must agree: a package both platforms
    install at two versions is a LockError naming it and both (the silent fallback of a resolver to an older
    release, or a placeholder, when a wheel for one platform is missing).

    The manylinux tag follows the stack's `glibc`, else `base_glibc` (read from its base image), else the
    2.28 baseline."""
    upgrade = tuple(canonicalize_name(u) for u in upgrade)
    glibc = stack.glibc or base_glibc
    locks: dict[str, Lock] = {}
    with git_tree(stack) as tree:
        for platform in stack.platforms:
            one = stack.for_platform(platform)
            part = _resolve_platform(one, platform, (previous or {}).get(platform), upgrade, compile_fn, tree, glibc)
            locks[platform] = Lock(
                stack=stack.name, stack_sha256=stack_input_hash(one), resolved_at=utc_timestamp(),
                resolver=f"uv {part.uv_version} (uv pip compile --generate-hashes)", python=stack.python,
                platforms=(platform,), layers=tuple(x.name for x in plan_layers(one, platform, tree)),
                sglang_commit=stack.sglang.git.ref if stack.sglang.git else None,
                packages=with_edges(part.packages), indexes=part.indexes, unresolved=part.unresolved,
                notes=part.notes, python_platforms=(python_platform(platform, glibc),))
    if differ := platform_disagreements(locks):
        raise LockError(f"stack '{stack.name}': {disagreement_text(differ)}")
    return locks


def resolve_stack(stack: Stack, *, previous: Lock | None = None, upgrade: Sequence[str] = (),
                  compile_fn: CompileFn = compile_many, base_glibc: str | None = None) -> Lock:
    """The lock of the stack's first platform, of `resolve_platforms` (every platform resolved and agreeing)."""
    first = stack.platforms[0]
    return resolve_platforms(stack, previous={first: previous} if previous else None, upgrade=upgrade,
                             compile_fn=compile_fn, base_glibc=base_glibc)[first]


def resolve_for_base(stack: Stack, previous: Lock | None = None) -> Lock:
    """`resolve_stack` for the glibc the stack declares, else its local base image's (what `invoke lock`
    resolves for, so `stacks --check --resolve` and the lock agree on the platform tag), from `previous`."""
    return resolve_stack(stack, previous=previous, base_glibc=None if stack.glibc else base_image_glibc(stack))


# ---- the task --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LockResult:
    path: Path
    lock: Lock
    previous: Lock | None
    seconds: float
    # The further platforms' locks of a stack built for several (the first platform's is the above).
    others: tuple[LockResult, ...] = ()


def kept_time(lock: Lock, previous: Lock | None) -> Lock:
    """`lock`, dated as `previous` when nothing but the time of resolving differs: a lock that finds no change
    leaves the file's bytes alone (`git status` clean), and `resolved-at` says when its content was resolved."""
    if previous is not None and written_sha256(replace(lock, resolved_at=previous.resolved_at)) == \
            written_sha256(previous):
        return replace(lock, resolved_at=previous.resolved_at)
    return lock


def lock_stack(stacks_file: str | Path, stack_name: str, *, upgrade_packages: Sequence[str] = (),
               compile_fn: CompileFn = compile_many) -> LockResult:
    """Resolve and write `locks/NAME.txt`; an earlier lock is the starting point (its pins are kept).

    The matrix is held (shared) from the read to the write: an `upgrade --write` of it in between would
    leave this lock resolved for the entry it replaced."""
    with file_lock(Path(stacks_file), "lock", shared=True) if Path(stacks_file).is_file() else nullcontext():
        return _lock_stack(stacks_file, stack_name, upgrade_packages=upgrade_packages, compile_fn=compile_fn)


def _lock_stack(stacks_file: str | Path, stack_name: str, *, upgrade_packages: Sequence[str],
                compile_fn: CompileFn) -> LockResult:
    stack = load_matrix(stacks_file).get(stack_name)
    paths: dict[str, Path] = {p: lock_path(stacks_file, stack_name, stack.for_platform(p).lock_platform)
                              for p in stack.platforms}
    # a folder: one line
    previous_of: dict[str, Lock] = {p: read_lock(x) for p, x in paths.items() if x.exists() or x.is_symlink()}
    # A read-only stacks folder or a full disk is one line now, not after minutes of resolving.
    for x in paths.values():
        require_writable(x, what="lock")
    wanted = [canonicalize_name(u) for u in upgrade_packages]
    # Every platform's lock: one without it would be resolved afresh, every package moved, not only these.
    if wanted and (absent := [str(paths[p]) for p in stack.platforms if p not in previous_of]):
        raise ConfigError(f"--upgrade-package needs an existing lock ({' and '.join(absent)}): run invoke lock --stack "
                          f"{stack_name}", stack=stack_name)
    for name in wanted:  # in any platform's lock: a package only one platform installs is upgraded there
        held = {p: entry for p, lock in previous_of.items() if (entry := lock.get(name)) is not None}
        if not held:
            known = sorted({x.name for lock in previous_of.values() for x in lock.packages})
            where = " or ".join(str(paths[p]) for p in previous_of)
            raise ConfigError(f"--upgrade-package {name}: not in {where}{did_you_mean(name, known)}", stack=stack_name)
        for platform, entry in held.items():
            if not entry.hashed:
                raise ConfigError(f"--upgrade-package {name}: not resolved in {paths[platform]} ({entry.unhashed})",
                                  stack=stack_name)
    start = time.monotonic()
    base_glibc = None if stack.glibc else base_image_glibc(stack)
    locks = resolve_platforms(stack, previous=previous_of, upgrade=wanted, compile_fn=compile_fn,
                              base_glibc=base_glibc)
    # every platform resolved and agreeing before any file is written; then all written together, or none
    kept = {platform: kept_time(lock, previous_of.get(platform)) for platform, lock in locks.items()}
    write_locks([(paths[p], lock) for p, lock in kept.items()], stacks_file=Path(stacks_file).name)
    results = [LockResult(paths[p], lock, previous_of.get(p), round(time.monotonic() - start, 2))
               for p, lock in kept.items()]
    return replace(results[0], others=tuple(results[1:]))

