"""Whose a compose project is (deploy/checks.py, pure; issue 35, planted bug P49): every container of the project
must carry this stack's label, not only the first; a project holding this stack's containers and one of another
stack's (or of no stack) is refused, naming the foreign one, whatever order the engine lists them in."""

from __future__ import annotations

import itertools

import pytest

from sglstack.deploy.checks import project_owner_problem

MINE = [("sglstack-s-sglang-1", "s"), ("sglstack-s-sidecar-1", "s")]


@pytest.mark.parametrize("foreign,whose", [
    (("zz-other-1", "t"), "stack 't'"),
    (("zz-other-1", None), "no sglstack stack (it has no io.sglstack.stack label)"),
    (("aa-other-1", "t"), "stack 't'"),
])
def test_one_foreign_container_among_this_stacks_refuses_the_project(foreign, whose):
    for order in itertools.permutations([*MINE, foreign]):
        assert project_owner_problem("sglstack-s", "s", list(order)) == (
            f"compose project sglstack-s holds container {foreign[0]} of {whose}, not of stack 's': it is not this "
            "stack's to replace or remove (nothing was changed)")


def test_a_project_of_this_stacks_containers_only_or_of_none_is_this_stacks():
    assert project_owner_problem("sglstack-s", "s", MINE) is None
    assert project_owner_problem("sglstack-s", "s", []) is None
