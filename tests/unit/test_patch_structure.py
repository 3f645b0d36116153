"""The ast rules apply and verify share (sglstack/inimage/patchkit/structure.py): compatible signatures, method kinds,
module names, free names, registration (apply on small trees: test_patch_apply.py; verify: test_patch_verify.py).

Pure: our own small patches (tests/lib/patch_fixtures.make_patch) on small trees under tmp_path.
"""

from __future__ import annotations

import ast

import pytest
from patch_trees import _compatible, _fn

from sglstack.inimage.patchkit import (
    structure,
)

# ---- compatible signatures -------------------------------------------------------------------------


@pytest.mark.parametrize(("existing", "ours", "expected"), [
    ("def f(self, a): pass", "def f(self, a): pass", True),
    ("async def f(self): pass", "def f(self): pass", False),
    ("@staticmethod\ndef f(): pass", "def f(): pass", False),
    ("@functools.cache\ndef f(self): pass", "def f(self): pass", True),  # not a kind decorator
    ("@x.setter\ndef f(self, v): pass", "def f(self, v): pass", False),
    ("@x.getter\ndef f(self): pass", "@x.getter\ndef f(self): pass", True),
    ("@x.getter\ndef f(self): pass", "def f(self): pass", False),
    ("@x.deleter\ndef f(self): pass", "def f(self): pass", False),
    ("@x.setter\ndef f(self, v): pass", "@x.setter\ndef f(self, v): pass", True),
    ("@property\ndef f(self): pass", "def f(self): pass", False),
    ("@classmethod\ndef f(cls): pass", "@classmethod\ndef f(cls): pass", True),
    ("@abc.abstractmethod\ndef f(self): pass", "def f(self): pass", False),
    ("@x.deleter\ndef f(self): pass", "@x.setter\ndef f(self): pass", False),
    # positional parameters
    ("def f(self): pass", "def f(self, a): pass", False),
    ("def f(self, *args): pass", "def f(self, a): pass", True),
    ("def f(self, *args): pass", "def f(self, a, b): pass", True),
    ("def f(self, b): pass", "def f(self, a): pass", False),
    ("def f(x, /, a): pass", "def f(self, a): pass", True),  # a positional-only name is nobody's business
    ("def f(x, y, /): pass", "def f(self, a): pass", True),
    ("def f(x, /, b): pass", "def f(self, a): pass", False),  # the first name that is not positional-only
    ("def f(this, a): pass", "def f(self, a): pass", False),
    ("def f(self, a): pass", "def f(self, a=1): pass", False),
    ("def f(self, a=1): pass", "def f(self, a): pass", True),
    ("def f(self, a, b): pass", "def f(self, a): pass", False),
    ("def f(self, a, b=1): pass", "def f(self, a): pass", True),
    ("def f(self, a, b=1, c=2): pass", "def f(self, a): pass", True),
    ("def f(self, a, b, c=2): pass", "def f(self, a): pass", False),
    ("def f(self, a, b, c=2): pass", "def f(self, a, b): pass", True),
    ("def f(self, a=1, b=2): pass", "def f(self, a=1): pass", True),
    ("def f(self, a, b=2): pass", "def f(self, a=1, b=2): pass", False),
    # *args and **kwargs
    ("def f(self): pass", "def f(self, *args): pass", False),
    ("def f(self, *rest): pass", "def f(self, *args): pass", True),
    ("def f(self): pass", "def f(self, **kw): pass", False),
    ("def f(self, **other): pass", "def f(self, **kw): pass", True),
    # keyword-only parameters
    ("def f(self, *, k): pass", "def f(self): pass", False),
    ("def f(self, *, k): pass", "def f(self, *, k): pass", True),
    ("def f(self, *, k=1): pass", "def f(self): pass", True),
    ("def f(self, *, k): pass", "def f(self, *, k=1): pass", False),
    ("def f(self, *, k=1): pass", "def f(self, *, k): pass", True),
    ("def f(self): pass", "def f(self, *, k): pass", False),
    ("def f(self, **kw): pass", "def f(self, *, k): pass", True),
    ("def f(self, *, j, k=1): pass", "def f(self, *, j, k=2): pass", True),
    ("def f(self, *, j=1, k=1): pass", "def f(self, *, k): pass", True),
])
def test_compatible(existing, ours, expected):
    assert _compatible(existing, ours) is expected


def test_method_kind():
    assert structure.method_kind(_fn("def f(self): pass")) == ("FunctionDef", frozenset())
    assert structure.method_kind(_fn("@classmethod\n@functools.wraps(g)\nasync def f(cls): pass")) == (
        "AsyncFunctionDef", frozenset({"classmethod"}))
    assert structure.method_kind(_fn("@property\n@abstractmethod\ndef f(self): pass"))[1] == frozenset(
        {"property", "abstractmethod"})
    assert structure.signature(_fn("def f(self, a: int = 1, *args, k, **kw): pass")) == (
        "(self, a: int=1, *args, k, **kw)")


