"""Insert methods into a named class, structurally, and verify the result.

The run and the apply live here; `structure.py` holds the `ast` rules that apply and verify share, and
`files.py` the all-or-nothing writes. The file is parsed with `ast`; the methods go right after the last
line of the single top-level class of that name, with the indentation of its body. Nothing else in the
file changes, byte for byte (line endings, tabs, decorators, `EntryClass`, whatever follows the class).
All patches of one run are applied and verified in memory first and written only if every one of them
succeeded; the files (and the manifest) are then written as one step: each to a temporary file beside it
first, and renamed over the originals only when all of them are written, so a read-only folder, a full
disk or a signal leaves the tree as it was. Target files over `MAX_SOURCE_BYTES` are refused before they
are read.
"""

from __future__ import annotations

import ast
import builtins
import json
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from . import files, structure
from .errors import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDrift,
    PatchOutOfRange,
    PatchPreimageMismatch,
    PatchUnboundName,
    PatchUnreadable,
    PatchUsageError,
)
from .source import SourceError, SourceFile, indentation, line_ending
from .spec import MethodSource, PatchSpec, load_patch
from .versions import InvalidVersion, Version

APPLIED = "applied"  # the methods were inserted by this run
ALREADY_APPLIED = "already-applied"  # an earlier run inserted them; nothing changed
ALREADY_UPSTREAM = "already-upstream"  # SGLang itself has them; nothing changed, retire the patch
VERIFIED = "verified"  # `verify` without a manifest: the structure is right
POLICIES = ("notice", "error")


@dataclass(frozen=True)
class PatchResult:
    id: str
    file: str
    class_name: str
    methods: tuple[str, ...]
    status: str
    sha256_before: str
    sha256_after: str
    sglang_version: str | None
    inserted: tuple[str, ...] = ()
    upstream_methods: tuple[str, ...] = ()
    notice: str = ""

    def to_manifest(self) -> dict:
        return {
            "id": self.id,
            "file": self.file,
            "class": self.class_name,
            "methods": list(self.methods),
            "status": self.status,
            "sha256_before": self.sha256_before,
            "sha256_after": self.sha256_after,
            "sglang_version": self.sglang_version,
            "inserted": list(self.inserted),
            "upstream_methods": list(self.upstream_methods),
        }


@dataclass
class _Run:
    """The files of one run, as they were at the start and as patched so far (in memory)."""

    root: Path
    originals: dict[str, SourceFile] = field(default_factory=dict)
    current: dict[str, SourceFile] = field(default_factory=dict)
    owners: dict[str, PatchSpec] = field(default_factory=dict)  # the first patch of each file, for errors

    def load(self, spec: PatchSpec) -> SourceFile:
        if spec.file not in self.current:
            path = self.root / spec.file
            if not path.is_file():
                raise PatchDrift(
                    f"file is missing under {self.root}", patch=spec.id, file=spec.file, class_name=spec.class_name
                )
            try:
                src = SourceFile.read(path)
            except SourceError as exc:
                raise PatchUnreadable(str(exc), patch=spec.id, file=spec.file, class_name=spec.class_name) from None
            self.originals[spec.file] = self.current[spec.file] = src
            self.owners[spec.file] = spec
        return self.current[spec.file]


# ---- the public API --------------------------------------------------------------------------------


def apply_patches(
    root: Path | str,
    patches_dir: Path | str,
    ids: list[str] | tuple[str, ...],
    sglang_version: str | None = None,
    policy: str = "notice",
    manifest: Path | str | None = None,
) -> list[PatchResult]:
    """Apply and verify `ids` under `root` (the folder holding `sglang/`); all or nothing.

    `sglang_version` defaults to the one recorded in the tree's `sglang-*.dist-info`; when neither is
    known the version range is not checked. With `manifest`, what was applied is written there in the
    same step as the files. Raises a `PatchError` subclass on the first failure, before any file is
    written, or `PatchWriteError` when the files cannot be written (and then nothing was changed).
    """
    root, patches_dir = Path(root), Path(patches_dir)
    if policy not in POLICIES:
        raise PatchUsageError(f"unknown policy '{policy}' (expected one of: {', '.join(POLICIES)})")
    version = resolve_version(root, sglang_version)
    run = _Run(root)
    results = []
    for patch_id in _unique(ids):
        spec = load_patch(patches_dir, patch_id)
        results.append(_apply_one(spec, run, version, policy))
    finished = [_finish(r, run) for r in results]
    writes = [
        files.Write(root / rel, src.data, run.originals[rel].data, run.owners[rel])
        for rel, src in run.current.items()
        if src is not run.originals[rel]
    ]
    if manifest is not None:
        writes.append(files.Write(Path(manifest), _manifest_bytes(finished), None, None))
    files.write_all(writes)
    return finished


