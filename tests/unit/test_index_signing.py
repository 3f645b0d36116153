"""An index signed and verified, against an in-memory registry: `publish-index --signing-key` signs each platform's
manifest (its attached SBOM and provenance) and the index before the tag is written, verifies rather than signs
again what this key already signed, and writes no tag when any platform cannot be signed; `verify-image` of an
index gives every platform's digest and verdict, and refuses when any one fails."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memory_registry import MemoryRegistry
from platform_images import build_labels

from sglstack.attest.errors import AttestationError
from sglstack.attest.provenance import BuildIdentity, provenance_statement
from sglstack.attest.release import ensure_signed
from sglstack.attest.signing import key_id
from sglstack.attest.store import attach
from sglstack.attest.verify import IndexNotVerified, verify_image
from sglstack.config.imageref import parse_image_reference, parse_repository
from sglstack.config.matrix import load_matrix
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import sbom_document
from sglstack.publish import index as index_mod
from sglstack.registry.client import DOCKER_MANIFEST, OCI_MANIFEST, compute_digest

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000/team/multi"
PATH = "team/multi"
STACK = "pypi-cu130-gb"


def _image(registry: MemoryRegistry, platform: str) -> str:
    """One platform's image manifest, released `--unsigned`: its SBOM and provenance attached, no signature."""
    os_name, arch = platform.split("/")
    config = registry.put_blob(PATH, json.dumps({"os": os_name, "architecture": arch,
                                                 "config": {"Labels": build_labels(STACK, platform)}}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}, "layers": []}).encode()
    digest = registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST)
    record = {"stack": STACK, "target": "runtime", "image_id": config, "config_hash": "c" * 64,
              "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "debian", "digest": None}, "sglang": {"version": "0.5.23", "git": None},
              "provenance": {"patches": {}, "sglstack": {}}}
    sbom = sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name="x", image_id=config,
                         created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    attach(registry, PATH, digest, [("sbom", sbom), ("provenance", provenance_statement(
        record, repository=REGISTRY, digest=digest))])
    return digest


@pytest.fixture
def released(monkeypatch):
    registry = MemoryRegistry()
    monkeypatch.setattr(index_mod, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    digests = {p: _image(registry, p) for p in ("linux/amd64", "linux/arm64")}
    return registry, digests, load_matrix(ROOT / "stacks.yaml").get(STACK)


def _publish(stack, digests, key, tag="candidate-idx"):
    return index_mod.publish_index(stack, [f"{p}={d}" for p, d in digests.items()], tag=tag, registry=REGISTRY,
                                   key=key)


def test_each_platform_and_the_index_are_signed_before_the_tag_and_verify(released):
    registry, digests, stack = released
    key = Ed25519PrivateKey.generate()
    kid = key_id(key.public_key())[:16]
    made = _publish(stack, digests, key)
    assert registry.tags["candidate-idx"] == made.digest
    assert made.signed == (
        f"linux/amd64: signed the SBOM and provenance attached to it: {REGISTRY}@{digests['linux/amd64']}, signed by "
        f"key {kid}",
        f"linux/arm64: signed the SBOM and provenance attached to it: {REGISTRY}@{digests['linux/arm64']}, signed by "
        f"key {kid}",
        f"index {REGISTRY}@{made.digest} signed by key {kid}")
    result = verify_image(registry, parse_image_reference(f"{REGISTRY}:candidate-idx"), key.public_key())
    assert [(p["platform"], p["digest"], p["verified"]) for p in result.platforms] == [
        ("index", made.digest, True), ("linux/amd64", digests["linux/amd64"], True),
        ("linux/arm64", digests["linux/arm64"], True)]
    assert result.as_dict()["verified"] is True and result.as_dict()["index"] is True
    # promoting the index (publish --digest --signing-key) finds it signed: each platform bound to the stack, not
    # to one platform's config hash
    assert ensure_signed(registry, parse_repository(REGISTRY), made.digest, key, BuildIdentity(STACK, "d" * 64)) == (
        f"{REGISTRY}@{made.digest} is already signed by key {kid}")
    # again: what this key signed is verified, not signed again; nothing new is pushed
    before = dict(registry.manifests)
    again = _publish(stack, digests, key, tag="candidate-again")
    assert again.digest == made.digest and set(registry.manifests) == set(before)
    assert again.signed[0] == f"linux/amd64: {REGISTRY}@{digests['linux/amd64']} is already signed by key {kid}"
    assert again.signed[-1] == f"index {REGISTRY}@{made.digest} is already signed by key {kid}"


def test_a_platform_that_cannot_be_signed_writes_no_tag(released):
    registry, digests, stack = released
    config = {"os": "linux", "architecture": "arm64", "config": {"Labels": build_labels(STACK, "linux/arm64")}}
    bare = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "x", "digest": registry.put_blob(PATH, json.dumps(config).encode()), "size": 1},
        "layers": []}).encode()
    digests["linux/arm64"] = registry.put_manifest(PATH, compute_digest(bare), bare, OCI_MANIFEST)
    with pytest.raises(AttestationError) as err:
        _publish(stack, digests, Ed25519PrivateKey.generate())
    assert "no SBOM and provenance of stack 'pypi-cu130-gb'" in str(err.value)
    assert str(err.value).startswith(f"{REGISTRY}@{digests['linux/arm64']}: not signed by key")
    assert "candidate-idx" not in registry.tags


