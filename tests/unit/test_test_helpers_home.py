"""Test helpers live in tests/lib/: a test file imports no other test file (issue 37), but for the debts listed."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Test files still imported by another for their fixtures, each waiting for its move to tests/lib/ (a test fails
# when one is added unlisted, or moved and still listed): none left.
DEBTS: set[str] = set()


def _imported_test_files(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[-1])
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[-1] for alias in node.names}
    return {n for n in names if n.startswith("test_")}


def test_a_test_file_imports_no_other_test_file():
    imported = {name for p in sorted(TESTS.rglob("test_*.py"))
                for name in _imported_test_files(p.read_text(encoding="utf-8"))}
    assert imported - DEBTS == set(), "move the shared helpers to tests/lib/"
    assert DEBTS - imported == set(), "remove the moved files from DEBTS"


def test_the_finder_sees_each_spelling():
    assert _imported_test_files("from test_a import x\nimport test_b\nfrom lib import y\nfrom . import z\n") == {
        "test_a", "test_b"}
