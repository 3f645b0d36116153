"""An index's platforms are what its children are: each child read before a promotion or a deploy trusts the list
(`publish.platforms.checked_platforms`), against the in-memory registry (which, unlike distribution 2.8, keeps an
index whose child is gone: what a deletion or a garbage collection leaves)."""

from __future__ import annotations

import json

import pytest
from memory_registry import MemoryRegistry

from sglstack.publish.platforms import IndexNotItsPlatforms, checked_platforms
from sglstack.registry.client import DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, compute_digest

PATH = "team/multi"


def _image(registry: MemoryRegistry, arch: str, variant: str = "") -> str:
    config = registry.put_blob(PATH, json.dumps({"os": "linux", "architecture": arch,
                                                 **({"variant": variant} if variant else {})}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": config, "size": 1},
        "layers": []}).encode()
    return registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST)


def _index(registry: MemoryRegistry, entries: list[tuple[str, dict[str, str]]]) -> str:
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST_LIST, "manifests": [
        {"mediaType": DOCKER_MANIFEST, "digest": d, "size": 1, "platform": p} for d, p in entries]}).encode()
    return registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST_LIST)


def test_each_child_is_there_and_of_the_platform_it_is_listed_for():
    registry = MemoryRegistry()
    amd, arm = _image(registry, "amd64"), _image(registry, "arm64", "v8")
    attestation = _image(registry, "unknown")
    good = _index(registry, [(amd, {"os": "linux", "architecture": "amd64"}),
                             (arm, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
                             (attestation, {"os": "unknown", "architecture": "unknown"})])
    assert checked_platforms(registry, PATH, good) == ("linux/amd64", "linux/arm64")
    assert checked_platforms(registry, PATH, arm) == ("linux/arm64",)

    gone = "sha256:" + "1" * 64
    dangling = _index(registry, [(amd, {"os": "linux", "architecture": "amd64"}),
                                 (gone, {"os": "linux", "architecture": "arm64"})])
    with pytest.raises(IndexNotItsPlatforms) as err:
        checked_platforms(registry, PATH, dangling)
    assert (str(err.value), err.value.exit_code) == (
        f"memory.invalid/{PATH}@{dangling} lists {gone} for linux/arm64, which the registry does not have: a node of "
        "linux/arm64 would fail at its pull", 2)
