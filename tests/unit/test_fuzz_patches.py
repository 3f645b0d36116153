"""Property-based fuzzing of the patch engine (hypothesis, derandomized: the same examples on every run).

Generated target modules (CRLF or LF, tabs or spaces, decorators, nested classes, docstrings, comments
after the class, `EntryClass` lines, no final newline) and generated method sets (decorators, their
own indentation, multi-line strings, comments). For every pair, apply either fails with a `PatchError`
naming the patch and leaves the file as it was, or succeeds and then, checked independently of the
engine: the file compiles, the methods are members of the class by `ast`, the bytes outside one
inserted block are the original's, applying again changes nothing, and verify agrees.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from patch_fixtures import make_patch

from sglstack.inimage import patchkit
from sglstack.inimage.patchkit import PatchError, apply_patches, verify_patches

CLASS = "Target"
FILE = "sglang/srt/models/target.py"
EXAMPLES = examples(200)

NAMES = st.sampled_from(["get_embed_and_head", "set_embed_and_head", "forward", "load_weights", "helper",
                         "attribute", "hint", "method", "_private", "__call__", "m", "with_digits_2"])
INDENTS = st.sampled_from(["    ", "  ", "\t", "        "])
COMMENTS = st.sampled_from(["# a comment", "# -- section --", "#", "# noqa: E501", "# trailing: x = 1"])


@st.composite
def method_lines(draw, name: str, unit: str) -> list[str]:
    """One method as lines at one level of `unit` indentation (the class body's)."""
    kind = draw(st.sampled_from(["plain", "static", "class", "property", "async"]))
    lines = []
    if kind == "static":
        lines.append(f"{unit}@staticmethod")
        args = "x=1"
    elif kind == "class":
        lines.append(f"{unit}@classmethod")
        args = "cls, x=1"
    elif kind == "property":
        lines.append(f"{unit}@property")
        args = "self"
    else:
        args = draw(st.sampled_from(["self", "self, a", "self, a=2, *rest, key=None, **extra"]))
    prefix = "async " if kind == "async" else ""
    lines.append(f"{unit}{prefix}def {name}({args}):")
    body = unit * 2
    if draw(st.booleans()):
        lines += [f'{body}"""{name}: a docstring', "", "   indented inside the string", f'{body}"""']
    for _ in range(draw(st.integers(0, 2))):
        lines.append(f"{body}{draw(COMMENTS)}")
        if draw(st.booleans()):
            lines.append("")
    value = draw(st.sampled_from(["1", "len([1, 2])", "(\n" + body + unit + "3\n" + body + ")", "'%s' % 4"]))
    lines += [f"{body}value = {value}", f"{body}return value"]
    return "\n".join(lines).split("\n")


@st.composite
def patch_and_target(draw) -> tuple[bytes, bytes, tuple[str, ...], str | None]:
    """(target module bytes, methods.py bytes, method names, entry class); now and then one of them is
    damaged the way a real one can be (see `damage`)."""
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    unit = draw(INDENTS)
    existing = draw(st.lists(NAMES, min_size=0, max_size=3, unique=True))
    added = tuple(draw(st.lists(NAMES, min_size=1, max_size=3, unique=True)))

    head = []
    if draw(st.booleans()):
        head += ['"""The target module."""', ""]
    if draw(st.booleans()):
        head += ["# -*- coding: utf-8 -*-"] if not head else []
    head += ["import os", "from typing import Any", "", ""]
    for _ in range(draw(st.integers(0, 2))):
        head.append(f"@{draw(st.sampled_from(['register', 'dataclass', 'some.decorator(1)']))}")
    head.append(f"class {CLASS}({draw(st.sampled_from(['', 'object', 'Base, metaclass=Meta']))}):")

    body: list[str] = []
    if draw(st.booleans()):
        body.append(f'{unit}"""The class docstring."""')
    body.append(f"{unit}attribute = 1")
    for name in existing:
        body.append("")
        body += draw(method_lines(name, unit))
    if draw(st.booleans()):
        body += ["", f"{unit}class Inner:", f"{unit}{unit}inner = 2", "", f"{unit}{unit}def method(self):",
                 f"{unit}{unit}{unit}return self.inner"]
    if draw(st.booleans()):  # a comment after the last statement, inside the class's indentation
        body.append(f"{unit}{draw(COMMENTS)}")

    tail: list[str] = []
    entry = None
    for _ in range(draw(st.integers(0, 3))):
        tail.append(draw(st.sampled_from(["", "# after the class", "def helper():\n    return 1", "OTHER = 3",
                                          "class Other:\n    pass"])))
    if draw(st.booleans()):
        entry = "EntryClass"
        tail += ["", draw(st.sampled_from([f"EntryClass = {CLASS}", f"EntryClass = [{CLASS}]",
                                           f"EntryClass = [Other, {CLASS}]" if "class Other" in "".join(tail)
                                           else f"EntryClass = ({CLASS},)"]))]
    lines = head + body + [""] + tail
    text = eol.join("\n".join(lines).split("\n"))
    if draw(st.booleans()):
        text += eol  # else: no newline at the end of the file

    stub_unit = draw(INDENTS)
    stub = [f"class {CLASS}:", f"{stub_unit}hint: int"]
    for name in added:
        stub.append("")
        stub += draw(method_lines(name, stub_unit))
    stub_eol = draw(st.sampled_from(["\n", "\r\n"]))
    methods_py = stub_eol.join(["from typing import Any", "", "", *stub]) + stub_eol
    return (*draw(damage(text.encode(), methods_py.encode(), added, stub_unit)), added, entry)


@st.composite
def damage(draw, target: bytes, methods_py: bytes, added: tuple[str, ...], unit: str) -> tuple[bytes, bytes]:
    """Mostly nothing; else one of: a target that is not UTF-8, a methods.py with an unknown coding
    cookie, a methods.py that defines a method twice."""
    kind = draw(st.sampled_from(["none"] * 7 + ["latin-1 target", "bad cookie", "defined twice"]))
    event(f"damage: {kind}")
    if kind == "latin-1 target":
        at = draw(st.integers(0, len(target)))
        line_start = target.rfind(b"\n", 0, at) + 1
        return target[:line_start] + b"# caf\xe9\n" + target[line_start:], methods_py
    if kind == "bad cookie":
        return target, b"# -*- coding: no-such-codec -*-\n" + methods_py
    if kind == "defined twice":
        return target, methods_py + f"{unit}def {added[0]}(self):{chr(10)}{unit}{unit}return 0{chr(10)}".encode()
    return target, methods_py


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sglstack-fuzz-patches-"))
    yield path
    shutil.rmtree(path)


def _members(source: bytes) -> list[str]:
    tree = ast.parse(source)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS]
    return [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _one_insertion(before: bytes, after: bytes) -> bytes:
    """The block `after` has that `before` has not, asserting it is one contiguous insertion."""
    n = 0
    while n < len(before) and before[n] == after[n]:
        n += 1
    m = 0
    while m < len(before) - n and before[-1 - m] == after[-1 - m]:
        m += 1
    assert n + m == len(before), "the bytes outside one inserted block changed"
    return after[n : len(after) - m]


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(patch_and_target())
def test_apply_then_verify_holds_or_fails_naming_the_patch(workdir, case):
    target_bytes, methods_py, added, entry = case
    root, patches = workdir / "tree", workdir / "patches"
    shutil.rmtree(workdir, ignore_errors=True)
    (root / FILE).parent.mkdir(parents=True)
    (root / FILE).write_bytes(target_bytes)
    make_patch(patches, "fuzz", file=FILE, class_name=CLASS, methods=added, source=methods_py,
               entry_class=entry or "")
    stub = methods_py.decode("utf-8", "replace")
    twice = any(stub.count(f"def {name}(") > 1 for name in added)
    try:
        (result,) = apply_patches(root, patches, ["fuzz"])
    except PatchError as exc:
        event(f"refused: {exc.kind}")
        assert str(exc).startswith("patch 'fuzz': ") and "\n" not in str(exc)
        assert (root / FILE).read_bytes() == target_bytes
        return
    assert not twice, "a methods.py that defines a method twice must be refused"
    event(f"applied: {result.status}")
    patched = (root / FILE).read_bytes()
    compile(ast.parse(patched), FILE, "exec")
    missing = [name for name in added if name not in _members(target_bytes)]
    assert _members(patched) == _members(target_bytes) + missing
    assert result.inserted == tuple(missing)
    if missing:
        block = _one_insertion(target_bytes, patched)
        assert all(f"def {name}(".encode() in block for name in missing)
        eol = b"\r\n" if b"\r\n" in target_bytes else b"\n"
        assert (b"\r\n" in block) == (eol == b"\r\n") and (eol == b"\r\n" or b"\r" not in block)
        assert result.status == patchkit.APPLIED
    else:  # every method is there already, ours or with another body (upstream's)
        assert patched == target_bytes and result.status in (patchkit.ALREADY_APPLIED, patchkit.ALREADY_UPSTREAM)

    (again,) = apply_patches(root, patches, ["fuzz"])
    assert (root / FILE).read_bytes() == patched
    # Methods present with another (compatible) body are upstream's: the status says so on every run.
    assert set(result.upstream_methods) <= set(_members(target_bytes)) & set(added)
    upstream = result.status == patchkit.ALREADY_UPSTREAM or bool(result.upstream_methods)
    assert again.status == (patchkit.ALREADY_UPSTREAM if upstream else patchkit.ALREADY_APPLIED)
    (verified,) = verify_patches(root, patches, ["fuzz"])
    assert verified.sha256_after == result.sha256_after
