"""A patch edit that changes only function bodies the verified import never ran: the server part's outcome kept
(pure: no engine, no files).

The server part (the import closure, then the server's --help and argv) reads every file of the image, so an
edit of a patched SGLang file runs it again: one import of SGLang and torch. What that import did depends only
on the code it ran (`inimage/incontainer/codemap.py` says how that is compared, in the image). So a server
pass keeps, beside its result, what a later edit is compared against (its basis): the content keys of the small
layers' files it read, and the code maps of their `.py` files and the listed paths of their RECORDs, as the
verified import saw them. A new image whose server inputs differ from a pass's only in such files (a `.py`, its
`.pyc`, a RECORD) is sent to the image with that pass's maps; if every edit is confined to bodies the import
never started, the pass's result is kept, with those files scanned again; else the whole part runs in the same
container. Anything else (another layer, a file added or removed, the tools) runs the part as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .verifyplan import CONTENT, CheckSpec, Pass, fingerprint

BASIS = "body_edit_basis"  # the key of a server pass's result that holds its basis
BODY_EDITS_IN_IMAGE = "/tmp/sglstack-body-edits.json"  # where the request is put for `importcheck.py --body-edits`
RECORD_SUFFIX = ".dist-info/RECORD"
NOT_WATCHED = ("/opt/sglstack/",)  # sglstack's own tools and manifests: the check's program, never an edit's
PASSES_TRIED = 3  # the newest server passes with a basis a new image is compared with


def _watched(spec: CheckSpec, path: str, kind: str, owner: str) -> bool:
    return owner.startswith(CONTENT) and not path.startswith(NOT_WATCHED) and spec.scope.selects(path, kind)


def watched_files(spec: CheckSpec, files: Mapping[str, tuple[str, str]] | None) -> tuple[list[str], list[str]]:
    """The `.py` files and RECORDs the server part keeps code maps and listed paths of: those of the small
    layers (keyed by content: the patch overlay and what is written after it), in its scope."""
    py, records = [], []
    for path, (kind, owner) in sorted((files or {}).items()):
        if _watched(spec, path, kind, owner):
            if path.endswith(".py"):
                py.append(path)
            elif path.endswith(RECORD_SUFFIX):
                records.append(path)
    return py, records


def basis(spec: CheckSpec, files: Mapping[str, tuple[str, str]], code_maps: Mapping[str, Any],
          record_digests: Mapping[str, str]) -> dict[str, Any]:
    return {"content": {p: o for p, (k, o) in sorted(files.items()) if _watched(spec, p, k, o)},
            "code_maps": dict(code_maps), "record_digests": dict(record_digests)}


@dataclass(frozen=True)
class BodyEditPlan:
    """The pass whose outcome may be kept, the files changed since, and what the image is asked to compare."""

    kept: Pass
    changed: tuple[str, ...]
    request: dict[str, Any]

    def payload(self) -> bytes:
        return json.dumps(self.request, sort_keys=True).encode()


def source_of_bytecode(pyc: str) -> str | None:
    """`.../__pycache__/llama.cpython-311.pyc` -> `.../llama.py`."""
    folder, _, name = pyc.rpartition("/__pycache__/")
    return f"{folder}/{name.split('.', 1)[0]}.py" if folder and name.endswith(".pyc") else None


def _request(changed: Sequence[str], kept: Mapping[str, Any]) -> dict[str, Any] | None:
    maps, digests = kept.get("code_maps") or {}, kept.get("record_digests") or {}
    code: dict[str, Any] = {}
    bytecode: dict[str, str] = {}
    records: dict[str, str] = {}
    for path in changed:
        source = source_of_bytecode(path)
        if path.endswith(".py") and isinstance(maps.get(path), dict) and "code" in maps[path]:
            code[path] = maps[path]
        elif path.endswith(RECORD_SUFFIX) and isinstance(digests.get(path), str):
            records[path] = digests[path]
        elif source is not None and source in changed and source in maps:
            bytecode[path] = source
        else:
            return None
    return {"code": code, "bytecode": bytecode, "records": records} if code else None


def body_edit_plan(spec: CheckSpec, diff_ids: Sequence[str], files: Mapping[str, tuple[str, str]] | None,
                   passes: Sequence[Pass]) -> BodyEditPlan | None:
    """The newest pass of `spec` whose inputs differ from `files` only in watched files that a body edit may
    change (each `.py` with its code map, its `.pyc`, a RECORD), with the request for the image; else None."""
    if files is None:
        return None
    tried = 0
    for kept in reversed(passes):
        found = kept.result.get(BASIS) if kept.check == spec.name else None
        if not isinstance(found, dict) or not isinstance(found.get("content"), dict):
            continue
        tried += 1
        if tried > PASSES_TRIED:
            break
        content: dict[str, str] = found["content"]
        changed = tuple(sorted(p for p, o in content.items() if p in files and files[p][1] != o))
        request = _request(changed, found) if changed else None
        if request is None:
            continue
        shifted = {**files, **{p: (files[p][0], content[p]) for p in changed}}
        if fingerprint(spec, diff_ids, shifted) == kept.fingerprint:
            return BodyEditPlan(kept, changed, request)
    return None


def kept_server_report(kept: Mapping[str, Any], fresh: Mapping[str, Any]) -> dict[str, Any]:
    """The kept pass's server report, its import closure's findings in the changed files replaced by the new
    scan of them (`fresh`: what the image answered)."""
    closure = dict(kept.get("import_closure") or {})
    new = dict(fresh.get("import_closure") or {})
    changed = set((new.get("body_edits") or {}).get("changed") or {})
    closure["unprovided"] = [u for u in closure.get("unprovided") or [] if u.get("importer") not in changed] + \
        list(new.get("unprovided") or [])
    closure.update({k: new.get(k) for k in ("body_edits", "facts", "seconds")})
    for key in ("seconds_imports", "seconds_scan"):  # nothing was imported this time
        closure.pop(key, None)
    report = {k: v for k, v in kept.items() if k != BASIS}
    return {**report, "import_closure": closure}


NOT_IMPORTED = "<not imported>"  # codemap.NOT_IMPORTED: a file the verified import did not run changed


def kept_why(plan: BodyEditPlan, body_edits: Mapping[str, Any]) -> str:
    bodies = sorted({f"{path.rsplit('/', 1)[-1]}: " + ("not imported by it, the same EntryClass" if name == NOT_IMPORTED
                                                       else name)
                     for path, names in (body_edits.get("changed") or {}).items() for name in names})
    return (f"reused: passed in image {plan.kept.image_id.removeprefix('sha256:')[:12]} at {plan.kept.verified_at}; "
            f"since then only code its import never ran changed ({'; '.join(bodies) or 'no code'}), compared in "
            f"the image; {len(plan.request['code'])} file(s) scanned again")
