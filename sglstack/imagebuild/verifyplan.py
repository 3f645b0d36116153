"""Which checks of a built image run again and which are reused (pure: no engine, no files).

What an image holds is decided by its layers, each named by its diff id (the sha256 of the layer's content).
A check reads some of the image's files (its scope), and each of those files is exactly what the topmost layer
holding it put there. So a check's fingerprint is its parameters plus, for every path in its scope, its kind and
the diff id of the layer it comes from: the same fingerprint is the same input, and a check that passed on it
passes again. A file changed in any way (a byte of a shared object in a layer rebuilt by hand, a later layer
copying over it, a deletion) comes from another layer, so the fingerprint moves and the check runs.

A layer that holds few and small files (the patch overlay, the tools, the manifests) is keyed by its files'
content instead (`by_content`): rebuilt after a change below it, such a layer gets another diff id though its
files are byte for byte the same (a tar also records the mtimes of the folders it writes into), and a check that
reads them (the tools are the shared-library and JIT checks' own programs) would run again for nothing. A file
keyed by content is named by the sha256 of its kind, mode, owner and bytes (a link: its target): what a check
can read of it. Python's bytecode checks go by the source's bytes where a .pyc is stale, so an mtime alone
cannot change a verdict.

Where the layers cannot be listed (a remote engine, another storage driver), the fingerprint is every diff id in
order: only the very same image reuses. `--full-verify` runs everything.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Kinds of a layer's entries, as the layer adapter reads them.
FILE, ELF, LINK, WHITEOUT, OPAQUE = "f", "e", "l", "w", "o"
PRESENT = (FILE, ELF, LINK)


@dataclass(frozen=True)
class LayerFiles:
    """What one layer holds: its diff id and {absolute path: kind} (dirs only when opaque)."""

    diff_id: str
    entries: Mapping[str, str]


def merged(layers: Sequence[LayerFiles]) -> dict[str, tuple[str, str]]:
    """{path: (kind, diff id of the layer it comes from)} of the image, `layers` bottom first.

    A whiteout deletes the path (and all below it) of the layers beneath; an opaque folder hides what the
    layers beneath have under it; a layer's own entries then land on top."""
    out: dict[str, tuple[str, str]] = {}
    for layer in layers:
        gone = {p for p, k in layer.entries.items() if k == WHITEOUT}
        hidden = {p for p, k in layer.entries.items() if k == OPAQUE}
        if gone or hidden:
            for path in list(out):
                parts = path.split("/")
                ancestors = {"/".join(parts[:i]) for i in range(1, len(parts))}
                if path in gone or ancestors & (gone | hidden):
                    del out[path]
        for path, kind in layer.entries.items():
            if kind in PRESENT:
                out[path] = (kind, layer.diff_id)
    return out


CONTENT = "content-sha256:"  # an owner that names a file's content, not its layer (never a diff id's prefix)


def by_content(files: Mapping[str, tuple[str, str]],
               contents: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, str]]:
    """`files` with the owner of each file that `contents` ({diff id: {path: sha256 hex}}) keys by its content
    replaced by CONTENT + that sha256: two images whose such files have the same bytes fingerprint alike."""
    out = dict(files)
    for path, (kind, diff_id) in files.items():
        digest = contents.get(diff_id, {}).get(path)
        if digest is not None:
            out[path] = (kind, CONTENT + digest)
    return out


@dataclass(frozen=True)
class Scope:
    """The files a check reads: exactly `paths`; or every path of `kinds`, under `under` or whose name holds
    `name_part`; or (`everything`) every path but `outside` ones (a file, or all under a folder). Bytecode under
    `bytecode_under` is not read as such: Python checks it against its source (in scope) and makes it again."""

    paths: frozenset[str] | None = None
    kinds: frozenset[str] = frozenset()
    under: tuple[str, ...] = ()
    name_part: str | None = None
    everything: bool = False
    outside: tuple[str, ...] = ()
    bytecode_under: tuple[str, ...] = ()

    def selects(self, path: str, kind: str) -> bool:
        if self.paths is not None:
            return path in self.paths
        if path.endswith(".pyc") and path.startswith(_folders(self.bytecode_under)):
            return False
        if self.everything:
            return not (path in self.outside or path.startswith(_folders(self.outside)))
        return (kind in self.kinds or path.startswith(_folders(self.under))
                or (self.name_part is not None and self.name_part in path.rsplit("/", 1)[-1]))


