"""Python sources parsed once per test module, for the tests that walk the code (a rule's one home, the
architecture): each rule walks every module of sglstack, and parsing them is most of a walk's time.

`parse` is `ast.parse` of a source text, cached; `parsed_once_a_module` (autouse in the module that imports
it) empties the cache as the module ends, so a worker does not keep every tree for the rest of the run.
Callers only read the trees."""

from __future__ import annotations

import ast
import functools

import pytest


@functools.cache
def parse(source: str) -> ast.Module:
    return ast.parse(source)


@pytest.fixture(scope="module", autouse=True)
def parsed_once_a_module():
    yield
    parse.cache_clear()
