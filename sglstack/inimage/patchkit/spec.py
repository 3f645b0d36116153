"""Patches as data: `patches/<id>/patch.toml` plus the methods as a real Python source file.

The methods live in a stub class named like the target class, inside an ordinary module that ruff
lints and formats like any other; the engine takes each method's exact lines from it.
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import PatchDefinitionError, PatchUsageError
from .source import SourceError, SourceFile, indentation
from .versions import InvalidVersion, SpecifierSet, Version

PATCH_FILE = "patch.toml"


@dataclass(frozen=True)
class MethodSource:
    """One method as written in the patch: its lines (with the stub's indentation) and its tree."""

    name: str
    lines: tuple[str, ...]
    node: ast.FunctionDef | ast.AsyncFunctionDef
    indent_unit: str  # the stub class body's indentation, i.e. one level in the patch source
    in_string: tuple[bool, ...]  # per line: a continuation line of a multi-line string (kept verbatim)


@dataclass(frozen=True)
class PatchSpec:
    id: str
    folder: Path
    why: str
    upstream: str
    fixed_in: str | None
    applies_to: SpecifierSet
    file: str
    class_name: str
    methods: tuple[MethodSource, ...]
    source: str
    entry_class: str | None
    sha256_before: dict[str, str]  # version (or "*") -> hex digest
    sha256_after: dict[str, str]
    retire: str

    @property
    def method_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.methods)

    def applies(self, version: str) -> bool:
        return self.applies_to.contains(version)

    def declared_hash(self, which: str, version: str | None) -> str | None:
        table = self.sha256_before if which == "before" else self.sha256_after
        if version is not None and version in table:
            return table[version]
        return table.get("*")


def patch_ids(patches_dir: Path) -> list[str]:
    if not patches_dir.is_dir():
        return []
    return sorted(p.parent.name for p in patches_dir.glob(f"*/{PATCH_FILE}"))


