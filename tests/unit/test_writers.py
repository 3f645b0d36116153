"""Every file sglstack writes is written by `core/safefiles.py`: no writer elsewhere can follow a link out of
the build folder. The walk finds each call that creates or writes a file; only safefiles.py may make one,
and the in-image code (which runs inside images with the standard library only) is allowed by name below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "sglstack"
# The safe writers themselves: whole files by rename, O_NOFOLLOW opens, files replaced together, and the lock
# files (an O_NOFOLLOW open after `check_inside`, in `folderlock` since it left safefiles whole).
HOMES = (ROOT / "core" / "safefiles.py", ROOT / "core" / "replacing.py", ROOT / "core" / "folderlock.py")
# Code that runs inside images or on GPU nodes, where sglstack's own modules are not installed: it may not
# import core.safefiles (tests/unit/test_architecture.py holds it to the standard library).
IN_IMAGE = (
    ROOT / "inimage",  # patchkit, image checks, wheelkit: build stages and images
    ROOT / "preflight" / "node.py",  # the node side of preflight, copied into a stack image (remote.py)
    ROOT / "preflight" / "allreduce.py",
    ROOT / "preflight" / "__main__.py",
)
WRITE_MODES = ("w", "a", "x", "+")
WRITING_METHODS = ("write_text", "write_bytes", "touch", "symlink_to", "hardlink_to")
WRITING_FUNCTIONS = {
    ("os", "link"), ("os", "symlink"), ("os", "mkfifo"), ("shutil", "copy"), ("shutil", "copy2"),
    ("shutil", "copyfile"), ("shutil", "copytree"), ("shutil", "move"), ("tempfile", "mkstemp"),
    ("tempfile", "NamedTemporaryFile"), ("tempfile", "TemporaryFile"), ("tempfile", "mkdtemp"),
    ("os", "rename"), ("os", "replace"), ("os", "renames"), ("shutil", "unpack_archive"),
}
# Methods that write wherever their argument points: an archive's members unpacked, a path renamed onto
# another (`Path.rename/replace(target)`: one positional argument, which no str/datetime `replace` has).
UNPACKING_METHODS = ("extract", "extractall")
RENAMING_METHODS = ("rename", "replace")
# Writers outside safefiles that write only into a folder of their own making or sglstack's cache (never a
# path a user names or the build folder): (file, what) -> why.
ALLOWED = {
    ("sglstack/adapters/wheels.py", "tempfile.mkdtemp"): "pip's private folder inside the wheel cache",
    ("sglstack/adapters/wheels.py", "os.replace"): "a wheel moved from pip's private folder into the cache",
    ("sglstack/adapters/cuobjdump.py", "tempfile.mkdtemp"): "a tool installed into the cache, then renamed",
    ("sglstack/adapters/cuobjdump.py", ".rename()"): "the tool's own folder in the cache",
    ("sglstack/adapters/git.py", ".extractall()"): "a git tree into the fresh folder export made (data filter)",
    ("sglstack/patches/host.py", ".extract()"): "wheel members into a TemporaryDirectory of its own",
    ("sglstack/upgrade/argv.py", ".extractall()"): "wheel members into a TemporaryDirectory of its own",
}
OPEN_FLAGS = ("O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC")


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode argument: "r" when none is given, None when it is not a string constant (judged writing)."""
    node = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if node is None and len(call.args) > position:
        node = call.args[position]
    if node is None:
        return "r"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dotted(node: ast.expr) -> tuple[str, str] | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id, node.attr
    return None


