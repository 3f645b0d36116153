"""A lock's entries from the resolver's answers: hashed or not (and why), which layer an unreachable index or
URL belongs to, the closure a layer keeps, and the one line of a resolution conflict. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..adapters.uv import (
    ResolutionConflict,
    ResolvedPackage,
    ResolveRequest,
    SourceUnreachable,
)
from ..config.platforms import unpacks_wheels
from ..config.schema import Stack
from ..lockfile.model import LockedPackage, UnresolvedLayer
from .plan import (
    SGLANG,
    GitTree,
    LockError,
    PlannedLayer,
)


def public_pin(requirement: str) -> str | None:
    """`torch==2.9.1+cu130` -> `torch==2.9.1`: the same release as the default index publishes it."""
    req = Requirement(requirement)
    specs = list(req.specifier)
    if req.url or len(specs) != 1 or specs[0].operator != "==":
        return None
    return f"{req.name}=={Version(specs[0].version).public}"


def owner_of(url: str, layers: Iterable[PlannedLayer]) -> PlannedLayer | None:
    """The layer whose index or direct URL `url` belongs to."""
    for layer in layers:
        if layer.index_url and url.rstrip("/").startswith(layer.index_url.rstrip("/")):
            return layer
        for text in layer.requirements:
            req = Requirement(text)
            if req.url and url.split("#")[0] == req.url.split("#")[0]:
                return layer
    return None


def unreachable_reason(exc: SourceUnreachable, layer: PlannedLayer | None = None) -> str:
    """'index URL unreachable (cause)' for a layer's index, 'URL unreachable (cause)' for a direct URL."""
    where = exc.url
    if layer and layer.index_url and exc.url.startswith(layer.index_url.rstrip("/")):
        where = f"index {layer.index_url}"
    return f"{where} unreachable: {exc.cause}" if exc.cause else f"{where} unreachable"


@dataclass(frozen=True)
class PlatformPart:
    """What one platform's resolution found: entries by layer, and what stayed out of reach."""

    packages: tuple[LockedPackage, ...]
    unresolved: tuple[UnresolvedLayer, ...]
    notes: tuple[str, ...]
    indexes: tuple[str, ...]
    uv_version: str


def no_deps_request(stack: Stack, layer: PlannedLayer, target: str) -> ResolveRequest:
    return ResolveRequest(requirements=layer.requirements, python_version=stack.python, python_platform=target,
                          no_deps=True, only_binary=unpacks_wheels(stack.whole_platforms),
                          default_index=layer.index_url if layer.exclusive_index else None,
                          indexes=(layer.index_url,) if layer.index_url and not layer.exclusive_index else (),
                          logins=stack.credentials)


def closure(roots: Iterable[str], children: dict[str, set[str]], allowed: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in allowed]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [c for c in children.get(name, ()) if c in allowed and c not in seen]
    return seen


def pin_version(stack: Stack, name: str, requirement: str) -> str:
    req = Requirement(requirement)
    if not req.url:
        return next(iter(req.specifier)).version
    return stack.pins().get(name, "")


def hashed_entries(stack: Stack, layer: PlannedLayer, resolved: Sequence[ResolvedPackage], *, required_by: bool = True,
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


def unhashed_entries(stack: Stack, layer: PlannedLayer, reason: str,
                     tree: GitTree | None = None) -> list[LockedPackage]:
    out = []
    for text in layer.requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if tree and name == SGLANG:  # never the exported tree's temporary path
            out.append(LockedPackage(name=name, version=tree.version, layer=SGLANG,
                                     unhashed=f"{tree.reason}; {reason}"))
            continue
        out.append(LockedPackage(name=name, version=pin_version(stack, name, text),
                                 layer=SGLANG if name == "sglang" else layer.name, url=req.url, unhashed=reason))
    return out


def conflict_message(conflict: ResolutionConflict) -> str:
    """Both sides of the conflict, then uv's own reason: the sides alone hide a cause that is no requirement
    of anyone ("sglang==0.5.23 has no wheels with a matching platform tag ... available for manylinux_2_34")."""
    sides = "; ".join(str(s) for s in conflict.sides)
    reason = " ".join(conflict.explanation.split())
    return f"{sides} (uv: {reason})" if sides and reason else sides or reason
