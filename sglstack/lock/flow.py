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

import contextlib
import re
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import docker.errors
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..adapters.docker import docker_client, image_exists, read_image_files
from ..adapters.git import GitSource, GitSourceError
from ..adapters.uv import (
    Resolution,
    ResolutionConflict,
    ResolvedPackage,
    ResolveRequest,
    ResolverError,
    SourceUnreachable,
    compile_many,
)
from ..config.matrix import load_matrix
from ..config.schema import Stack
from ..core.console import console as make_console
from ..core.errors import ConfigError, DockerUnavailable, SglstackError
from ..core.records import require_writable, utc_timestamp
from ..diff.compare import lock_snapshot, print_diff, snapshot_diff
from .file import Lock, LockedPackage, UnresolvedLayer, lock_path, read_lock, stack_input_hash, with_edges, write_lock

# The glibc baseline a lock resolves for when neither the stack (`glibc:`) nor its base image says more:
# manylinux_2_28 wheels run on Ubuntu 24.04 (2.39) and Debian 12 (2.36) bases alike. A stack whose base
# has a newer glibc resolves for that one (SGLang 0.5.23 ships manylinux_2_34 wheels only).
MANYLINUX = "2_28"
_ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
SGLANG_REQUIREMENTS = "sglang-requirements"
SGLANG = "sglang"


# How resolutions run (the tests of the layer logic pass their own).
CompileFn = Callable[[Sequence[ResolveRequest]], list[Resolution | ResolverError]]


class LockError(SglstackError):
    """The stack cannot be locked (the message names the stack and the reason)."""


@dataclass(frozen=True)
class PlannedLayer:
    """One install layer of the image as the resolver sees it."""

    name: str
    requirements: tuple[str, ...]
    index_url: str | None = None
    exclusive_index: bool = False  # the build installs it from this index only (pip --index-url)
    no_deps: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(canonicalize_name(Requirement(r).name) for r in self.requirements)


@dataclass(frozen=True)
class GitTree:
    """A git-sourced SGLang's package folder at its commit, exported the way the build exports it."""

    path: Path  # a temporary folder: uv reads the pyproject there; it never reaches the lock
    commit: str  # full sha
    version: str  # `[project] version` of that pyproject

    @property
    def reason(self) -> str:
        """Why the lock has no hash for SGLang itself: the image builds the wheel from this commit."""
        return f"built in the image from git commit {self.commit}"


@contextlib.contextmanager
def git_tree(stack: Stack) -> Iterator[GitTree | None]:
    """The stack's git source at its commit, exported for the resolver while the block runs (None for PyPI)."""
    git = stack.sglang.git
    if git is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="sglstack-lock-") as tmp:
        dest = Path(tmp) / "sglang-src"
        try:
            GitSource(git.repo, logins=stack.credentials).export(git.ref, git.subdirectory, dest)
        except GitSourceError as exc:
            raise LockError(f"stack '{stack.name}': {exc}") from None
        yield GitTree(dest, git.ref, _static_version(stack, dest / "pyproject.toml"))


def _static_version(stack: Stack, pyproject: Path) -> str:
    where = f"stack '{stack.name}': sglang.git {pyproject.parent.name}/pyproject.toml at {stack.sglang.git.ref[:12]}"  # type: ignore[union-attr]
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LockError(f"{where}: cannot read it ({exc})") from None
    version = project.get("version")
    if not isinstance(version, str) or not version:
        raise LockError(f"{where}: no static [project] version (the lock pins the version the image installs)")
    return version


def sglang_requirement(stack: Stack, tree: GitTree | None = None) -> str:
    """SGLang as one requirement: the PyPI release, or the exported tree of its git commit."""
    if stack.sglang.version:
        return f"sglang=={stack.sglang.version}"
    if tree is None:
        raise LockError(f"stack '{stack.name}': a git-sourced SGLang is resolved from its exported tree")
    return f"sglang @ {tree.path.resolve().as_uri()}"