def test_unsigned_writes_the_tag_and_verify_lists_every_platforms_verdict(released):
    registry, digests, stack = released
    made = _publish(stack, digests, None)
    assert made.signed == () and registry.tags["candidate-idx"] == made.digest
    key = Ed25519PrivateKey.generate()
    with pytest.raises(IndexNotVerified) as err:
        verify_image(registry, parse_image_reference(f"{REGISTRY}@{made.digest}"), key.public_key())
    verdicts = err.value.verification.as_dict()
    assert verdicts["verified"] is False
    assert [(p["platform"], p["verified"]) for p in verdicts["platforms"]] == [
        ("index", False), ("linux/amd64", False), ("linux/arm64", False)]
    assert verdicts["platforms"][0]["reason"] == f"{REGISTRY}@{made.digest}: the index has no signature attached"
    # the amd64 image signed by the key (its own release), the rest not: only amd64 passes
    ensure_signed(registry, parse_repository(REGISTRY), digests["linux/amd64"], key, BuildIdentity(STACK))
    with pytest.raises(IndexNotVerified) as err:
        verify_image(registry, parse_image_reference(f"{REGISTRY}@{made.digest}"), key.public_key())
    assert [(p["platform"], p["verified"]) for p in err.value.verification.platforms] == [
        ("index", False), ("linux/amd64", True), ("linux/arm64", False)]
    assert str(err.value).startswith(f"index {made.digest[:19]}: {REGISTRY}@{made.digest}: the index has no "
                                     f"signature attached; linux/arm64 {digests['linux/arm64'][:19]}: ")


def _labelled(registry: MemoryRegistry, platform: str, labels: dict[str, str]) -> str:
    os_name, arch = platform.split("/")
    config = registry.put_blob(PATH, json.dumps({"os": os_name, "architecture": arch, "config": {
        "Labels": {**build_labels(STACK, platform), **labels}}}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}, "layers": []}).encode()
    return registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST)


@pytest.mark.parametrize("arm,said", [
    ({"io.sglstack.pin.requests": "2.32.3"}, "io.sglstack.pin.requests: 2.32.4 on linux/amd64, 2.32.3 on linux/arm64"),
    ({}, "io.sglstack.pin.requests: 2.32.4 on linux/amd64, none on linux/arm64"),
    ({"io.sglstack.pin.requests": "2.32.4", "io.sglstack.patches": "kimi-k25-eagle3"},
     "io.sglstack.patches: none on linux/amd64, kimi-k25-eagle3 on linux/arm64"),
])
def test_platforms_built_from_two_versions_of_the_stack_entry_make_no_index(monkeypatch, arm, said):
    """The stack's pins moved (stacks.yaml, `invoke lock`) and only amd64 was rebuilt: the new amd64 and the old
    arm64 image, both verified builds of the stack and of one SGLang release, were written as one index (two
    releases under one tag). The labels a build stamps from the stack entry alone must agree."""
    registry = MemoryRegistry()
    monkeypatch.setattr(index_mod, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    digests = {"linux/amd64": _labelled(registry, "linux/amd64", {"io.sglstack.pin.requests": "2.32.4"}),
               "linux/arm64": _labelled(registry, "linux/arm64", arm)}
    stack = load_matrix(ROOT / "stacks.yaml").get(STACK)
    with pytest.raises(index_mod.IndexEntryRefused) as err:
        _publish(stack, digests, None)
    assert str(err.value) == (f"the entries are builds of different versions of stack '{STACK}' ({said}): one index "
                              "is one stack entry; rebuild the platform built from the older one: nothing was written")
    assert err.value.exit_code == 2 and "candidate-idx" not in registry.tags
    same = {"io.sglstack.pin.requests": "2.32.4", "io.sglstack.lock-sha256": "a"}  # its own lock: not compared
    digests["linux/arm64"] = _labelled(registry, "linux/arm64", same)
    assert _publish(stack, digests, None).digest == registry.tags["candidate-idx"]


def test_a_release_tag_is_no_tag_for_an_index_and_nothing_is_written(released):
    """`publish-index --tag` wrote any tag: the stack's immutable release tag (never overwritten by `publish`)
    and its moving tags were moved to an unsmoked index, unrecorded. They are refused as bad input; a candidate
    tag is written as before."""
    from sglstack.core.errors import ConfigError
    from sglstack.publish.tags import release_tags

    registry, digests, stack = released
    before = dict(registry.tags)  # the platforms' attestation tags
    tags = release_tags(stack, "ab" * 32, dt.date(2026, 12, 5))
    for tag in (tags.immutable, *tags.moving):
        with pytest.raises(ConfigError) as err:
            _publish(stack, digests, None, tag=tag)
        assert err.value.exit_code == 2 and str(err.value) == (
            f"stack '{STACK}': --tag {tag}: a release tag of the stack (publish.immutable_tag, publish.moving_tags), "
            "which only invoke publish --digest moves (all together, recorded; an immutable one never): give a "
            "candidate tag")
    assert registry.tags == before
    assert _publish(stack, digests, None, tag=f"{STACK}-latest").digest == registry.tags[f"{STACK}-latest"]