def test_same_code_ignores_positions_only():
    assert structure.same_code(_fn("def f(self):\n    return 1"), _fn("def f(self):  return 1"))
    assert not structure.same_code(_fn("def f(self):\n    return 1"), _fn("def f(self):\n    return 2"))


# ---- module names ----------------------------------------------------------------------------------


def test_module_bindings():
    tree = ast.parse(
        "import os.path\nimport numpy as np\nfrom typing import List, Tuple as T\n"
        "X = 1\nA, (B, C) = 1, (2, 3)\nY: int = 2\nZ += 1\n"
        "def helper(): inner = 1\nclass K:\n    member = 1\nasync def ahelper(): pass\n"
        "if True:\n    import json\nelse:\n    W = 1\n"
        "try:\n    import yaml\nexcept ImportError as exc:\n    yaml = None\n    E = 2\nelse:\n    F = 1\n"
        "finally:\n    G = 1\n"
        "for I in range(3):\n    J = I\nwhile False:\n    L = 1\nwith open('x') as fh:\n    M = 1\n"
        "print(N := 5)\n"
    )
    bound = structure.module_bindings(tree)
    assert bound is not None
    assert bound - {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"} == {
        "os", "np", "List", "T", "X", "A", "B", "C", "Y", "Z", "helper", "K", "ahelper", "json", "W", "yaml",
        "E", "F", "G", "I", "J", "L", "fh", "M", "N"}
    assert {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"} <= bound
    assert "inner" not in bound and "member" not in bound and "numpy" not in bound and "Tuple" not in bound


def test_module_bindings_with_a_star_import_cannot_tell():
    assert structure.module_bindings(ast.parse("import os\nfrom typing import *\nX = 1\n")) is None
    assert structure.module_bindings(ast.parse("if True:\n    from typing import *\n")) is None


def test_module_statements_walk_into_blocks_but_not_into_functions():
    tree = ast.parse(
        "if a:\n    b = 1\nelif c:\n    d = 1\nelse:\n    e = 1\n"
        "try:\n    f = 1\nexcept E:\n    g = 1\nelse:\n    h = 1\nfinally:\n    i = 1\n"
        "with x:\n    j = 1\nfor k in y:\n    m = 1\nelse:\n    n = 1\nwhile z:\n    o = 1\n"
        "def fn():\n    p = 1\nclass Cls:\n    q = 1\n"
    )
    names = [s.targets[0].id for s in structure.module_statements(tree.body) if isinstance(s, ast.Assign)]
    assert names == ["b", "d", "e", "f", "h", "i", "g", "j", "m", "n", "o"]


def test_module_statements_walk_into_except_star():
    tree = ast.parse("try:\n    a = 1\nexcept* ValueError:\n    b = 1\n")
    names = [s.targets[0].id for s in structure.module_statements(tree.body) if isinstance(s, ast.Assign)]
    assert names == ["a", "b"]


def test_free_names():
    func = _fn(
        "def f(self, a, *args, k, **kw):\n"
        "    import os.path as osp, json, xml.dom\n"
        "    from typing import cast\n"
        "    local = a + b\n"
        "    def inner(): return c\n"
        "    class Inner: pass\n"
        "    try:\n        pass\n    except Exc as err:\n        err\n"
        "    match local:\n        case [first, *others]: pass\n        case {'k': _, **rest}: pass\n"
        "        case q: pass\n"
        "    total = [x for x in d]\n"
        "    return osp, json, cast, local, inner, Inner, args, k, kw, self, total, first, others, rest, q, "
        "__class__, e, xml\n"
    )
    assert structure.free_names(func) == {"b", "c", "Exc", "d", "e", "__class__"}


def test_registered():
    def reg(code: str) -> bool:
        found = structure.registered(ast.parse(code), "EntryClass", "Demo")
        assert isinstance(found, bool)
        return found

    assert reg("EntryClass = [Demo]")
    assert reg("EntryClass = (Other, Demo)")
    assert reg("EntryClass = Demo")
    assert reg("EntryClass: list = [Demo]")
    assert reg("EntryClass = [Other]\nEntryClass += [Demo]")
    assert reg("EntryClass = [Demo]\nEntryClass += [Other]")  # adding another keeps ours
    assert reg("if True:\n    EntryClass = [Demo]")
    assert not reg("EntryClass = [Other]")
    assert not reg("EntryClass = [Demo]\nEntryClass = [Other]")  # the last assignment wins
    assert not reg("Registry = [Demo]")
    assert not reg("EntryClass: list")
    assert not reg("EntryClass = [Demo.sub]")
    assert not reg("models.EntryClass = [Demo]")
    assert not reg("EntryClass += [Other]")
    assert not reg("")