def plan_layers(stack: Stack, platform: str, tree: GitTree | None = None) -> tuple[PlannedLayer, ...]:
    """The image's pip layers, in install order, with the names render gives them (`tree`: a git SGLang's)."""
    layers: list[PlannedLayer] = []
    if stack.torch:
        layers.append(PlannedLayer("torch", stack.torch.requirements(), stack.torch.index_url, True))
    if stack.sgl_kernel:
        pin = stack.sgl_kernel
        if pin.url:
            url = pin.url.replace("{arch}", _ARCH[platform])
            layers.append(PlannedLayer(pin.package, (f"{pin.package} @ {url}",), no_deps=True))
        else:
            layers.append(PlannedLayer(pin.package, (f"{pin.package}=={pin.version}",), pin.index_url, True))
    if stack.flashinfer:
        fi = stack.flashinfer
        layers.append(PlannedLayer("flashinfer", fi.requirements(), fi.index_url, False))
    extras = [PlannedLayer(x.name, x.requirements, x.index_url, True, x.no_deps) for x in stack.extra_layers]
    after = {x.name for x in stack.extra_layers if x.after_sglang}
    layers += [x for x in extras if x.name not in after]
    if stack.sglang.install_deps:
        layers.append(PlannedLayer(SGLANG_REQUIREMENTS, (sglang_requirement(stack, tree),)))
    layers += [x for x in extras if x.name in after]
    layers.append(PlannedLayer(SGLANG, (sglang_requirement(stack, tree),), no_deps=not stack.sglang.install_deps))
    return tuple(layers)


def python_platform(platform: str, glibc: str | None = None) -> str:
    """uv's target for `platform` on a base image with `glibc` ("2.36"; None: the 2.28 baseline)."""
    tag = glibc.replace(".", "_") if glibc else MANYLINUX
    return f"{_ARCH[platform]}-manylinux_{tag}"


def _public(requirement: str) -> str | None:
    """`torch==2.9.1+cu130` -> `torch==2.9.1`: the same release as the default index publishes it."""
    req = Requirement(requirement)
    specs = list(req.specifier)
    if req.url or len(specs) != 1 or specs[0].operator != "==":
        return None
    return f"{req.name}=={Version(specs[0].version).public}"


def _owner(url: str, layers: Iterable[PlannedLayer]) -> PlannedLayer | None:
    """The layer whose index or direct URL `url` belongs to."""
    for layer in layers:
        if layer.index_url and url.rstrip("/").startswith(layer.index_url.rstrip("/")):
            return layer
        for text in layer.requirements:
            req = Requirement(text)
            if req.url and url.split("#")[0] == req.url.split("#")[0]:
                return layer
    return None


def _reason(exc: SourceUnreachable, layer: PlannedLayer | None = None) -> str:
    """'index URL unreachable (cause)' for a layer's index, 'URL unreachable (cause)' for a direct URL."""
    where = exc.url
    if layer and layer.index_url and exc.url.startswith(layer.index_url.rstrip("/")):
        where = f"index {layer.index_url}"
    return f"{where} unreachable: {exc.cause}" if exc.cause else f"{where} unreachable"


@dataclass(frozen=True)
class _Part:
    """What one platform's resolution found: entries by layer, and what stayed out of reach."""

    packages: tuple[LockedPackage, ...]
    unresolved: tuple[UnresolvedLayer, ...]
    notes: tuple[str, ...]
    indexes: tuple[str, ...]
    uv_version: str


def _no_deps_request(stack: Stack, layer: PlannedLayer, target: str) -> ResolveRequest:
    return ResolveRequest(requirements=layer.requirements, python_version=stack.python, python_platform=target,
                          no_deps=True, default_index=layer.index_url if layer.exclusive_index else None,
                          indexes=(layer.index_url,) if layer.index_url and not layer.exclusive_index else (),
                          logins=stack.credentials)


