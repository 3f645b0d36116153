"""The ast rules apply and verify share (sglstack/inimage/patchkit/structure.py), and apply/verify on small trees,
each refusal as its exact one-line message.

Pure: our own small patches (tests/lib/patch_fixtures.make_patch) on small trees under tmp_path.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest
from patch_fixtures import make_patch

from sglstack.inimage import patchkit
from sglstack.inimage.patchkit import (
    PatchAlreadyUpstream,
    PatchConflict,
    PatchDrift,
    PatchModuleLevelDef,
    PatchOutOfRange,
    PatchUnboundName,
    PatchUsageError,
    PatchVerifyError,
    apply_patches,
    structure,
    verify_patches,
)

TARGET = '"""A module."""\n\n\nclass Demo:\n    x = 1\n\n    def first(self):\n        return 1\n\n\nEntry = Demo\n'
METHODS = "class Demo:\n    def added(self):\n        return 2\n"
HEAD = "patch 'demo': sglang/demo.py: class Demo: "


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fn(code: str) -> ast.FunctionDef:
    node = ast.parse(code).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return node  # type: ignore[return-value]


def _compatible(existing: str, ours: str) -> bool:
    return structure.compatible(_fn(existing), _fn(ours))


def _setup(tmp_path: Path, target: str = TARGET, methods: str = METHODS, names=("added",), **kw) -> tuple[Path, Path]:
    patches = make_patch(tmp_path / "patches", "demo", file="sglang/demo.py", class_name="Demo", methods=names,
                         source=methods, **kw)
    root = tmp_path / "tree"
    (root / "sglang").mkdir(parents=True, exist_ok=True)
    (root / "sglang" / "demo.py").write_text(target)
    return root, patches


def _patched(root: Path) -> str:
    return (root / "sglang" / "demo.py").read_text()


def _refused(exc_type, root, patches, *args, **kwargs) -> str:
    before = (root / "sglang" / "demo.py").read_bytes() if (root / "sglang" / "demo.py").exists() else None
    with pytest.raises(exc_type) as info:
        apply_patches(root, patches, ["demo"], *args, **kwargs)
    if before is not None:
        assert (root / "sglang" / "demo.py").read_bytes() == before
    return str(info.value)


def _verify_refused(root, patches, manifest=None) -> str:
    with pytest.raises(PatchVerifyError) as info:
        verify_patches(root, patches, ["demo"], manifest)
    return str(info.value)


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


# ---- apply on small trees ----------------------------------------------------------------------------


def test_apply_inserts_after_the_class_and_keeps_everything_else(tmp_path):
    root, patches = _setup(tmp_path)
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert _patched(root) == TARGET.replace(
        "return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    assert (result.id, result.file, result.class_name, result.methods, result.status) == (
        "demo", "sglang/demo.py", "Demo", ("added",), patchkit.APPLIED)
    assert (result.inserted, result.upstream_methods, result.notice, result.sglang_version) == (
        ("added",), (), "", "0.5.9")
    assert result.sha256_before == _sha(TARGET.encode())
    assert result.sha256_after == _sha(_patched(root).encode())
    assert result.to_manifest() == {
        "id": "demo", "file": "sglang/demo.py", "class": "Demo", "methods": ["added"], "status": "applied",
        "sha256_before": result.sha256_before, "sha256_after": result.sha256_after, "sglang_version": "0.5.9",
        "inserted": ["added"], "upstream_methods": []}
    (again,) = apply_patches(root, patches, ["demo", "demo"], "0.5.9")  # one id twice is one patch
    assert again.status == patchkit.ALREADY_APPLIED and again.inserted == () and again.notice == ""
    assert again.sha256_before == again.sha256_after == result.sha256_after


def test_apply_reindents_to_the_target_and_keeps_strings(tmp_path):
    methods = "class Demo:\n  def added(self):\n    if True:\n      return '''a\n  b'''\n\n    return 2\n"
    target = "class Demo:\n\tdef first(self):\n\t\treturn 1\n"
    root, patches = _setup(tmp_path, target, methods)
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == target + "\n\tdef added(self):\n\t\tif True:\n\t\t\treturn '''a\n  b'''\n\n\t\treturn 2\n"


def test_apply_to_a_class_without_a_final_newline_and_crlf(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r\n    x = 1")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r\n    x = 1\r\n\r\n    def added(self):\r\n        return 2\r\n")


def test_apply_to_a_cr_file_without_a_final_newline_keeps_cr(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r    x = 1")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r    x = 1\r\r    def added(self):\r        return 2\r")


def test_apply_to_a_cr_file_with_lines_after_the_class(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r    x = 1\r\r\rEntry = Demo\r")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r    x = 1\r\r    def added(self):\r        return 2\r\r\rEntry = Demo\r")


def test_whitespace_only_lines_of_a_method_become_empty_lines(tmp_path):
    methods = "class Demo:\n  def added(self):\n    x = 1\n    \n    return x\n"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n", methods)
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == "class Demo:\n    x = 1\n\n    def added(self):\n        x = 1\n\n        return x\n"


def test_two_patches_on_one_file_see_each_other(tmp_path):
    original = "# coding: latin-1\nclass Demo:\n    x = '\u00e9'\n".encode("latin-1")
    root, patches = _setup(tmp_path)
    (root / "sglang/demo.py").write_bytes(original)
    make_patch(patches, "more", file="sglang/demo.py", class_name="Demo", methods=("more",),
               source="class Demo:\n    def more(self):\n        return self.added()\n")
    first, second = apply_patches(root, patches, ["demo", "more"])
    data = (root / "sglang/demo.py").read_bytes()
    assert data == (b"# coding: latin-1\nclass Demo:\n    x = '\xe9'\n\n    def added(self):\n        return 2\n"
                    b"\n    def more(self):\n        return self.added()\n")
    # both results carry the file's hashes at the start and at the end of the run
    assert first.sha256_before == second.sha256_before == _sha(original)
    assert first.sha256_after == second.sha256_after == _sha(data)
    assert (first.inserted, second.inserted) == (("added",), ("more",))


def test_the_line_ending_is_the_class_last_lines(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\r\n    x = 1\n")
    apply_patches(root, patches, ["demo"])
    assert (root / "sglang/demo.py").read_bytes() == (
        b"class Demo:\r\n    x = 1\n\n    def added(self):\n        return 2\n")


def test_a_longer_class_without_a_final_newline(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n    y = 2")
    apply_patches(root, patches, ["demo"])
    assert _patched(root) == "class Demo:\n    x = 1\n    y = 2\n\n    def added(self):\n        return 2\n"


def test_a_class_body_on_the_class_line(tmp_path):
    root, patches = _setup(tmp_path, "class Demo: x = 1\n")
    assert _refused(PatchDrift, root, patches) == (
        HEAD + "the class body is on the class line (1): no indentation to insert methods with")


def test_a_missing_file(tmp_path):
    root, patches = _setup(tmp_path)
    (root / "sglang/demo.py").unlink()
    assert _refused(PatchDrift, root, patches) == HEAD + f"file is missing under {root}"


def test_a_target_that_does_not_compile(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    x = (\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "does not compile: SyntaxError: '(' was never closed (line 2)"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n  y = 2\n")
    assert _refused(PatchDrift, root, patches) == HEAD + (
        "does not compile: IndentationError: unindent does not match any outer indentation level (line 3): "
        "methods appended at module level (the `cat >>` mistake)?")
    assert _verify_refused(root, patches) == HEAD + (
        "does not compile: IndentationError: unindent does not match any outer indentation level (line 3): "
        "methods appended at module level (the `cat >>` mistake)?")


def test_the_class_missing_or_twice(tmp_path):
    root, patches = _setup(tmp_path, "def Demo():\n    pass\nif True:\n    class Demo:\n        pass\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "class not found at the top level of the file"
    assert _verify_refused(root, patches) == HEAD + "class not found at the top level of the file"
    root, patches = _setup(tmp_path, "class Demo:\n    pass\n\n\nclass Demo:\n    pass\n")
    assert _refused(PatchDrift, root, patches) == HEAD + "class defined 2 times (lines 1, 5)"
    assert _verify_refused(root, patches) == HEAD + "class defined 2 times (lines 1, 5)"


def test_a_module_level_function_of_that_name(tmp_path):
    root, patches = _setup(tmp_path, TARGET + "\ntry:\n    pass\nexcept Exception:\n    async def added(self):\n"
                                              "        return 2\n")
    message = (HEAD + "function 'added' is defined at module level (line 16), outside the class: the `cat >>` "
               "mistake")
    assert _refused(PatchModuleLevelDef, root, patches) == message
    assert _verify_refused(root, patches) == message


def test_a_member_bound_twice_or_not_a_method(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    added = 1\n\n    def added(self):\n        return 2\n")
    assert _refused(PatchConflict, root, patches) == HEAD + "'added' is defined 2 times in the class (lines 2, 4)"
    assert _verify_refused(root, patches) == HEAD + "'added' is defined 2 times in the class (lines 2, 4)"
    root, patches = _setup(tmp_path, "class Demo:\n    x = 1\n    added: int = 1\n")
    assert _refused(PatchConflict, root, patches) == (
        HEAD + "'added' is already a class member that is not a method (line 3)")


def test_an_incompatible_existing_method(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a):\n        return a\n")
    assert _refused(PatchConflict, root, patches) == HEAD + (
        "method 'added' is already in the class (line 2) with a different body and an incompatible signature "
        "(self, a), patch has (self)")
    assert _verify_refused(root, patches) == HEAD + "method 'added' has signature (self, a), expected (self)"


def test_a_compatible_different_method_is_upstream(tmp_path):
    target = "class Demo:\n    def added(self, a=1):\n        return a\n"
    root, patches = _setup(tmp_path, target)
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.inserted, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, (), ("added",))
    assert result.notice == (
        "patch 'demo': sglang 0.5.9 already has added upstream; skipped them, the patch can be retired")
    assert _patched(root) == target
    (result,) = apply_patches(root, patches, ["demo"])
    assert result.notice == (
        "patch 'demo': sglang (unknown version) already has added upstream; skipped them, the patch can be retired")
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.9", "error") == HEAD + (
        "sglang 0.5.9 already has added: retire this patch from the stack (policy on_upstream=error)")
    assert _refused(PatchAlreadyUpstream, root, patches, None, "error") == HEAD + (
        "sglang (unknown version) already has added: retire this patch from the stack (policy on_upstream=error)")


def test_upstream_notice_names_fixed_in_and_retire(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a=1):\n        return a\n")
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + 'fixed_in = "0.5.10"\nretire = "drop it"\n')
    (result,) = apply_patches(root, patches, ["demo"], "0.5.10")
    assert result.notice == ("patch 'demo': sglang 0.5.10 already has added upstream (fixed in 0.5.10); skipped "
                             "them, the patch can be retired: drop it")
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.10", "error") == HEAD + (
        "sglang 0.5.10 already has added, fixed upstream in 0.5.10: retire this patch from the stack "
        "(policy on_upstream=error)")


def test_a_partly_applied_patch_inserts_the_rest(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self):\n        return 2\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"))
    (result,) = apply_patches(root, patches, ["demo"])
    assert (result.status, result.inserted, result.upstream_methods) == (patchkit.APPLIED, ("more",), ())
    assert _patched(root) == target + "\n    def more(self):\n        return 3\n"


def test_identical_methods_outside_the_range_are_upstream(tmp_path):
    target = "class Demo:\n    def added(self):\n        return 2\n"
    root, patches = _setup(tmp_path, target, applies_to="<0.5")
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("added",))


def test_outside_the_range_identical_and_differing_methods_are_all_upstream(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self, a=1):\n        return a\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"), applies_to="<0.5")
    (result,) = apply_patches(root, patches, ["demo"], "0.5.9")
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("more", "added"))
    assert result.notice == ("patch 'demo': sglang 0.5.9 already has more, added upstream; skipped them, the patch "
                             "can be retired")


def test_out_of_range(tmp_path):
    root, patches = _setup(tmp_path, applies_to="<0.5")
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and the class lacks added")
    (root / "sglang/demo.py").unlink()
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and has no such file")
    # in range, a missing file is drift, not out of range
    assert _refused(PatchDrift, root, patches, "0.4") == HEAD + f"file is missing under {root}"


def test_out_of_range_names_every_missing_method(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    root, patches = _setup(tmp_path, TARGET, methods, names=("added", "more"), applies_to="<0.5")
    assert _refused(PatchOutOfRange, root, patches, "0.5.9") == HEAD + (
        "sglang 0.5.9 is outside applies_to '<0.5' and the class lacks added, more")


def test_policy_error_names_every_upstream_method(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return 2\n\n    def more(self):\n        return 3\n"
    target = "class Demo:\n    def added(self, a=1):\n        return a\n\n    def more(self, b=1):\n        return b\n"
    root, patches = _setup(tmp_path, target, methods, names=("added", "more"))
    assert _refused(PatchAlreadyUpstream, root, patches, "0.5.9", "error") == HEAD + (
        "sglang 0.5.9 already has added, more: retire this patch from the stack (policy on_upstream=error)")


def test_a_declared_after_hash_for_the_version(tmp_path):
    root, patches = _setup(tmp_path)
    before = _sha(TARGET.encode())
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'[sha256_before]\n"0.5.9" = "{before}"\n'
                    f'[sha256_after]\n"0.5.9" = "{"0" * 64}"\n')
    applied = TARGET.replace("return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    assert _refused(PatchVerifyError, root, patches, "0.5.9") == HEAD + (
        f"sha256 after patching {_sha(applied.encode())} is not the declared {'0' * 64}")


def test_unbound_names(tmp_path):
    methods = "class Demo:\n    def added(self):\n        return Zeta(os, Alpha, len, __class__, Entry, x)\n"
    root, patches = _setup(tmp_path, TARGET, methods)
    assert _refused(PatchUnboundName, root, patches) == HEAD + (
        "method 'added' uses Alpha, Zeta, os, x, which the module does not import or define")
    # a star import: the engine cannot tell, and the apply goes ahead
    root, patches = _setup(tmp_path, "from os import *\n" + TARGET, methods)
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED


def test_a_declared_after_hash_that_does_not_match(tmp_path):
    root, patches = _setup(tmp_path)
    before = _sha(TARGET.encode())
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'sha256_before = "{before}"\nsha256_after = "{"0" * 64}"\n')
    applied = TARGET.replace("return 1\n", "return 1\n\n    def added(self):\n        return 2\n")
    after = _sha(applied.encode())
    assert _refused(PatchVerifyError, root, patches) == HEAD + (
        f"sha256 after patching {after} is not the declared {'0' * 64}")
    # declared for this version only, the after hash is checked for it
    toml.write_text(toml.read_text().replace(f'sha256_after = "{"0" * 64}"', f'sha256_after = "{after}"'))
    assert apply_patches(root, patches, ["demo"], "0.5.9")[0].sha256_after == after


def test_an_after_hash_alone_is_not_checked(tmp_path):
    """Without a declared pre-image the result is not known exactly, so the after hash cannot be required."""
    root, patches = _setup(tmp_path)
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'sha256_after = "{"0" * 64}"\n')
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED


def test_a_declared_preimage_for_the_version(tmp_path):
    root, patches = _setup(tmp_path)
    toml = patches / "demo" / "patch.toml"
    toml.write_text(toml.read_text() + f'[sha256_before]\n"0.5.9" = "{"0" * 64}"\n')
    sha = _sha(TARGET.encode())
    assert _refused(patchkit.PatchPreimageMismatch, root, patches, "0.5.9") == HEAD + (
        f"sha256 {sha} is not the declared pre-image {'0' * 64} for sglang 0.5.9")
    toml.write_text(toml.read_text().replace('"0.5.9"', '"*"'))
    assert _refused(patchkit.PatchPreimageMismatch, root, patches) == HEAD + (
        f"sha256 {sha} is not the declared pre-image {'0' * 64}")


def test_the_pip_record_is_the_preimage(tmp_path):
    import base64
    import hashlib

    root, patches = _setup(tmp_path)
    dist = root / "sglang-0.5.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n\nbody\n")

    def record(data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return (f"sglang/demo.pyc,sha256=x,1\nsglang/other.py,sha256={digest},1\n"
                f"sglang/demo.py,md5=abc,1\nsglang/demo.py,sha256={digest},{len(data)}\n")

    (dist / "RECORD").write_text(record(b"something else"))
    sha = _sha(TARGET.encode())
    other = hashlib.sha256(b"something else").hexdigest()
    assert _refused(patchkit.PatchPreimageMismatch, root, patches) == HEAD + (
        f"sha256 {sha} differs from {other} recorded in sglang-0.5.9.dist-info/RECORD: the file was changed "
        "after pip installed it")
    (dist / "RECORD").write_text(record(TARGET.encode()))
    (result,) = apply_patches(root, patches, ["demo"])
    assert result.sglang_version == "0.5.9" and result.status == patchkit.APPLIED
    # identical methods in a file exactly as pip installed it: upstream has them, not an earlier run
    (dist / "RECORD").write_text(record(_patched(root).encode()))
    (result,) = apply_patches(root, patches, ["demo"])
    assert (result.status, result.upstream_methods) == (patchkit.ALREADY_UPSTREAM, ("added",))


def test_an_unknown_policy(tmp_path):
    root, patches = _setup(tmp_path)
    assert _refused(PatchUsageError, root, patches, None, "warn") == (
        "unknown policy 'warn' (expected one of: notice, error)")


def test_the_entry_class_registration(tmp_path):
    root, patches = _setup(tmp_path, entry_class="Entry")
    assert apply_patches(root, patches, ["demo"])[0].status == patchkit.APPLIED
    root, patches = _setup(tmp_path / "two", TARGET.replace("Entry = Demo", "Entry = None"), entry_class="Entry")
    assert _refused(PatchVerifyError, root, patches) == HEAD + (
        "the class is not registered in Entry: SGLang would not find the architecture")


# ---- verify on small trees ---------------------------------------------------------------------------


def test_verify_without_and_with_a_manifest(tmp_path):
    root, patches = _setup(tmp_path)
    assert _verify_refused(root, patches) == HEAD + "method 'added' is not a member of the class"
    results = apply_patches(root, patches, ["demo"], "0.5.9")
    sha = results[0].sha256_after
    (plain,) = verify_patches(root, patches, ["demo", "demo"])
    assert (plain.status, plain.sha256_before, plain.sha256_after, plain.sglang_version) == (
        patchkit.VERIFIED, sha, sha, None)
    assert (plain.inserted, plain.upstream_methods, plain.methods) == ((), (), ("added",))
    manifest = [r.to_manifest() for r in results]
    (checked,) = verify_patches(root, patches, ["demo"], manifest)
    assert checked == patchkit.PatchResult(
        "demo", "sglang/demo.py", "Demo", ("added",), patchkit.APPLIED, results[0].sha256_before, sha, "0.5.9",
        ("added",), ())
    assert _verify_refused(root, patches, []) == HEAD + "not in the manifest: was it applied?"
    assert _verify_refused(root, patches, [{**manifest[0], "file": "sglang/x.py"}]) == (
        HEAD + "the manifest records file 'sglang/x.py'")
    assert _verify_refused(root, patches, [{**manifest[0], "sha256_after": "0" * 64}]) == HEAD + (
        f"sha256 {sha} is not {'0' * 64} recorded in the manifest: the file changed after patching")
    # an entry without the optional fields reads as empty
    (bare,) = verify_patches(root, patches, ["demo"], [{"id": "demo", "file": "sglang/demo.py", "sha256_after": sha}])
    assert (bare.status, bare.sha256_before, bare.sglang_version, bare.inserted, bare.upstream_methods) == (
        patchkit.VERIFIED, sha, None, (), ())


def test_verify_reads_the_upstream_methods_from_the_manifest(tmp_path):
    root, patches = _setup(tmp_path, "class Demo:\n    def added(self, a=1):\n        return a\n")
    manifest = [r.to_manifest() for r in apply_patches(root, patches, ["demo"], "0.5.9")]
    assert manifest[0]["upstream_methods"] == ["added"] and manifest[0]["status"] == patchkit.ALREADY_UPSTREAM
    (result,) = verify_patches(root, patches, ["demo"], manifest)
    assert (result.status, result.upstream_methods, result.inserted) == (patchkit.ALREADY_UPSTREAM, ("added",), ())


def test_verify_checks_an_inserted_method_is_ours(tmp_path):
    root, patches = _setup(tmp_path)
    manifest = [r.to_manifest() for r in apply_patches(root, patches, ["demo"])]
    (root / "sglang/demo.py").write_text(_patched(root).replace("return 2", "return 3"))
    manifest[0]["sha256_after"] = _sha(_patched(root).encode())
    assert _verify_refused(root, patches, manifest) == HEAD + "method 'added' (line 10) differs from the patch"
    # an upstream method (not inserted by us) may differ
    manifest[0]["inserted"] = []
    assert verify_patches(root, patches, ["demo"], manifest)[0].status == patchkit.APPLIED


def test_manifest_files(tmp_path):
    root, patches = _setup(tmp_path)
    results = apply_patches(root, patches, ["demo"])
    path = tmp_path / "m.json"
    patchkit.write_manifest(path, results)
    assert path.read_text() == json.dumps([r.to_manifest() for r in results], indent=2) + "\n"
    assert patchkit.read_manifest(path) == [r.to_manifest() for r in results]
    path.write_text("{}")
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(path)
    assert str(info.value) == f"manifest {path}: expected a JSON list of objects"
    path.write_text("[1]")
    with pytest.raises(PatchUsageError, match=r"expected a JSON list of objects$"):
        patchkit.read_manifest(path)
    path.write_text("[")
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(path)
    assert str(info.value) == f"manifest {path}: Expecting value: line 1 column 2 (char 1)"
    with pytest.raises(PatchUsageError) as info:
        patchkit.read_manifest(tmp_path / "none.json")
    assert str(info.value) == (f"manifest {tmp_path / 'none.json'}: [Errno 2] No such file or directory: "
                               f"'{tmp_path / 'none.json'}'")


# ---- the installed version ---------------------------------------------------------------------------


def _dist(root: Path, version: str, metadata: str | None = None) -> None:
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(metadata or f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nx\n")


def test_detect_and_resolve_the_version(tmp_path):
    assert patchkit.detect_sglang_version(tmp_path) is None
    _dist(tmp_path, "0.5.9")
    assert patchkit.detect_sglang_version(tmp_path) == "0.5.9"
    assert patchkit.resolve_version(tmp_path, None) == "0.5.9"
    assert patchkit.resolve_version(tmp_path, "0.5.9") == "0.5.9"
    assert patchkit.resolve_version(tmp_path, "v0.5.9.0") == "v0.5.9.0"  # the same version, as given
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, "0.5.10")
    assert str(info.value) == f"--sglang-version 0.5.10 does not match sglang 0.5.9 installed under {tmp_path}"
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, "latest")
    assert str(info.value) == "sglang version: 'latest' is not a PEP 440 version"
    _dist(tmp_path, "0.5.10")  # two installs: cannot tell
    assert patchkit.detect_sglang_version(tmp_path) is None
    assert patchkit.resolve_version(tmp_path, "0.5.10") == "0.5.10"


def test_a_bad_installed_version(tmp_path):
    _dist(tmp_path, "0.5.9", "Metadata-Version: 2.1\nName: sglang\nVersion: banana\n")
    with pytest.raises(PatchUsageError) as info:
        patchkit.resolve_version(tmp_path, None)
    assert str(info.value) == "sglang version: 'banana' is not a PEP 440 version"
    meta = tmp_path / "sglang-0.5.9.dist-info" / "METADATA"
    meta.write_bytes(b"Version: caf\xe9\n")
    with pytest.raises(PatchUsageError) as info:
        patchkit.detect_sglang_version(tmp_path)
    assert str(info.value) == (f"{meta}: cannot read the installed version: 'utf-8' codec can't decode byte 0xe9 "
                               "in position 12: invalid continuation byte")
