"""No test's outcome depends on how fast this machine runs it: Hypothesis's per-example deadline (200 ms
by default) is off for every test, and no test sets one of its own (tests/conftest.py says why)."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent.parent


def test_the_loaded_profile_has_no_deadline():
    assert settings.default.deadline is None


def test_settings_that_name_other_fields_keep_no_deadline():
    assert settings(max_examples=3, derandomize=True).deadline is None


def test_no_test_sets_a_deadline_of_its_own():
    set_here = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                    "settings", "register_profile"):
                for kw in node.keywords:
                    if kw.arg == "deadline" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                        set_here.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert set_here == []