def _closure(roots: Iterable[str], children: dict[str, set[str]], allowed: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in allowed]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [c for c in children.get(name, ()) if c in allowed and c not in seen]
    return seen


def _resolve_platform(stack: Stack, platform: str, previous: Lock | None, upgrade: tuple[str, ...],
                      compile_fn: CompileFn = compile_many, tree: GitTree | None = None,
                      glibc: str | None = None) -> _Part:
    plan = plan_layers(stack, platform, tree)
    target = python_platform(platform, glibc)
    deps_layers = [layer for layer in plan if not layer.no_deps]
    # A git SGLang's own wheel is built in the image, so there is nothing to hash for it alone.
    no_deps_layers = [layer for layer in plan if layer.no_deps and not (tree and layer.name == SGLANG)]
    preferences = tuple(p.requirement for p in (previous.packages if previous else ()) if p.hashed and not p.url)
    unresolved: dict[str, UnresolvedLayer] = {}
    stand_ins: dict[str, tuple[str, ...]] = {}  # layer -> public pins standing in for its own
    notes: list[str] = []

    def main_request() -> ResolveRequest:
        requirements: list[str] = []
        excludes = [n for layer in no_deps_layers for n in layer.names]
        for layer in deps_layers:
            if layer.name in stand_ins:
                requirements += stand_ins[layer.name]
            elif layer.name in unresolved:
                excludes += layer.names
            else:
                requirements += layer.requirements
        indexes = tuple(dict.fromkeys(layer.index_url for layer in deps_layers
                                      if layer.index_url and layer.name not in unresolved))
        return ResolveRequest(requirements=tuple(dict.fromkeys(requirements)), python_version=stack.python,
                              python_platform=target, indexes=indexes,
                              overrides=tuple(o.pin for o in stack.overrides),
                              excludes=tuple(dict.fromkeys(excludes)), preferences=preferences,
                              upgrade_packages=upgrade, logins=stack.credentials)

    # The no-deps parts and the first main attempt run side by side.
    first = compile_fn([main_request(), *(_no_deps_request(stack, layer, target) for layer in no_deps_layers)])
    main: Resolution | ResolverError = first[0]
    packages: list[LockedPackage] = []
    indexes: list[str] = []
    uv_version = "unknown"
    for layer, result in zip(no_deps_layers, first[1:], strict=True):
        if isinstance(result, SourceUnreachable):
            unresolved[layer.name] = UnresolvedLayer(layer.name, False, _reason(result, layer))
            packages += _unhashed(stack, layer, _reason(result, layer))
        elif isinstance(result, ResolverError):
            raise LockError(f"stack '{stack.name}': layer {layer.name}: {result}")
        else:
            uv_version = result.uv_version
            indexes += result.indexes_used
            packages += _hashed(stack, layer, result.packages, required_by=False)
    for _ in range(len(plan) + 1):
        if not isinstance(main, ResolverError):
            break
        if isinstance(main, SourceUnreachable):
            owner = _owner(main.url, deps_layers)
            if owner is None or owner.name in unresolved:
                raise LockError(f"stack '{stack.name}': {main}")
            layer = owner
            unresolved[layer.name] = UnresolvedLayer(layer.name, True, _reason(main, layer))
            public = tuple(_public(r) for r in layer.requirements)
            if all(public):
                stand_ins[layer.name] = tuple(p for p in public if p)
            if layer.name == SGLANG_REQUIREMENTS:
                unresolved[SGLANG] = UnresolvedLayer(SGLANG, False, _reason(main, layer))
        elif stand_ins:
            # The stand-ins themselves do not resolve (e.g. a release only the unreachable index has):
            # leave those layers out entirely, and say so.
            notes.append(f"no stand-in from the default index for {', '.join(stand_ins)}: {main}")
            stand_ins.clear()
        elif isinstance(main, ResolutionConflict):
            raise LockError(f"stack '{stack.name}': the resolver found a conflict for {target}: "
                            f"{conflict_message(main)}")
        else:
            raise LockError(f"stack '{stack.name}': {main}")
        main = compile_fn([main_request()])[0]
    if isinstance(main, ResolverError):
        raise LockError(f"stack '{stack.name}': {main}")
    uv_version = main.uv_version
    indexes = [*main.indexes_used, *indexes]

    # Which resolved packages the image really installs from the lock.
    stand_in_names = {canonicalize_name(Requirement(p).name) for pins in stand_ins.values() for p in pins}
    resolved = {p.name: p for p in main.packages}
    children: dict[str, set[str]] = {}
    for p in main.packages:
        for parent in p.required_by:
            children.setdefault(parent, set()).add(p.name)
    kept_names = set(resolved) - stand_in_names
    roots = [n for layer in deps_layers if layer.name not in unresolved for n in layer.names]
    kept = _closure(roots, children, kept_names) - ({SGLANG} if tree else set())  # a git SGLang: added below
    dropped = len(kept_names - kept - {SGLANG})
    for layer_name, pins in stand_ins.items():
        notes.append(f"layer {layer_name} was not resolved; {' '.join(pins)} from the default index stood in for "
                     f"its pins, so that what it shares with the rest of the stack is locked at versions that "
                     f"satisfy that release; {dropped} package(s) only the stand-ins need are not locked "
                     f"(the layer brings its own from its index)")
    layer_of: dict[str, str] = {}
    for layer in plan:
        for name in layer.names:
            layer_of.setdefault(name, SGLANG if name == "sglang" else layer.name)
    for layer in deps_layers:
        if layer.name in unresolved:
            continue
        for name in sorted(_closure(layer.names, children, kept)):
            layer_of.setdefault(name, layer.name)
    fallback = SGLANG_REQUIREMENTS if stack.sglang.install_deps else deps_layers[-1].name if deps_layers else SGLANG
    shared_note = ""
    if stand_ins:
        shared_note = f"also needed by the unresolved {', '.join(stand_ins)} layer: checked against its stand-ins"
    for name in sorted(kept):
        p = resolved[name]
        note = shared_note if shared_note and set(p.required_by) & stand_in_names else None
        layer = next(x for x in plan if x.name == layer_of.get(name, fallback))
        packages += _hashed(stack, layer, (p,), note=note)
    for layer in deps_layers:
        if layer.name in unresolved:
            packages += _unhashed(stack, layer, unresolved[layer.name].reason, tree)
    if SGLANG in unresolved and not any(p.layer == SGLANG for p in packages):
        packages += _unhashed(stack, plan[-1], unresolved[SGLANG].reason, tree)
    if tree and not any(p.layer == SGLANG for p in packages):
        # What the image installs: the wheel it builds from the commit, at that pyproject's version.
        packages.append(LockedPackage(name=SGLANG, version=tree.version, layer=SGLANG, unhashed=tree.reason))
    order = {layer.name: i for i, layer in enumerate(plan)}
    packages = list({p.name: p for p in reversed(packages)}.values())  # one entry per name: the first
    packages.sort(key=lambda p: (order[p.layer], p.name))
    return _Part(tuple(packages), tuple(unresolved[x.name] for x in plan if x.name in unresolved), tuple(notes),
                 tuple(dict.fromkeys(indexes)), uv_version)


