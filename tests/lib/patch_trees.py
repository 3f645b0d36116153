"""The patch engine tests' small trees (tests/unit/test_patch_structure.py, test_patch_apply.py,
test_patch_verify.py): a target module, the methods a patch inserts, a tree set up under tmp_path with our own
small patch (tests/lib/patch_fixtures.make_patch), and each refusal's one line."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest
from patch_fixtures import make_patch

from sglstack.inimage.patchkit import (
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
