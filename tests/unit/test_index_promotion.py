"""`publish --digest` of an index names its release by every platform's config hash, against an in-memory registry:
the first child's alone named it, so an index whose arm64 image alone was rebuilt took the last index's immutable
tag (refused that day as a move of an immutable tag; the next day, a second tag claiming the same config)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

from memory_registry import MemoryRegistry

from sglstack.config.matrix import load_matrix
from sglstack.core.labels import CONFIG_HASH_LABEL, STACK_LABEL, VERIFIED_LABEL
from sglstack.publish import digest as digest_mod
from sglstack.publish.index import make_index
from sglstack.registry.client import DOCKER_MANIFEST, compute_digest

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000/team/multi"
PATH = "team/multi"
STACK = "pypi-cu130-gb"
DAY = dt.date(2026, 12, 5)


def _image(registry: MemoryRegistry, platform: str, config_hash: str) -> str:
    os_name, arch = platform.split("/")
    labels = {STACK_LABEL: STACK, CONFIG_HASH_LABEL: config_hash, VERIFIED_LABEL: "true"}
    config = registry.put_blob(PATH, json.dumps({"os": os_name, "architecture": arch,
                                                 "config": {"Labels": labels}}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}, "layers": []}).encode()
    return registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST)


def test_an_index_whose_arm64_alone_was_rebuilt_is_a_release_of_its_own(monkeypatch, tmp_path):
    registry = MemoryRegistry()
    monkeypatch.setattr(digest_mod, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    stack = load_matrix(ROOT / "stacks.yaml").get(STACK)
    amd, arm1, arm2 = _image(registry, "linux/amd64", "a" * 64), _image(registry, "linux/arm64", "b" * 64), \
        _image(registry, "linux/arm64", "c" * 64)
    first = make_index(registry, PATH, {"linux/amd64": amd, "linux/arm64": arm1}, "candidate-1")[0]
    second = make_index(registry, PATH, {"linux/amd64": amd, "linux/arm64": arm2}, "candidate-2")[0]
    for index in (first, second):
        assert digest_mod.publish_digest(stack, index, unsigned=True, registry=REGISTRY, build_dir=tmp_path,
                                         today=DAY) == 0
    immutable = sorted(t for t in registry.tags if t.startswith("0.5.23-pypi-cu130-gb-20261205-"))
    assert len(immutable) == 2 and {registry.tags[t] for t in immutable} == {first, second}
    both = hashlib.sha256(("a" * 64 + "\n" + "c" * 64).encode()).hexdigest()
    assert registry.tags[f"0.5.23-pypi-cu130-gb-20261205-{both[:8]}"] == second
    # one platform's image keeps its own label's hash
    client = registry
    assert digest_mod._config_hash_of(client, digest_mod.target_repository(stack, REGISTRY), amd, []) == "a" * 64