def _pin_version(stack: Stack, name: str, requirement: str) -> str:
    req = Requirement(requirement)
    if not req.url:
        return next(iter(req.specifier)).version
    return stack.pins().get(name, "")


def _hashed(stack: Stack, layer: PlannedLayer, resolved: Sequence[ResolvedPackage], *, required_by: bool = True,
            note: str | None = None) -> list[LockedPackage]:
    out = []
    for p in resolved:
        version = p.version or stack.pins().get(p.name, "")
        if not version:
            raise LockError(f"stack '{stack.name}': layer {layer.name}: {p.name} @ {p.url} has no version pinned "
                            f"in the stack")
        hashes = tuple(sorted(p.hashes))
        out.append(LockedPackage(name=p.name, version=version, layer=layer.name, hashes=hashes, url=p.url,
                                 unhashed=None if hashes else "the index serves no sha256 for its files",
                                 required_by=p.required_by if required_by else (), note=note))
    return out


def _unhashed(stack: Stack, layer: PlannedLayer, reason: str, tree: GitTree | None = None) -> list[LockedPackage]:
    out = []
    for text in layer.requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if tree and name == SGLANG:  # never the exported tree's temporary path
            out.append(LockedPackage(name=name, version=tree.version, layer=SGLANG,
                                     unhashed=f"{tree.reason}; {reason}"))
            continue
        out.append(LockedPackage(name=name, version=_pin_version(stack, name, text),
                                 layer=SGLANG if name == "sglang" else layer.name, url=req.url, unhashed=reason))
    return out