def verify_patches(
    root: Path | str, patches_dir: Path | str, ids: list[str] | tuple[str, ...], manifest: list[dict] | None = None
) -> list[PatchResult]:
    """Verify that `ids` are in place under `root`; with a manifest, also that nothing changed since."""
    root, patches_dir = Path(root), Path(patches_dir)
    entries = {e.get("id"): e for e in manifest or []}
    run = _Run(root)
    results = []
    for patch_id in _unique(ids):
        spec = load_patch(patches_dir, patch_id)
        src = run.load(spec)
        entry = entries.get(patch_id)
        if manifest is not None and entry is None:
            raise structure.verify_error(spec, "not in the manifest: was it applied?")
        identical = set()
        if entry is not None:
            if entry.get("file") != spec.file:
                raise structure.verify_error(spec, f"the manifest records file '{entry.get('file')}'")
            if src.sha256 != entry.get("sha256_after"):
                raise structure.verify_error(
                    spec,
                    f"sha256 {src.sha256} is not {entry.get('sha256_after')} recorded "
                    "in the manifest: the file changed after patching",
                )
            identical = set(entry.get("inserted") or [])
        structure.verify(spec, src, identical)
        status = entry.get("status", VERIFIED) if entry else VERIFIED
        results.append(
            PatchResult(
                spec.id,
                spec.file,
                spec.class_name,
                spec.method_names,
                status,
                (entry or {}).get("sha256_before", src.sha256),
                src.sha256,
                (entry or {}).get("sglang_version"),
                tuple((entry or {}).get("inserted") or ()),
                tuple((entry or {}).get("upstream_methods") or ()),
            )
        )
    return results


def detect_sglang_version(root: Path | str) -> str | None:
    """The version in `root/sglang-*.dist-info/METADATA` (an unpacked wheel or a site-packages)."""
    metas = sorted(Path(root).glob("sglang-*.dist-info/METADATA"))
    if len(metas) != 1:
        return None
    try:
        text = metas[0].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchUsageError(f"{metas[0]}: cannot read the installed version: {exc}") from None
    return Parser().parsestr(text, headersonly=True).get("Version")


def resolve_version(root: Path, given: str | None) -> str | None:
    found = detect_sglang_version(root)
    for text in (given, found):
        if text is not None:
            try:
                Version.parse(text)
            except InvalidVersion as exc:
                raise PatchUsageError(f"sglang version: {exc}") from None
    if given and found and Version.parse(given) != Version.parse(found):
        raise PatchUsageError(f"--sglang-version {given} does not match sglang {found} installed under {root}")
    return given or found


