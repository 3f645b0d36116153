"""logs, undeploy and rollback of a stack with nothing deployed: one line saying so, exit 1, nothing written
(not compose's "Couldn't find env file", not "removed" of nothing); a stack not in the matrix stays bad
input (exit 2) with "did you mean"."""

from __future__ import annotations

import secrets

import pytest
from clirun import run_invoke

pytestmark = pytest.mark.docker  # asks the engine whether the stack's compose project has a container


@pytest.fixture
def stack(tmp_path):
    name = f"nodeploy-{secrets.token_hex(4)}"  # a project no one on this engine has
    (tmp_path / "stacks.yaml").write_text(f"stacks:\n  {name}:\n    base_image: debian:bookworm-slim\n"
                                          "    sglang: {version: 0.5.9}\n    serving: {model: org/model}\n")
    return name


def _run(tmp_path, *args):
    env = {"SGLSTACK_BUILD_DIR": str(tmp_path / "build"), "SGLSTACK_DOCKER_CLI": "/usr/bin/docker"}
    proc = run_invoke(*args, "--stacks-file", str(tmp_path / "stacks.yaml"), cwd=tmp_path, env=env, timeout=120)
    assert proc.stdout == ""
    assert not (tmp_path / "build").exists()  # no lock, no record
    return proc.returncode, proc.stderr.strip()


@pytest.mark.parametrize("task", ["logs", "undeploy", "rollback"])
def test_a_stack_with_nothing_deployed_says_so(tmp_path, stack, task):
    assert _run(tmp_path, task, "--stack", stack) == (
        1, f"error: stack '{stack}' is not deployed (compose project sglstack-{stack} has no container on the "
           "engine)")


def test_a_k8s_rollback_with_nothing_deployed_says_so_before_asking_kubectl(tmp_path, stack):
    assert _run(tmp_path, "rollback", "--on", "k8s", "--stack", stack) == (
        1, f"error: stack '{stack}' is not deployed on k8s (no k8s deployment in "
           f"{tmp_path / 'build' / stack / 'deployments.jsonl'})")


@pytest.mark.parametrize("task", [("logs",), ("undeploy",), ("rollback",), ("rollback", "--on", "k8s")])
def test_a_stack_not_in_the_matrix_is_still_bad_input(tmp_path, stack, task):
    code, line = _run(tmp_path, *task, "--stack", stack[:-1])
    assert code == 2 and line.endswith(f"did you mean '{stack}'?"), line