@functools.cache
def _folders(paths: tuple[str, ...]) -> tuple[str, ...]:
    """What a path under one of `paths` (a folder, or all below it) starts with: one str.startswith, as a check's
    scope is asked of every file of an image (some 100,000)."""
    return tuple(p.rstrip("/") + "/" for p in paths)


@dataclass(frozen=True)
class CheckSpec:
    name: str
    params: Mapping[str, Any]  # every other input of its verdict (argv, policy, environment, tool release)
    scope: Scope


@dataclass(frozen=True)
class Decision:
    check: str
    run: bool
    why: str
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "ran": self.run, "why": self.why, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class Pass:
    """A check that passed before, as the reuse store keeps it."""

    check: str
    fingerprint: str
    image_id: str
    layers: tuple[str, ...]
    verified_at: str
    result: Mapping[str, Any] = field(default_factory=dict)


def _owners(spec: CheckSpec, files: Mapping[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    if spec.scope.paths is not None:
        return [(p, *files.get(p, ("-", "-"))) for p in sorted(spec.scope.paths)]
    return [(p, k, d) for p, (k, d) in sorted(files.items()) if spec.scope.selects(p, k)]


def fingerprint(spec: CheckSpec, diff_ids: Sequence[str], files: Mapping[str, tuple[str, str]] | None) -> str:
    digest = hashlib.sha256(json.dumps({"check": spec.name, "params": spec.params}, sort_keys=True).encode())
    if files is None:
        digest.update(("layers\n" + "\n".join(diff_ids)).encode())
    else:
        for path, kind, diff_id in _owners(spec, files):
            digest.update(f"{path}\0{kind}\0{diff_id}\n".encode())
    return "sha256:" + digest.hexdigest()


def _short(diff_id: str) -> str:
    return diff_id.removeprefix("sha256:")[:12]


def _why_run(spec: CheckSpec, diff_ids: Sequence[str], files: Mapping[str, tuple[str, str]] | None,
             earlier: Sequence[Pass]) -> str:
    if not earlier:
        return "ran: no earlier pass of this check"
    known = {d for p in earlier for d in p.layers}
    if files is None:
        new = [d for d in diff_ids if d not in known]
        return ("ran: the image's layers cannot be listed on this engine, so only the same image reuses"
                + (f" (new layers: {', '.join(_short(d) for d in new)})" if new else ""))
    owners = {d for _, _, d in _owners(spec, files)}
    new = sorted(d for d in owners if d != "-" and not d.startswith(CONTENT) and d not in known)
    if new:
        return f"ran: its files come from layers not verified before: {', '.join(_short(d) for d in new)}"
    if any(d.startswith(CONTENT) for d in owners):
        return ("ran: its inputs differ from every earlier pass (files added, removed or moved between verified "
                "layers, or other bytes in a small layer, keyed by its files' content)")
    return "ran: its inputs differ from every earlier pass (files added, removed or moved between verified layers)"


def plan(specs: Iterable[CheckSpec], diff_ids: Sequence[str], files: Mapping[str, tuple[str, str]] | None,
         passes: Sequence[Pass], *, full: bool = False) -> list[Decision]:
    """For each check: run it or reuse a pass on the same fingerprint, and why."""
    by_print = {p.fingerprint: p for p in passes}
    out = []
    for spec in specs:
        print_ = fingerprint(spec, diff_ids, files)
        hit = by_print.get(print_)
        if full:
            out.append(Decision(spec.name, True, "ran: --full-verify", print_))
        elif hit is not None and hit.check == spec.name:
            out.append(Decision(spec.name, False, "reused: passed on the same files (by layer; a small layer's by "
                                f"content) in image {_short(hit.image_id)} at {hit.verified_at}", print_))
        else:
            earlier = [p for p in passes if p.check == spec.name]
            out.append(Decision(spec.name, True, _why_run(spec, diff_ids, files, earlier), print_))
    return out