def writer(call: ast.Call) -> str | None:
    """What `call` writes with, or None when it writes no file."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "open":
        mode = _mode(call, 1)
        return "open(..., write mode)" if mode is None or any(m in mode for m in WRITE_MODES) else None
    dotted = _dotted(func)
    if dotted in WRITING_FUNCTIONS:
        return ".".join(dotted)
    if dotted == ("io", "open"):
        mode = _mode(call, 1)
        return "io.open(..., write mode)" if mode is None or any(m in mode for m in WRITE_MODES) else None
    if dotted == ("os", "open"):
        flags = call.args[1] if len(call.args) > 1 else None
        if flags is not None and not any(isinstance(n, ast.Attribute) and n.attr.startswith("O_")
                                         for n in ast.walk(flags)):
            return "os.open(flags not spelled out)"  # a variable: what it opens for cannot be judged here
        text = ast.unparse(flags) if flags is not None else ""
        return "os.open(O_CREAT/O_WRONLY/...)" if any(f in text for f in OPEN_FLAGS) else None
    if dotted == ("os", "fdopen"):
        return None  # of a descriptor opened above: that open is the writer
    if dotted is not None and dotted[0] in ("tarfile", "zipfile") and dotted[1] == "open":
        in_memory = any(k.arg == "fileobj" for k in call.keywords)
        mode = _mode(call, 1)
        return None if in_memory or (mode or "w").startswith("r") else f"{dotted[0]}.open(..., write mode)"
    if isinstance(func, ast.Attribute):
        if func.attr in WRITING_METHODS or func.attr in UNPACKING_METHODS:
            return f".{func.attr}()"
        if func.attr in RENAMING_METHODS and len(call.args) == 1 and not call.keywords:
            return f".{func.attr}()"
        if func.attr == "open":
            # Path.open(mode): a first argument that is not a string is some other object's open
            # (zf.open(member), a log's open(key, refs)).
            mode = _mode(call, 0)
            return ".open(write mode)" if mode is not None and any(m in mode for m in WRITE_MODES) else None
    return None


def _writers(tree: ast.AST, function: str = "") -> list[tuple[str, int, str]]:
    """(function, line, what) of each writer in `tree`, by the innermost function it is in."""
    found = []
    for node in ast.iter_child_nodes(tree):
        inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        if isinstance(node, ast.Call) and (what := writer(node)):
            found.append((function, node.lineno, what))
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "io", "shutil", "tempfile"):
            # `from os import replace`: the bare name would hide the writer from the calls above
            found += [(function, node.lineno, f"from {node.module} import {a.name}") for a in node.names
                      if (node.module, a.name) in WRITING_FUNCTIONS or a.name == "open"]
        found += _writers(node, inner)
    return found


def writers_outside_safefiles() -> list[str]:
    """Each writer outside the safe writers (HOMES) and the in-image code."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(ROOT.rglob("*.py")):
        if path in HOMES or any(path == p or p in path.parents for p in IN_IMAGE):
            continue
        name = f"sglstack/{path.relative_to(ROOT)}"
        found += [(name, line, what) for _function, line, what in _writers(ast.parse(path.read_text(encoding="utf-8")))
                  if (name, what) not in ALLOWED]
    return [f"{name}:{line}: {what}" for name, line, what in sorted(found)]


def test_every_file_sglstack_writes_is_written_by_safefiles() -> None:
    assert writers_outside_safefiles() == []


@pytest.mark.parametrize(("source", "found"), [
    ("open(p, 'w')", "open(..., write mode)"),
    ("open(p, mode='ab')", "open(..., write mode)"),
    ("open(p)", None),
    ("open(p, how)", "open(..., write mode)"),
    ("open(p, 'rb')", None),
    ("p.write_text('x')", ".write_text()"),
    ("p.open('a')", ".open(write mode)"),
    ("p.open()", None),
    ("zf.open(name)", None),
    ("p.touch(mode=0o600)", ".touch()"),
    ("os.open(p, os.O_RDONLY)", None),
    ("os.open(p, os.O_WRONLY | os.O_CREAT)", "os.open(O_CREAT/O_WRONLY/...)"),
    ("shutil.copy2(a, b)", "shutil.copy2"),
    ("tempfile.mkstemp(dir=d)", "tempfile.mkstemp"),
    ("tarfile.open(fileobj=buf, mode='w')", None),
    ("tarfile.open(p, 'w:gz')", "tarfile.open(..., write mode)"),
    ("zipfile.open(p)", None),
    ("io.open(p, 'w')", "io.open(..., write mode)"),
    ("io.open(p)", None),
    ("os.open(p, flags)", "os.open(flags not spelled out)"),
    ("os.replace(a, b)", "os.replace"),
    ("os.rename(a, b)", "os.rename"),
    ("p.replace(q)", ".replace()"),
    ("p.rename(q)", ".rename()"),
    ("s.replace('a', 'b')", None),
    ("when.replace(tzinfo=utc)", None),
    ("dataclasses.replace(x, a=1)", None),
    ("tar.extractall(dest)", ".extractall()"),
    ("zf.extract(name, dest)", ".extract()"),
    ("tempfile.mkdtemp(dir=d)", "tempfile.mkdtemp"),
    ("shutil.unpack_archive(a, d)", "shutil.unpack_archive"),
])
def test_the_walk_knows_each_kind_of_writer(source: str, found: str | None) -> None:
    call = ast.parse(source).body[0].value  # type: ignore[attr-defined]
    assert writer(call) == found


@pytest.mark.parametrize(("source", "found"), [
    ("from os import replace", ["from os import replace"]),
    ("from shutil import copy2 as cp", ["from shutil import copy2"]),
    ("from io import open", ["from io import open"]),
    ("from os import path", []),
])
def test_the_walk_sees_a_writer_imported_by_name(source: str, found: list[str]) -> None:
    assert [what for _f, _l, what in _writers(ast.parse(source))] == found


def test_every_allowed_writer_is_still_there() -> None:
    """An allowance outlives its writer silently otherwise, and would then let a new one through."""
    seen = set()
    for name, _what in ALLOWED:
        tree = ast.parse((ROOT.parent / name).read_text(encoding="utf-8"))
        seen |= {(name, what) for _f, _l, what in _writers(tree)}
    assert sorted(set(ALLOWED) - seen) == []