# long: the patch.toml parser, one check per key in the order the format documents them
def load_patch(patches_dir: Path, patch_id: str) -> PatchSpec:
    folder = Path(patches_dir) / patch_id
    toml_path = folder / PATCH_FILE
    if not toml_path.is_file():
        ids = patch_ids(Path(patches_dir))
        # the house's "did you mean" (sglstack.core.errors.did_you_mean): patchkit runs without the rest of sglstack
        close = difflib.get_close_matches(patch_id, ids, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise PatchUsageError(f"unknown patch (no {toml_path}; known: {', '.join(ids) or 'none'}){hint}",
                              patch=patch_id)

    def bad(reason: str) -> PatchDefinitionError:
        return PatchDefinitionError(f"{toml_path}: {reason}", patch=patch_id)

    try:
        meta = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise bad(f"invalid TOML: {exc}") from None
    except OSError as exc:
        raise bad(f"cannot read: {exc.strerror or exc}") from None

    def text(key: str, *, required: bool = True, default: str = "") -> str:
        value = meta.get(key, None)
        if value is None:
            if required:
                raise bad(f"missing key '{key}'")
            return default
        if not isinstance(value, str) or (required and not value.strip()):
            raise bad(f"key '{key}' must be a non-empty string")
        return value

    allowed = {
        "id",
        "why",
        "upstream",
        "fixed_in",
        "applies_to",
        "file",
        "class",
        "methods",
        "source",
        "entry_class",
        "sha256_before",
        "sha256_after",
        "retire",
    }
    unknown = sorted(set(meta) - allowed)
    if unknown:
        raise bad(f"unknown key '{unknown[0]}' (known: {', '.join(sorted(allowed))})")
    if text("id") != patch_id:
        raise bad(f"id '{meta['id']}' does not match its folder name '{patch_id}'")
    try:
        applies_to = SpecifierSet.parse(text("applies_to"))
    except InvalidVersion as exc:
        raise bad(f"applies_to: {exc}") from None
    fixed_in = text("fixed_in", required=False) or None
    if fixed_in:
        try:
            Version.parse(fixed_in)
        except InvalidVersion as exc:
            raise bad(f"fixed_in: {exc}") from None
    file = text("file")
    posix = PurePosixPath(file)
    if posix.is_absolute() or ".." in posix.parts or not file.endswith(".py"):
        raise bad(f"file '{file}' must be a relative path to a .py file inside the package root")
    class_name = text("class")
    names = meta.get("methods")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise bad("key 'methods' must be a non-empty list of method names")
    if len(set(names)) != len(names):
        raise bad("key 'methods' lists a name twice")
    source = text("source", required=False, default="methods.py")
    entry_default = "EntryClass" if posix.parts[:3] == ("sglang", "srt", "models") else ""
    entry_class = text("entry_class", required=False, default=entry_default) or None
    hashes = {}
    for key in ("sha256_before", "sha256_after"):
        hashes[key] = _hash_table(meta.get(key), key, bad)
    methods = _load_methods(folder / source, class_name, names, bad)
    return PatchSpec(
        id=patch_id,
        folder=folder,
        why=_one_line(text("why")),
        upstream=text("upstream", required=False),
        fixed_in=fixed_in,
        applies_to=applies_to,
        file=file,
        class_name=class_name,
        methods=methods,
        source=source,
        entry_class=entry_class,
        sha256_before=hashes["sha256_before"],
        sha256_after=hashes["sha256_after"],
        retire=_one_line(text("retire", required=False)),
    )


def _one_line(text: str) -> str:
    """TOML multi-line strings read well in the file; messages want one line."""
    return " ".join(text.split())


def _hash_table(value, key: str, bad) -> dict[str, str]:
    if value is None:
        return {}
    table = {"*": value} if isinstance(value, str) else value
    if not isinstance(table, dict):
        raise bad(f"key '{key}' must be a hex digest or a table of version = digest")
    for version, digest in table.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise bad(f"{key}.{version}: not a lowercase sha256 hex digest")
    return dict(table)


def _load_methods(path: Path, class_name: str, names: list[str], bad) -> tuple[MethodSource, ...]:
    if not path.is_file():
        raise bad(f"methods source {path.name} is missing")
    try:
        src = SourceFile.read(path)
        tree = src.parse(str(path))
    except SourceError as exc:
        raise bad(f"{path.name}: {exc}") from None
    except SyntaxError as exc:
        raise bad(f"{path.name}:{exc.lineno}: {exc.msg}" if exc.lineno else f"{path.name}: {exc.msg}") from None
    stubs = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    if len(stubs) != 1:
        raise bad(f"{path.name} must define exactly one stub class {class_name} holding the methods")
    stub = stubs[0]
    lines = src.lines
    unit = indentation(lines[stub.body[0].lineno - 1])
    if not unit:
        raise bad(f"{path.name}: the stub class body must be on its own indented lines")
    in_string = _string_continuation_lines(src.text)
    out = []
    for name in names:
        # Python keeps the last of two definitions; which one the patch meant is not ours to guess.
        bindings = [n for n in stub.body if name in bound_names(n)]
        if len(bindings) > 1:
            where = ", ".join(str(n.lineno) for n in bindings)
            raise bad(f"{path.name}: method '{name}' is defined {len(bindings)} times in stub class {class_name} "
                      f"(lines {where}): keep one")
        node = bindings[0] if bindings else None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise bad(f"{path.name}: stub class {class_name} has no method '{name}'")
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        end = node.end_lineno or node.lineno
        body = tuple(line.rstrip("\r\n") for line in lines[start - 1 : end])
        flags = tuple(n in in_string for n in range(start, end + 1))
        out.append(MethodSource(name, body, node, unit, flags))
    return tuple(out)


def bound_names(stmt: ast.stmt) -> set[str]:
    """The names a statement in a class body binds (def, class, assignment targets)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _string_continuation_lines(text: str) -> set[int]:
    """Line numbers that continue a multi-line string: re-indenting them would change the string."""
    kinds = {tokenize.STRING}
    if hasattr(tokenize, "FSTRING_MIDDLE"):  # Python 3.12 tokenizes f-strings in pieces
        kinds.add(tokenize.FSTRING_MIDDLE)
    out: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in kinds and tok.end[0] > tok.start[0]:
            out.update(range(tok.start[0] + 1, tok.end[0] + 1))
    return out