def conflict_message(conflict: ResolutionConflict) -> str:
    """Both sides of the conflict, then uv's own reason: the sides alone hide a cause that is no requirement
    of anyone ("sglang==0.5.23 has no wheels with a matching platform tag ... available for manylinux_2_34")."""
    sides = "; ".join(str(s) for s in conflict.sides)
    reason = " ".join(conflict.explanation.split())
    return f"{sides} (uv: {reason})" if sides and reason else sides or reason


# Where glibc lives in the base images stacks use (Debian/Ubuntu multiarch, then RHEL-likes' lib64).
LIBC_PATHS = {"linux/amd64": ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6",
                              "/usr/lib64/libc.so.6"),
              "linux/arm64": ("/usr/lib/aarch64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                              "/usr/lib64/libc.so.6")}
_GLIBC_BANNER = re.compile(rb"GNU C Library [^\n]*? release version (\d+\.\d+)")


def glibc_version(libc: bytes) -> str | None:
    """'2.36' from the bytes of libc.so.6 (its banner: '... stable release version 2.36.'), else None."""
    m = _GLIBC_BANNER.search(libc)
    return m.group(1).decode() if m else None


def base_image_glibc(stack: Stack, docker_host: str | None = None) -> str | None:
    """The glibc of the stack's base image when the engine has it (read, never run, never pulled); else None."""
    try:
        client = docker_client(docker_host)
        if not image_exists(client, stack.base_image):
            return None
        files = read_image_files(client, stack.base_image, list(LIBC_PATHS[stack.platforms[0]]))
    except (DockerUnavailable, docker.errors.DockerException):
        return None
    return next((v for data in files.values() if (v := glibc_version(data))), None)


def resolve_stack(stack: Stack, *, previous: Lock | None = None, upgrade: Sequence[str] = (),
                  compile_fn: CompileFn = compile_many, base_glibc: str | None = None) -> Lock:
    """Resolve the stack for its Python and each of its platforms; one lock (platforms must agree).

    The manylinux tag follows the stack's `glibc`, else `base_glibc` (read from its base image), else the
    2.28 baseline."""
    upgrade = tuple(canonicalize_name(u) for u in upgrade)
    glibc = stack.glibc or base_glibc
    with git_tree(stack) as tree:
        parts = [(platform, _resolve_platform(stack, platform, previous, upgrade, compile_fn, tree, glibc))
                 for platform in stack.platforms]
        layers = tuple(x.name for x in plan_layers(stack, stack.platforms[0], tree))
    first_platform, part = parts[0]
    for platform, other in parts[1:]:
        a = {(p.name, p.version, p.url) for p in part.packages}
        b = {(p.name, p.version, p.url) for p in other.packages}
        if a != b:
            differ = sorted({x[0] for x in a ^ b})
            raise LockError(f"stack '{stack.name}': {first_platform} and {platform} resolve differently "
                            f"({', '.join(differ)}): one lock per platform is not supported yet")
        hashes = {p.name: set(p.hashes) for p in other.packages}
        part = replace(part, packages=tuple(replace(p, hashes=tuple(sorted(set(p.hashes) | hashes[p.name])))
                                            for p in part.packages))
    return Lock(stack=stack.name, stack_sha256=stack_input_hash(stack), resolved_at=utc_timestamp(),
                resolver=f"uv {part.uv_version} (uv pip compile --generate-hashes)", python=stack.python,
                platforms=stack.platforms, layers=layers,
                sglang_commit=stack.sglang.git.ref if stack.sglang.git else None,
                packages=with_edges(part.packages), indexes=part.indexes, unresolved=part.unresolved,
                notes=part.notes, python_platforms=tuple(python_platform(p, glibc) for p in stack.platforms))


def resolve_for_base(stack: Stack) -> Lock:
    """`resolve_stack` for the glibc the stack declares, else its local base image's (what `invoke lock`
    resolves for, so `stacks --check --resolve` and the lock agree on the platform tag)."""
    return resolve_stack(stack, base_glibc=None if stack.glibc else base_image_glibc(stack))


# ---- the task --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LockResult:
    path: Path
    lock: Lock
    previous: Lock | None
    seconds: float


def lock_stack(stacks_file: str | Path, stack_name: str, *, upgrade_packages: Sequence[str] = (),
               compile_fn: CompileFn = compile_many) -> LockResult:
    """Resolve and write `locks/NAME.txt`; an earlier lock is the starting point (its pins are kept)."""
    stack = load_matrix(stacks_file).get(stack_name)
    path = lock_path(stacks_file, stack_name)
    previous = read_lock(path) if path.exists() or path.is_symlink() else None  # a folder: one line
    # A read-only stacks folder or a full disk is one line now, not after minutes of resolving.
    require_writable(path, what="lock")
    wanted = [canonicalize_name(u) for u in upgrade_packages]
    if wanted and previous is None:
        raise ConfigError(f"--upgrade-package needs an existing lock ({path}): run invoke lock --stack {stack_name}",
                          stack=stack_name)
    for name in wanted:
        entry = previous.get(name) if previous else None
        if entry is None:
            raise ConfigError(f"--upgrade-package {name}: not in {path}", stack=stack_name)
        if not entry.hashed:
            raise ConfigError(f"--upgrade-package {name}: not resolved in {path} ({entry.unhashed})", stack=stack_name)
    start = time.monotonic()
    base_glibc = None if stack.glibc else base_image_glibc(stack)
    lock = resolve_stack(stack, previous=previous, upgrade=wanted, compile_fn=compile_fn, base_glibc=base_glibc)
    write_lock(path, lock, stacks_file=Path(stacks_file).name)
    return LockResult(path, lock, previous, round(time.monotonic() - start, 2))


def lock_command(stacks_file: str, stack_name: str, *, upgrade_packages: Sequence[str] = ()) -> int:
    console = make_console()
    result = lock_stack(stacks_file, stack_name, upgrade_packages=upgrade_packages)
    lock = result.lock
    console.print(f"[green]{stack_name}[/]: locked {len(lock.packages)} packages ({lock.hashed_count} hashed) "
                  f"for Python {lock.python} {' '.join(lock.platforms)} in {result.seconds:.1f} s -> {result.path}")
    for u in lock.unresolved:
        console.print(f"[yellow]{stack_name}[/]: not resolved: layer {u}", highlight=False)
    for note in lock.notes:
        console.print(f"[dim]{stack_name}: {note}[/]", highlight=False)
    if result.previous is not None:
        diff = snapshot_diff(lock_snapshot(result.previous, f"{result.path} (before)"),
                             lock_snapshot(lock, f"{result.path} (now)"))
        print_diff(diff, console)
    return 0
