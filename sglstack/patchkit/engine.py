"""Insert methods into a named class, structurally, and verify the result.

The file is parsed with `ast`; the methods go right after the last line of the single top-level class
of that name, with the indentation of its body. Nothing else in the file changes, byte for byte
(line endings, tabs, decorators, `EntryClass`, whatever follows the class). All patches of one run are
applied and verified in memory first and written only if every one of them succeeded; the files (and
the manifest) are then written as one step: each to a temporary file beside it first, and renamed over
the originals only when all of them are written, so a read-only folder, a full disk or a signal leaves
the tree as it was. Target files over `MAX_SOURCE_BYTES` are refused before they are read.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import csv
import json
import os
import tempfile
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from .errors import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDrift,
    PatchError,
    PatchModuleLevelDef,
    PatchOutOfRange,
    PatchPreimageMismatch,
    PatchUnboundName,
    PatchUnreadable,
    PatchUsageError,
    PatchVerifyError,
    PatchWriteError,
)
from .source import SourceError, SourceFile, indentation, line_ending
from .spec import MethodSource, PatchSpec, bound_names, load_patch
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
        _Write(root / rel, src.data, run.originals[rel].data, run.owners[rel])
        for rel, src in run.current.items()
        if src is not run.originals[rel]
    ]
    if manifest is not None:
        writes.append(_Write(Path(manifest), _manifest_bytes(finished), None, None))
    _write_all(writes)
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
            raise _verify_error(spec, "not in the manifest: was it applied?")
        identical = set()
        if entry is not None:
            if entry.get("file") != spec.file:
                raise _verify_error(spec, f"the manifest records file '{entry.get('file')}'")
            if src.sha256 != entry.get("sha256_after"):
                raise _verify_error(
                    spec,
                    f"sha256 {src.sha256} is not {entry.get('sha256_after')} recorded "
                    "in the manifest: the file changed after patching",
                )
            identical = set(entry.get("inserted") or [])
        _verify(spec, src, identical)
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
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PatchUsageError(f"manifest {path}: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise PatchUsageError(f"manifest {path}: expected a JSON list of objects")
    return data


def write_manifest(path: Path | str, results: list[PatchResult]) -> None:
    _write_all([_Write(Path(path), _manifest_bytes(results), None, None)])


def _manifest_bytes(results: list[PatchResult]) -> bytes:
    return (json.dumps([r.to_manifest() for r in results], indent=2) + "\n").encode("utf-8")


# ---- applying one patch ----------------------------------------------------------------------------


def _apply_one(spec: PatchSpec, run: _Run, version: str | None, policy: str) -> PatchResult:
    in_range = version is None or spec.applies(version)
    if not in_range and not (run.root / spec.file).is_file():
        raise _error(
            PatchOutOfRange, spec, f"sglang {version} is outside applies_to '{spec.applies_to}' and has no such file"
        )
    src = run.load(spec)
    tree = _parse(spec, src, PatchDrift)
    cls = _the_class(spec, tree, PatchDrift)
    _no_module_level_defs(spec, tree)

    to_insert: list[MethodSource] = []
    identical: list[str] = []
    differing: list[str] = []  # present with another body but a compatible signature: upstream's
    for method in spec.methods:
        node = _member(spec, cls, method.name, PatchConflict)
        if node is None:
            to_insert.append(method)
        elif _same_code(node, method.node):
            identical.append(method.name)
        elif _compatible(node, method.node):
            differing.append(method.name)
        else:
            raise _error(
                PatchConflict,
                spec,
                f"method '{method.name}' is already in the class (line {node.lineno}) with a "
                f"different body and an incompatible signature {_signature(node)}, "
                f"patch has {_signature(method.node)}",
            )

    # Methods identical to ours were put there by an earlier run, unless this SGLang cannot need the
    # patch (outside its range) or the file is exactly what pip installed: then upstream has them.
    upstream = list(differing)
    if identical and (not in_range or _matches_record(run.root, spec.file, run.originals[spec.file])):
        upstream += identical
        identical = []

    if to_insert and not in_range:
        missing = ", ".join(m.name for m in to_insert)
        raise _error(
            PatchOutOfRange,
            spec,
            f"sglang {version} is outside applies_to '{spec.applies_to}' and the class lacks {missing}",
        )
    if upstream and policy == "error":
        fixed = f", fixed upstream in {spec.fixed_in}" if spec.fixed_in else ""
        raise _error(
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
        _verify(spec, src, {m.name for m in to_insert} | set(identical))
        declared_before, declared_after = (spec.declared_hash("before", version), spec.declared_hash("after", version))
        # _check_preimage passed, so a declared pre-image matched: the result is known exactly.
        if declared_before and declared_after and not src.hash_matches(declared_after):
            raise _verify_error(spec, f"sha256 after patching {src.sha256} is not the declared {declared_after}")
        run.current[spec.file] = src
        status = APPLIED
    else:
        _verify(spec, src, set(identical))
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
        raise _error(
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
        raise _error(
            PatchPreimageMismatch,
            spec,
            f"sha256 {src.sha256} is not the declared pre-image {declared}"
            + (f" for sglang {version}" if version else ""),
        )
    recorded = _record_hash(run.root, spec.file)
    original = run.originals[spec.file]
    if recorded and not original.hash_matches(recorded[0]):
        raise _error(
            PatchPreimageMismatch,
            spec,
            f"sha256 {original.sha256} differs from {recorded[0]} recorded in {recorded[1]}: "
            "the file was changed after pip installed it",
        )


def _check_names(spec: PatchSpec, tree: ast.Module, methods: list[MethodSource]) -> None:
    """Names a method uses must exist in the target module, or its `def` fails at import time."""
    bound = _module_bindings(tree)
    if bound is None:  # `from x import *`: cannot tell
        return
    for method in methods:
        missing = sorted(_free_names(method.node) - bound - set(dir(builtins)) - {"__class__"})
        if missing:
            raise _error(
                PatchUnboundName,
                spec,
                f"method '{method.name}' uses {', '.join(missing)}, which the module does not import or define",
            )


# ---- verification ----------------------------------------------------------------------------------


def _verify(spec: PatchSpec, src: SourceFile, identical: set[str]) -> None:
    """The checks run after every apply and by `verify`; failures are PatchVerifyError."""
    tree = _parse(spec, src, PatchVerifyError)
    cls = _the_class(spec, tree, PatchVerifyError)
    _no_module_level_defs(spec, tree, PatchVerifyError)
    for method in spec.methods:
        node = _member(spec, cls, method.name, PatchVerifyError)
        if node is None:
            raise _verify_error(spec, f"method '{method.name}' is not a member of the class")
        if method.name in identical and not _same_code(node, method.node):
            raise _verify_error(spec, f"method '{method.name}' (line {node.lineno}) differs from the patch")
        if not _compatible(node, method.node):
            raise _verify_error(
                spec, f"method '{method.name}' has signature {_signature(node)}, expected {_signature(method.node)}"
            )
    if spec.entry_class and not _registered(tree, spec.entry_class, spec.class_name):
        raise _verify_error(
            spec, f"the class is not registered in {spec.entry_class}: SGLang would not find the architecture"
        )


def _registered(tree: ast.Module, entry: str, class_name: str) -> bool:
    found = False
    for stmt in _module_statements(tree.body):
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else ([stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value else [])
        )
        if any(isinstance(t, ast.Name) and t.id == entry for t in targets):
            values = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
            found = any(isinstance(v, ast.Name) and v.id == class_name for v in values) or (
                isinstance(stmt, ast.AugAssign) and found
            )
    return found


# ---- ast helpers -----------------------------------------------------------------------------------


def _parse(spec: PatchSpec, src: SourceFile, error: type[PatchError]) -> ast.Module:
    try:
        return src.parse(spec.file)
    except SyntaxError as exc:
        raise _error(
            error,
            spec,
            f"does not compile: {type(exc).__name__}: {exc.msg} (line {exc.lineno})"
            + (
                ": methods appended at module level (the `cat >>` mistake)?"
                if isinstance(exc, IndentationError)
                else ""
            ),
        ) from None


def _the_class(spec: PatchSpec, tree: ast.Module, error: type[PatchError]) -> ast.ClassDef:
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == spec.class_name]
    if not found:
        raise _error(error, spec, "class not found at the top level of the file")
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for n in found)
        raise _error(error, spec, f"class defined {len(found)} times (lines {lines})")
    return found[0]


def _no_module_level_defs(spec: PatchSpec, tree: ast.Module, error: type[PatchError] = PatchModuleLevelDef) -> None:
    names = set(spec.method_names)
    for stmt in _module_statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in names:
            raise _error(
                error,
                spec,
                f"function '{stmt.name}' is defined at module level (line "
                f"{stmt.lineno}), outside the class: the `cat >>` mistake",
            )


def _module_statements(body: list[ast.stmt]):
    """Module-level statements, including those inside top-level if/try/with blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or (
            hasattr(ast, "TryStar") and isinstance(stmt, ast.TryStar)
        ):
            for name in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(stmt, name, []))
            for handler in getattr(stmt, "handlers", []):
                yield from _module_statements(handler.body)


