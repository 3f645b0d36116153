"""Platforms at the edges a first fixture does not reach: a cluster of both platforms with an image of one, a
reference that names both a tag and a digest (the digest decides, the tag may have moved), and the per-position
acceptance of a draft (position 1 first, every position counted). Planted bugs P86-P88
(`benchmarks/planted_bugs.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from memory_registry import MemoryRegistry

from sglstack.config.matrix import load_matrix
from sglstack.core.errors import DeployError
from sglstack.deploy import nodes as node_check
from sglstack.publish import platforms
from sglstack.registry.client import DOCKER_MANIFEST, compute_digest
from sglstack.smoke.acceptance import per_position

ROOT = Path(__file__).resolve().parents[2]
PATH = "team/sglang"
REF = f"registry.example/{PATH}@sha256:" + "a" * 64

# ---- a cluster of both platforms: every platform the pods may land on must be served ------------------------


def _check(monkeypatch, nodes: tuple[str, ...], served: tuple[str, ...]) -> list[str]:
    for module in (platforms, node_check):  # the image check's and the mixed cluster's (its own import)
        monkeypatch.setattr(module, "reference_platforms", lambda ref, client=None: served)
    said: list[str] = []
    kubectl = SimpleNamespace(context="gh200-mixed", node_platforms=lambda: nodes)
    stack = load_matrix(ROOT / "stacks.yaml").get("pypi-cu130-gb")  # linux/amd64 and linux/arm64
    node_check.check_nodes(kubectl, stack, REF, said.append)  # type: ignore[arg-type]
    return said


def test_an_image_of_one_platform_on_a_cluster_of_both_is_refused(monkeypatch):
    with pytest.raises(DeployError) as err:
        _check(monkeypatch, ("linux/amd64", "linux/arm64"), ("linux/amd64",))
    assert str(err.value) == (f"stack 'pypi-cu130-gb': {REF} is for linux/amd64, and gh200-mixed has linux/arm64 nodes "
                              "the pods may land on (the stack is linux/amd64 linux/arm64): the image cannot run there "
                              "(nothing was pulled or changed)")


@pytest.mark.parametrize(("nodes", "served"), [
    (("linux/amd64", "linux/arm64"), ("linux/amd64", "linux/arm64")),
    (("linux/arm64",), ("linux/arm64",)),
    (("linux/amd64",), ("linux/amd64", "linux/arm64")),
])
def test_an_image_that_serves_every_platform_the_pods_may_land_on_passes(monkeypatch, nodes, served):
    assert _check(monkeypatch, nodes, served) == []


# ---- a reference of a tag and a digest: the digest is what is read ---------------------------------------


def _image(registry: MemoryRegistry, platform: str, tag: str | None = None) -> str:
    os_name, arch = platform.split("/")
    config = registry.put_blob(PATH, json.dumps({"os": os_name, "architecture": arch, "config": {}}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}, "layers": []}).encode()
    return registry.put_manifest(PATH, tag or compute_digest(body), body, DOCKER_MANIFEST)


def test_a_reference_with_a_tag_and_a_digest_is_read_by_its_digest(monkeypatch):
    registry = MemoryRegistry()
    monkeypatch.setattr(platforms, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    tested = _image(registry, "linux/amd64")
    _image(registry, "linux/arm64", tag="v1")  # the tag moved on to another image since
    assert platforms.reference_platforms(f"registry.example/{PATH}:v1@{tested}") == ("linux/amd64",)
    assert platforms.reference_platforms(f"registry.example/{PATH}:v1") == ("linux/arm64",)
    assert platforms.reference_platforms(f"registry.example/{PATH}@{tested}") == ("linux/amd64",)


# ---- per-position acceptance: position p is the share of steps that accepted at least p drafts ---------------


def test_per_position_acceptance_starts_at_position_one_and_counts_every_position():
    # 10 verify steps: 2 accepted no draft, 3 one, 4 two, 1 three
    assert per_position([2, 3, 4, 1]) == pytest.approx([0.8, 0.5, 0.1])
    assert per_position([5, 0]) == [0.0]
    assert per_position([0, 0, 7]) == [1.0, 1.0]
    assert per_position([]) == [] and per_position([0, 0]) == []
