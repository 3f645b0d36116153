"""The k8s deploy's node check, pure (a kubectl stand-in object, the image's platforms given): the pods' node
affinity is the stack's platforms, so a cluster with no node of them is refused before anything is applied."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import DeployError
from sglstack.deploy import nodes as node_check
from sglstack.publish import platforms

ROOT = Path(__file__).resolve().parents[2]
REF = "registry.example/team/sglang@sha256:" + "a" * 64


def _check(monkeypatch, stack_name: str, nodes: tuple[str, ...], served: tuple[str, ...]) -> list[str]:
    monkeypatch.setattr(platforms, "reference_platforms", lambda ref, client=None: served)
    said: list[str] = []
    kubectl = SimpleNamespace(context="gb200-nvl72", node_platforms=lambda: nodes)
    node_check.check_nodes(kubectl, load_matrix(ROOT / "stacks.yaml").get(stack_name), REF, said.append)  # type: ignore[arg-type]
    return said


def test_a_stack_of_amd64_on_a_cluster_of_arm64_nodes_is_refused_even_when_the_image_serves_arm64(monkeypatch):
    """An index of both platforms passed the image check, the LeaderWorkerSet was applied with pods bound to amd64
    nodes, and on a cluster of Grace nodes they stayed Pending until the wait gave up."""
    with pytest.raises(DeployError) as err:
        _check(monkeypatch, "pypi-cu130", ("linux/arm64",), ("linux/amd64", "linux/arm64"))
    assert str(err.value) == ("stack 'pypi-cu130': its pods run only on linux/amd64 nodes (the stack's platforms), "
                              "and every node of gb200-nvl72 is linux/arm64: nothing could be scheduled (nothing was "
                              "pulled or changed)")
    assert _check(monkeypatch, "pypi-cu130", ("linux/amd64", "linux/arm64"), ("linux/amd64", "linux/arm64")) == []
    assert _check(monkeypatch, "pypi-cu130-gb", ("linux/arm64",), ("linux/amd64", "linux/arm64")) == []