def _member(spec: PatchSpec, cls: ast.ClassDef, name: str, error: type[PatchError]):
    """The class body's one statement binding `name`, None if none; more than one, or not a method,
    is an error."""
    hits = [s for s in cls.body if name in bound_names(s)]
    if len(hits) > 1:
        lines = ", ".join(str(s.lineno) for s in hits)
        raise _error(error, spec, f"'{name}' is defined {len(hits)} times in the class (lines {lines})")
    if hits and not isinstance(hits[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise _error(error, spec, f"'{name}' is already a class member that is not a method (line {hits[0].lineno})")
    return hits[0] if hits else None


def _same_code(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a, include_attributes=False) == ast.dump(b, include_attributes=False)


_KIND_DECORATORS = {"staticmethod", "classmethod", "property", "abstractmethod", "abc.abstractmethod"}


def _kind(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple:
    decos = set()
    for d in node.decorator_list:
        text = ast.unparse(d)
        if text in _KIND_DECORATORS or text.endswith((".setter", ".getter", ".deleter")):
            decos.add(text)
    return (type(node).__name__, frozenset(decos))


def _compatible(existing: ast.FunctionDef | ast.AsyncFunctionDef, ours: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Every call the patch's method accepts, the existing one accepts the same way."""
    if _kind(existing) != _kind(ours):
        return False
    ea, oa = existing.args, ours.args
    e_pos, o_pos = [*ea.posonlyargs, *ea.args], [*oa.posonlyargs, *oa.args]
    e_req = len(e_pos) - len(ea.defaults)
    o_req = len(o_pos) - len(oa.defaults)
    for i, arg in enumerate(o_pos):
        if i >= len(e_pos):
            if ea.vararg is None:
                return False
            continue
        if e_pos[i].arg != arg.arg and i >= len(ea.posonlyargs):
            return False
        if i >= o_req and i < e_req:  # optional for our callers, required by the existing method
            return False
    if len(e_pos) > len(o_pos) and e_req > len(o_pos):
        return False
    if oa.vararg is not None and ea.vararg is None:
        return False
    e_kw = {a.arg: d is None for a, d in zip(ea.kwonlyargs, ea.kw_defaults, strict=True)}
    o_kw = {a.arg: d is None for a, d in zip(oa.kwonlyargs, oa.kw_defaults, strict=True)}
    for name, required in e_kw.items():
        if required and not o_kw.get(name, False):
            return False
    for name, required in o_kw.items():
        if name not in e_kw and ea.kwarg is None:
            return False
        if not required and e_kw.get(name, False):
            return False
    return not (oa.kwarg is not None and ea.kwarg is None)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"({ast.unparse(node.args)})"


def _module_bindings(tree: ast.Module) -> set[str] | None:
    bound = {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}
    for stmt in _module_statements(tree.body):
        if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
            return None
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        else:
            bound |= bound_names(stmt)
            for node in (
                ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ()
            ):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
    return bound


def _free_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    loaded: set[str] = set()
    local: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else local).add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            local.add(node.name)
        elif isinstance(node, ast.alias):
            local.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            local.add(node.name)
    return loaded - local


# ---- files -----------------------------------------------------------------------------------------


def _record_hash(root: Path, rel: str) -> tuple[str, str] | None:
    """(hex sha256, RECORD path) as pip recorded the file at install time, if a RECORD lists it."""
    for record in sorted(root.glob("sglang-*.dist-info/RECORD")):
        try:
            text = record.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PatchUsageError(f"{record}: cannot read pip's RECORD: {exc}") from None
        # RECORD is CSV; only rows naming the file are parsed (it lists thousands of files).
        candidates = [ln for ln in text.splitlines() if rel in ln]
        for row in csv.reader(candidates):
            if len(row) >= 2 and row[0] == rel and row[1].startswith("sha256="):
                digest = base64.urlsafe_b64decode(row[1][len("sha256=") :] + "==").hex()
                return digest, f"{record.parent.name}/RECORD"
    return None


def _matches_record(root: Path, rel: str, src: SourceFile) -> bool:
    recorded = _record_hash(root, rel)
    return recorded is not None and src.hash_matches(recorded[0])


@dataclass(frozen=True)
class _Write:
    path: Path
    data: bytes
    original: bytes | None  # what to put back if a later file of the same step fails; None: new file
    spec: PatchSpec | None  # the patch that changed it (None: the manifest), to name in errors


def _write_all(writes: list[_Write]) -> None:
    """Write every file or none: stage each beside its target, then rename them all over the targets.

    A failure (or a signal) while staging leaves every target untouched; one while renaming puts the
    files already renamed back as they were.
    """
    staged: list[tuple[_Write, str]] = []
    try:
        for w in writes:
            staged.append((w, _stage(w)))
        replaced: list[_Write] = []
        try:
            for w, tmp in staged:
                os.replace(tmp, w.path)
                replaced.append(w)
        except BaseException as exc:
            for done in replaced:
                _put_back(done)
            if isinstance(exc, OSError):
                raise _write_error(w, f"cannot replace the file: {exc.strerror or exc}") from None
            raise
    finally:
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _stage(w: _Write) -> str:
    """The path of a temporary file beside `w.path` holding `w.data`, with the target's mode."""
    try:
        mode = w.path.stat().st_mode & 0o7777 if w.path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(dir=w.path.parent, prefix=f".{w.path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _write_error(w, f"cannot write in {w.path.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(w.data)
        os.chmod(tmp, mode)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _write_error(w, f"cannot write {w.path.name}: {exc.strerror or exc}") from None
        raise
    return tmp


def _put_back(w: _Write) -> None:
    """Best effort: the folder took a rename a moment ago, so it takes this one."""
    try:
        if w.original is None:
            os.unlink(w.path)
            return
        tmp = _stage(_Write(w.path, w.original, None, w.spec))
    except (OSError, PatchWriteError):
        return
    try:
        os.replace(tmp, w.path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_error(w: _Write, reason: str) -> PatchWriteError:
    reason += ": nothing was changed"
    if w.spec is None:
        return PatchWriteError(f"manifest {w.path}: {reason}")
    return PatchWriteError(reason, patch=w.spec.id, file=w.spec.file, class_name=w.spec.class_name)


def _unique(ids) -> list[str]:
    return list(dict.fromkeys(ids))


def _error(cls: type[PatchError], spec: PatchSpec, reason: str) -> PatchError:
    return cls(reason, patch=spec.id, file=spec.file, class_name=spec.class_name)


def _verify_error(spec: PatchSpec, reason: str) -> PatchError:
    return _error(PatchVerifyError, spec, reason)
