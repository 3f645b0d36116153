"""Verification where the fixtures of the other attest tests never sit (issue 35, planted bugs P21, P22): an image
signed by two keys (another key's signature beside ours: each key verifies it, whichever the registry lists
first), and a signed provenance that names no value for a field `--stack` expects (refused: "found nothing"),
against an in-memory registry speaking the v2 and referrers API."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memory_registry import MemoryRegistry

from sglstack.attest.errors import NotVerified
from sglstack.attest.provenance import BuildIdentity, identity_differences, provenance_statement
from sglstack.attest.release import ensure_signed
from sglstack.attest.signing import key_id
from sglstack.attest.store import attach
from sglstack.attest.verify import verify_image
from sglstack.config.imageref import parse_image_reference, parse_repository
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import sbom_document
from sglstack.registry.client import DOCKER_MANIFEST, compute_digest

REGISTRY = "127.0.0.1:5000/team/signers"
PATH = "team/signers"
STACK = "cu130"
CONFIG_HASH = "c" * 64


def _released(registry: MemoryRegistry, *, config_hash: str | None) -> str:
    """An image released `--unsigned`: its SBOM and provenance (naming `config_hash`, or none) attached, no
    signature."""
    config = registry.put_blob(PATH, json.dumps({"os": "linux", "architecture": "amd64"}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}, "layers": []}).encode()
    digest = registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST)
    record = {"stack": STACK, "target": "runtime", "image_id": config, "config_hash": config_hash or CONFIG_HASH,
              "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "debian", "digest": None}, "sglang": {"version": "0.5.9", "git": None},
              "provenance": {"patches": {}, "sglstack": {}}}
    sbom = sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name="x", image_id=config,
                         created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    provenance = provenance_statement(record, repository=REGISTRY, digest=digest)
    if config_hash is None:  # a statement another tool wrote, or an older one: no config hash named
        doc = json.loads(provenance)
        del doc["predicate"]["buildDefinition"]["externalParameters"]["config_hash"]
        provenance = json.dumps(doc).encode()
    attach(registry, PATH, digest, [("sbom", sbom), ("provenance", provenance)])
    return digest


def test_an_image_signed_by_two_keys_verifies_against_each_whichever_signature_comes_first():
    # With the referrers API both signatures stay listed (the tag scheme keeps one `.signature` tag: the last).
    registry = MemoryRegistry(referrers_api=True)
    digest = _released(registry, config_hash=CONFIG_HASH)
    ours, theirs = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    repo = parse_repository(REGISTRY)
    for key in (theirs, ours):
        ensure_signed(registry, repo, digest, key, BuildIdentity(STACK))
    ref = parse_image_reference(f"{REGISTRY}@{digest}")
    # One of the two keys' signatures is listed second, in any order the registry lists them: both must verify.
    for key in (ours, theirs):
        done = verify_image(registry, ref, key.public_key(), BuildIdentity(STACK, CONFIG_HASH))
        assert done.digest == digest
        assert done.checked[0] == f"signature by key {key_id(key.public_key())[:16]} covers {digest}"
        assert done.signed == BuildIdentity(STACK, CONFIG_HASH, "pkg:pypi/sglang@0.5.9")
    # A third key signed nothing: refused, naming both signers.
    stranger = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(NotVerified, match=f"no signature by key {key_id(stranger)[:16]}"):
        verify_image(registry, ref, stranger)


def test_a_signed_provenance_naming_no_config_hash_is_refused_when_one_is_expected():
    registry = MemoryRegistry()
    digest = _released(registry, config_hash=None)
    key = Ed25519PrivateKey.generate()
    ensure_signed(registry, parse_repository(REGISTRY), digest, key, BuildIdentity(STACK))
    ref = parse_image_reference(f"{REGISTRY}@{digest}")
    assert verify_image(registry, ref, key.public_key(), BuildIdentity(STACK)).signed.config_hash is None
    with pytest.raises(NotVerified) as err:
        verify_image(registry, ref, key.public_key(), BuildIdentity(STACK, CONFIG_HASH))
    assert str(err.value) == (f"{REGISTRY}@{digest}: signed for another build: config hash: expected "
                              f"'{CONFIG_HASH}', found nothing")


@pytest.mark.parametrize("found,said", [
    (BuildIdentity(None, CONFIG_HASH, "pkg:pypi/sglang@0.5.9"), ["stack: expected 'cu130', found nothing"]),
    (BuildIdentity(STACK, CONFIG_HASH, None), ["SGLang release: expected 'pkg:pypi/sglang@0.5.9', found nothing"]),
    (BuildIdentity(None, None, None), ["stack: expected 'cu130', found nothing",
                                       f"config hash: expected '{CONFIG_HASH}', found nothing",
                                       "SGLang release: expected 'pkg:pypi/sglang@0.5.9', found nothing"]),
    (BuildIdentity(STACK, CONFIG_HASH, "pkg:pypi/sglang@0.5.9"), []),
])
def test_a_field_the_provenance_leaves_empty_differs_from_every_expected_value(found, said):
    assert identity_differences(BuildIdentity(STACK, CONFIG_HASH, "pkg:pypi/sglang@0.5.9"), found) == said
    # what the expectation leaves None is not compared
    assert identity_differences(BuildIdentity(None), found) == []


def test_on_a_registry_without_the_referrers_api_a_second_key_keeps_the_first_keys_signature():
    """The tag scheme finds one `.signature` artifact per image: signing with a second key moved the tag to an
    envelope of its own signature alone, and the image no longer verified against the first key."""
    registry = MemoryRegistry()  # no referrers API: the tag scheme
    digest = _released(registry, config_hash=CONFIG_HASH)
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    repo = parse_repository(REGISTRY)
    for key in (first, second):
        ensure_signed(registry, repo, digest, key, BuildIdentity(STACK))
    ref = parse_image_reference(f"{REGISTRY}@{digest}")
    for key in (first, second):
        assert verify_image(registry, ref, key.public_key(), BuildIdentity(STACK, CONFIG_HASH)).digest == digest
    assert ensure_signed(registry, repo, digest, first, BuildIdentity(STACK)).endswith(
        f"is already signed by key {key_id(first.public_key())[:16]}")


def test_cosigned_adds_only_well_formed_signatures_over_the_same_payload():
    import base64

    from sglstack.attest.signing import cosigned, sign_envelope

    one, two, three = (Ed25519PrivateKey.generate() for _ in range(3))
    mine = sign_envelope(one, b'{"_type":"x"}')
    same = json.loads(sign_envelope(two, b'{"_type":"x"}'))
    same["signatures"].append({"keyid": "junk", "sig": "not base64!"})
    other_payload = sign_envelope(three, b'{"_type":"y"}')
    merged = json.loads(cosigned(mine, [json.dumps(same).encode(), other_payload, b"not json", mine]))
    assert merged["payload"] == base64.b64encode(b'{"_type":"x"}').decode()
    assert sorted(s["keyid"] for s in merged["signatures"]) == sorted(
        [key_id(one.public_key()), key_id(two.public_key())])