def read_manifest(path: Path | str) -> list[dict]:
    if Path(path).exists() and not Path(path).is_file():  # a FIFO would hang the read, a device never end
        raise PatchUsageError(f"manifest {path}: not a regular file")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except RecursionError:  # nested thousands deep: no ValueError, and no manifest either
        raise PatchUsageError(f"manifest {path}: nested too deep to be a manifest") from None
    except (OSError, ValueError) as exc:
        raise PatchUsageError(f"manifest {path}: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise PatchUsageError(f"manifest {path}: expected a JSON list of objects")
    return data


def write_manifest(path: Path | str, results: list[PatchResult]) -> None:
    files.write_all([files.Write(Path(path), _manifest_bytes(results), None, None)])


def _manifest_bytes(results: list[PatchResult]) -> bytes:
    return (json.dumps([r.to_manifest() for r in results], indent=2) + "\n").encode("utf-8")


# ---- applying one patch ----------------------------------------------------------------------------


# long: one patch's apply, step by step over shared state (tree, class, insertions); split, each step would take it all
def _apply_one(spec: PatchSpec, run: _Run, version: str | None, policy: str) -> PatchResult:
    in_range = version is None or spec.applies(version)
    if not in_range and not (run.root / spec.file).is_file():
        raise structure.patch_error(
            PatchOutOfRange, spec, f"sglang {version} is outside applies_to '{spec.applies_to}' and has no such file"
        )
    src = run.load(spec)
    tree = structure.parse(spec, src, PatchDrift)
    cls = structure.the_class(spec, tree, PatchDrift)
    structure.no_module_level_defs(spec, tree)

    to_insert: list[MethodSource] = []
    identical: list[str] = []
    differing: list[str] = []  # present with another body but a compatible signature: upstream's
    for method in spec.methods:
        node = structure.member(spec, cls, method.name, PatchConflict)
        if node is None:
            to_insert.append(method)
        elif structure.same_code(node, method.node):
            identical.append(method.name)
        elif structure.compatible(node, method.node):
            differing.append(method.name)
        else:
            raise structure.patch_error(
                PatchConflict,
                spec,
                f"method '{method.name}' is already in the class (line {node.lineno}) with a "
                f"different body and an incompatible signature {structure.signature(node)}, "
                f"patch has {structure.signature(method.node)}",
            )

    # Methods identical to ours were put there by an earlier run, unless this SGLang cannot need the
    # patch (outside its range) or the file is exactly what pip installed: then upstream has them.
    upstream = list(differing)
    if identical and (not in_range or files.matches_record(run.root, spec.file, run.originals[spec.file])):
        upstream += identical
        identical = []

    if to_insert and not in_range:
        missing = ", ".join(m.name for m in to_insert)
        raise structure.patch_error(
            PatchOutOfRange,
            spec,
            f"sglang {version} is outside applies_to '{spec.applies_to}' and the class lacks {missing}",
        )
    if upstream and policy == "error":
        fixed = f", fixed upstream in {spec.fixed_in}" if spec.fixed_in else ""
        raise structure.patch_error(
            PatchAlreadyUpstream,
            spec,
            f"sglang {version or '(unknown version)'} already has {', '.join(upstream)}{fixed}: "
            f"retire this patch from the stack (policy on_upstream=error)",
        )

    before = src.sha256
    if to_insert:
        _check_names(spec, tree, to_insert)
        _check_preimage(spec, run, src, version)
        src = src.with_text(_insert(spec, src, cls, to_insert))
        structure.verify(spec, src, {m.name for m in to_insert} | set(identical))
        declared_before, declared_after = (spec.declared_hash("before", version), spec.declared_hash("after", version))
        # _check_preimage passed, so a declared pre-image matched: the result is known exactly.
        if declared_before and declared_after and not src.hash_matches(declared_after):
            raise structure.verify_error(
                spec, f"sha256 after patching {src.sha256} is not the declared {declared_after}")
        run.current[spec.file] = src
        status = APPLIED
    else:
        structure.verify(spec, src, set(identical))
        status = ALREADY_UPSTREAM if upstream else ALREADY_APPLIED

    notice = ""
    if upstream:
        fixed = f" (fixed in {spec.fixed_in})" if spec.fixed_in else ""
        notice = (
            f"patch '{spec.id}': sglang {version or '(unknown version)'} already has "
            f"{', '.join(upstream)} upstream{fixed}; skipped them, the patch can be retired"
            + (f": {spec.retire}" if spec.retire else "")
        )
    return PatchResult(
        spec.id,
        spec.file,
        spec.class_name,
        spec.method_names,
        status,
        before,
        "",
        version,
        tuple(m.name for m in to_insert),
        tuple(upstream),
        notice,
    )


def _finish(result: PatchResult, run: _Run) -> PatchResult:
    """Record the hashes of the file at the start and at the end of the run (what is on disk)."""
    return PatchResult(
        **{
            **result.__dict__,
            "sha256_before": run.originals[result.file].sha256,
            "sha256_after": run.current[result.file].sha256,
        }
    )


def _insert(spec: PatchSpec, src: SourceFile, cls: ast.ClassDef, methods: list[MethodSource]) -> str:
    lines = src.lines
    first = cls.body[0]
    if first.lineno == cls.lineno:
        raise structure.patch_error(
            PatchDrift,
            spec,
            f"the class body is on the class line ({cls.lineno}): no indentation to insert methods with",
        )
    unit = indentation(lines[first.lineno - 1])
    end = cls.end_lineno or cls.lineno
    eol = line_ending(lines[end - 1]) or src.default_line_ending()
    head = lines[:end]
    if not line_ending(head[-1]):
        head[-1] += eol
    block = []
    for method in methods:
        block.append(eol)
        block += [
            _reindent(line, method.indent_unit, unit, verbatim) + eol if line.strip() else eol
            for line, verbatim in zip(method.lines, method.in_string, strict=True)
        ]
    return "".join(head) + "".join(block) + "".join(lines[end:])


def _reindent(line: str, old_unit: str, new_unit: str, verbatim: bool) -> str:
    if verbatim or old_unit == new_unit:
        return line
    rest, levels = line, 0
    while rest.startswith(old_unit):
        rest, levels = rest[len(old_unit) :], levels + 1
    return new_unit * levels + rest


def _check_preimage(spec: PatchSpec, run: _Run, src: SourceFile, version: str | None) -> None:
    declared = spec.declared_hash("before", version)
    if declared and not src.hash_matches(declared):
        raise structure.patch_error(
            PatchPreimageMismatch,
            spec,
            f"sha256 {src.sha256} is not the declared pre-image {declared}"
            + (f" for sglang {version}" if version else ""),
        )
    recorded = files.record_hash(run.root, spec.file)
    original = run.originals[spec.file]
    if recorded and not original.hash_matches(recorded[0]):
        raise structure.patch_error(
            PatchPreimageMismatch,
            spec,
            f"sha256 {original.sha256} differs from {recorded[0]} recorded in {recorded[1]}: "
            "the file was changed after pip installed it",
        )


def _check_names(spec: PatchSpec, tree: ast.Module, methods: list[MethodSource]) -> None:
    """Names a method uses must exist in the target module, or its `def` fails at import time."""
    bound = structure.module_bindings(tree)
    if bound is None:  # `from x import *`: cannot tell
        return
    for method in methods:
        missing = sorted(structure.free_names(method.node) - bound - set(dir(builtins)) - {"__class__"})
        if missing:
            raise structure.patch_error(
                PatchUnboundName,
                spec,
                f"method '{method.name}' uses {', '.join(missing)}, which the module does not import or define",
            )


def _unique(ids) -> list[str]:
    return list(dict.fromkeys(ids))


