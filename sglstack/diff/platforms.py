"""`invoke diff` where either side is an index of several platforms (pure): each platform compared with the same
platform of the other side, and the platforms only one side has said as added or removed.

A side that is one image is a side of one platform: the one its config names (a registry's, or the engine's for a
local image), a lock's own; against an index it is compared with that platform's image, and refused when the index
has none. A build record names none: it is compared with the other side's first platform, and said so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console

from ..core.console import plain
from ..core.errors import ConfigError
from .compare import Snapshot, StackDiff, diff_to_json, print_diff, snapshot_diff


@dataclass(frozen=True)
class Side:
    """One argument of `invoke diff`: its snapshot per platform (key None: a platform nothing names)."""

    ref: str
    platforms: Mapping[str | None, Snapshot]
    index: bool


@dataclass(frozen=True)
class IndexDiff:
    a: str
    b: str
    added: tuple[str, ...]  # platforms only B has
    removed: tuple[str, ...]  # platforms only A has
    platforms: tuple[tuple[str, StackDiff], ...]  # each platform both have, A's order
    notes: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed) and all(d.identical for _, d in self.platforms)


def _named(side: Side, other: Side, notes: list[str], letter: str) -> dict[str, Snapshot]:
    """The side's snapshots by platform; a platform nothing names takes the other side's first one."""
    if None not in side.platforms:
        return {str(p): s for p, s in side.platforms.items()}
    first = next((p for p in other.platforms if p is not None), None)
    if first is None:
        return {"": side.platforms[None]}
    notes.append(f"{letter} ({side.ref}) names no platform (a local image, a build record or a lock): compared "
                 f"with {first}, the other side's first")
    return {first: side.platforms[None]}


def _require_platform(side: Side, other: Side, letter: str, other_letter: str) -> None:
    """A one-platform side against an index without that platform: nothing to compare, said in one line (a
    comparison with another platform's image would show every package as changed)."""
    if side.index or not other.index:
        return
    platform = next(iter(side.platforms), None)
    if platform is not None and platform not in other.platforms:
        raise ConfigError(f"diff: {letter} ({plain(side.ref)}) is {platform}, and {other_letter} "
                          f"({plain(other.ref)}) is an index without {platform} (it has "
                          f"{' '.join(str(p) for p in other.platforms) or 'no platform'}): nothing to compare")


def index_diff(a: Side, b: Side) -> IndexDiff:
    _require_platform(a, b, "A", "B")
    _require_platform(b, a, "B", "A")
    notes: list[str] = []
    left, right = _named(a, b, notes, "A"), _named(b, a, notes, "B")
    both = tuple((p, snapshot_diff(left[p], right[p])) for p in left if p in right)
    return IndexDiff(a.ref, b.ref, added=tuple(p for p in right if p not in left),
                     removed=tuple(p for p in left if p not in right), platforms=both, notes=tuple(notes))


def single_diff(a: Side, b: Side) -> StackDiff:
    """Two sides of one image (or lock, or record) each, compared as they are; sides of two platforms (a local
    amd64 image and an arm64 one) are said to be, as two locks of two platforms are."""
    (pa, sa), (pb, sb) = next(iter(a.platforms.items())), next(iter(b.platforms.items()))
    if pa and pb and pa != pb:
        sa, sb = replace(sa, platform=pa), replace(sb, platform=pb)
    return snapshot_diff(sa, sb)


def index_diff_to_json(diff: IndexDiff) -> dict[str, Any]:
    return {"a": diff.a, "b": diff.b, "index": True, "identical": diff.identical, "added_platforms": list(diff.added),
            "removed_platforms": list(diff.removed), "notes": list(diff.notes),
            "platforms": [{**diff_to_json(d), "platform": p} for p, d in diff.platforms]}


def print_index_diff(diff: IndexDiff, console: Console) -> None:
    console.print(f"A = {plain(diff.a)}\nB = {plain(diff.b)}", highlight=False)
    for platform in diff.added:
        console.print(f"platform {platform}: added (only B has it)", highlight=False)
    for platform in diff.removed:
        console.print(f"platform {platform}: removed (only A has it)", highlight=False)
    for platform, changes in diff.platforms:
        console.print(f"platform {platform}:", highlight=False)
        print_diff(changes, console)
    for line in diff.notes:
        console.print(plain(line), highlight=False)
