"""Signing what is already published (`ensure_signed`, `publish --digest --signing-key`) where the other attest tests'
fixtures never sit (issue 35, mutation of `attest-store`): the documents made from the build record when the
attached ones cannot be read (another key's signature over the same documents kept), an image signed by this key
for another build, documents that do not verify once signed, an SBOM of another image or under another image's
subject, the first of two SBOMs unreadable, an unsigned index, another key's signature unreadable. In process,
against the in-memory registry (`attest_memory`: one repository, a call naming another is refused)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from attest_memory import IDENTITY, KEY, KID, PATH, REGISTRY, Registry, docs, image, signature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.attest.errors import AttestationError
from sglstack.attest.provenance import BuildIdentity
from sglstack.attest.release import Documents, ensure_signed
from sglstack.attest.signing import Attached, key_id, open_envelope
from sglstack.attest.store import KINDS, MAX_DOCUMENT_BYTES, artifact_manifest, attach, fallback_tag, find_attestations
from sglstack.attest.verify import Verification, verify_image
from sglstack.config.imageref import parse_image_reference, parse_repository
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import sbom_document
from sglstack.registry.client import DOCKER_MANIFEST, OCI_MANIFEST, compute_digest
from sglstack.registry.transport import TooLarge

REPO = parse_repository(REGISTRY)
OTHER = Ed25519PrivateKey.generate()
OTHER_KID = key_id(OTHER.public_key())[:16]


def _refused(registry: Registry, digest: str, *, documents: Documents | None = None) -> str:
    with pytest.raises(AttestationError) as err:
        ensure_signed(registry, REPO, digest, OTHER, IDENTITY, documents=documents)
    return str(err.value)


def _nothing_to_sign(digest: str, why: str, kid: str = OTHER_KID) -> str:
    return (f"{REGISTRY}@{digest}: not signed by key {kid} ({why}), and no SBOM and provenance of "
            f"{IDENTITY.describe()} are attached to sign: release it with `invoke build --push --signing-key`, or "
            f"promote it with --unsigned")


def test_documents_that_cannot_be_read_are_made_from_the_record_and_another_keys_signature_is_kept():
    """KEY signed the SBOM and provenance; the SBOM's blob is gone (garbage-collected under its manifest): a second
    key signs documents made from the build record, the same bytes, and KEY's signature over them stays."""
    registry = Registry()  # no referrers API: one `.signature` tag per image, so keeping KEY's is cosigning
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    del registry.blobs[compute_digest(made[0][1])]
    asked: list[int] = []
    said = ensure_signed(registry, REPO, digest, OTHER, IDENTITY, documents=lambda: asked.append(1) or made)
    assert said == (f"attached and signed an SBOM and provenance from the build record: {REGISTRY}@{digest}, "
                    f"signed by key {OTHER_KID}")
    assert asked == [1]
    for key in (KEY, OTHER):  # both keys verify: the one signature artifact holds both signatures
        assert verify_with(registry, digest, key).signed == BuildIdentity("cu130", "c" * 64, "pkg:pypi/sglang@0.5.9")
    envelope = registry.blobs[registry_signature(registry, digest)]
    payload = open_envelope(envelope, OTHER.public_key())
    assert [(a["kind"], a["mediaType"]) for a in payload["attestations"]] == [
        ("provenance", KINDS["provenance"]), ("sbom", KINDS["sbom"])]


def verify_with(registry: Registry, digest: str, key: Ed25519PrivateKey) -> Verification:
    return verify_image(registry, parse_image_reference(f"{REGISTRY}@{digest}"), key.public_key(), IDENTITY)


def registry_signature(registry: Registry, digest: str) -> str:
    return next(a.document_digest for a in find_attestations(registry, PATH, digest) if a.kind == "signature")


def test_an_image_this_key_signed_for_another_build_is_not_already_signed():
    registry = Registry()
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    assert ensure_signed(registry, REPO, digest, KEY, IDENTITY) == f"{REGISTRY}@{digest} is already signed by key {KID}"
    other = BuildIdentity("other")
    with pytest.raises(AttestationError) as err:
        ensure_signed(registry, REPO, digest, KEY, other)
    assert str(err.value) == (
        f"{REGISTRY}@{digest}: not signed by key {KID} ({REGISTRY}@{digest}: signed for another build: stack: "
        f"expected 'other', found 'cu130'), and no SBOM and provenance of {other.describe()} are attached to sign: "
        f"release it with `invoke build --push --signing-key`, or promote it with --unsigned")


def test_documents_that_do_not_verify_once_signed_are_refused_after_signing():
    """A build record of another stack: signed, but the verification bound to the expected build refuses it."""
    registry = Registry()
    digest, config = image(registry)
    (_, sbom), (_, provenance) = docs(digest, config)
    doc = json.loads(provenance)
    doc["predicate"]["buildDefinition"]["externalParameters"]["stack"] = "other"
    wrong = [("sbom", sbom), ("provenance", json.dumps(doc).encode())]
    said = _refused(registry, digest, documents=lambda: wrong)
    assert said == (f"{REGISTRY}@{digest}: signed, but it does not verify: {REGISTRY}@{digest}: signed for another "
                    f"build: stack: expected 'cu130', found 'other'")


def test_an_sbom_of_another_image_is_not_signed():
    registry = Registry()
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config, sbom_image="sha256:" + "5" * 64))
    before = set(registry.manifests)
    unsigned = f"{REGISTRY}@{digest}: no signature attached (unsigned, or its signature was deleted)"
    assert _refused(registry, digest) == _nothing_to_sign(digest, unsigned)
    assert set(registry.manifests) == before  # nothing was signed, nothing pushed


def _twin(registry: Registry, config: str) -> str:
    """Another image manifest with the same config (another layer list): its digest."""
    return registry.put_manifest(PATH, "twin", json.dumps({
        "schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "layers": [{"digest": "sha256:" + "6" * 64}],
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                   "size": 1}}).encode(), DOCKER_MANIFEST)


def test_an_sbom_attached_under_another_images_subject_is_not_signed():
    """The SBOM artifact under this image's `.sbom` tag has another image (same config) as its subject."""
    registry = Registry()
    digest, config = image(registry)
    (_, sbom), (_, provenance) = docs(digest, config)
    attach(registry, PATH, digest, [("provenance", provenance)])
    twin = _twin(registry, config)
    body = artifact_manifest("sbom", Attached("sbom", KINDS["sbom"], registry.put_blob(PATH, sbom), len(sbom)),
                             DOCKER_MANIFEST, twin, 1)
    registry.put_manifest(PATH, fallback_tag(digest, "sbom"), body, OCI_MANIFEST)
    unsigned = f"{REGISTRY}@{digest}: no signature attached (unsigned, or its signature was deleted)"
    assert _refused(registry, digest) == _nothing_to_sign(digest, unsigned)


def test_the_first_of_two_sboms_unreadable_the_second_is_signed():
    registry = Registry(referrers_api=True)  # both SBOM artifacts listed
    digest, config = image(registry)
    first = docs(digest, config)
    attach(registry, PATH, digest, first)
    second = sbom_document(Inventory(python={"six": "1.16.0"}, debian=()), image_name="y", image_id=config,
                           created=dt.datetime(2026, 12, 4, tzinfo=dt.UTC))
    attach(registry, PATH, digest, [("sbom", second)])
    sboms = [a for a in find_attestations(registry, PATH, digest) if a.kind == "sbom"]
    assert len(sboms) == 2
    del registry.blobs[sboms[0].document_digest]  # the one listed first cannot be read
    said = ensure_signed(registry, REPO, digest, OTHER, IDENTITY)
    assert said == (f"signed the SBOM and provenance attached to it: {REGISTRY}@{digest}, signed by key "
                    f"{OTHER_KID}")
    assert verify_with(registry, digest, OTHER).attestations["sbom"]["digest"] == sboms[1].document_digest


def test_an_unsigned_index_has_nothing_of_its_own_to_sign():
    registry = Registry()
    amd64, _ = image(registry)
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": DOCKER_MANIFEST, "digest": amd64, "size": 1,
         "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    index = registry.put_manifest(PATH, "v1", body, "application/vnd.oci.image.index.v1+json")
    said = _refused(registry, index)
    assert said.startswith(f"{REGISTRY}@{index}: not signed by key {OTHER_KID} (") and said.endswith(
        f"), and no SBOM and provenance of {IDENTITY.describe()} are attached to sign: release it with `invoke build "
        f"--push --signing-key`, or promote it with --unsigned")


@pytest.mark.parametrize("referrers_api", [True, False])
def test_another_keys_signature_that_cannot_be_read_is_left_out_and_the_image_is_signed(referrers_api):
    registry = Registry(referrers_api=referrers_api)
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    del registry.blobs[registry_signature(registry, digest)]
    said = ensure_signed(registry, REPO, digest, OTHER, IDENTITY)
    assert said == (f"signed the SBOM and provenance attached to it: {REGISTRY}@{digest}, signed by key "
                    f"{OTHER_KID}")
    assert verify_with(registry, digest, OTHER).digest == digest


def test_a_second_key_keeps_the_first_keys_signature_in_the_one_repository():
    registry = Registry()  # the tag scheme; every call names the one repository there is
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))
    for key in (KEY, OTHER):
        ensure_signed(registry, REPO, digest, key, IDENTITY)
    for key in (KEY, OTHER):
        assert verify_with(registry, digest, key).digest == digest


class _Capped(Registry):
    """As the real client reads a blob: with `max_bytes`, a bigger one is `TooLarge` (unread); without, read whole."""

    def get_blob(self, repo: str, digest: str, *, max_bytes: int | None = None) -> bytes:
        body = super().get_blob(repo, digest, max_bytes=max_bytes)
        if max_bytes is not None and len(body) > max_bytes:
            raise TooLarge(f"registry memory: GET blob {repo}@{digest}: over {max_bytes} bytes")
        return body


def _padded(registry: Registry, digest: str, kind: str, body: bytes) -> None:
    """`body` padded one byte over what a document may weigh (trailing whitespace: the same JSON), attached as a
    `kind` of `digest` under its tag by an artifact that declares the size `body` had: the blob is bigger than its
    descriptor says."""
    big = body + b" " * (MAX_DOCUMENT_BYTES + 1 - len(body))
    doc = Attached(kind, KINDS[kind], registry.put_blob(PATH, big), len(body))
    manifest = artifact_manifest(kind, doc, DOCKER_MANIFEST, digest, len(registry.manifests[digest][1]))
    registry.put_manifest(PATH, fallback_tag(digest, kind), manifest, OCI_MANIFEST)


def test_an_sbom_bigger_than_its_descriptor_and_the_size_limit_is_not_read_nor_signed():
    registry = _Capped()
    digest, config = image(registry)
    (_, sbom), provenance = docs(digest, config)
    attach(registry, PATH, digest, [provenance])
    _padded(registry, digest, "sbom", sbom)
    unsigned = f"{REGISTRY}@{digest}: no signature attached (unsigned, or its signature was deleted)"
    assert _refused(registry, digest) == _nothing_to_sign(digest, unsigned)


def test_another_keys_signature_bigger_than_its_descriptor_and_the_size_limit_is_not_carried_along():
    registry = _Capped()  # the tag scheme: one `.signature` artifact, which this key's replaces
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, made)
    _padded(registry, digest, "signature", signature(digest, made))
    ensure_signed(registry, REPO, digest, OTHER, IDENTITY)
    assert verify_with(registry, digest, OTHER).digest == digest
    envelope = json.loads(registry.blobs[registry_signature(registry, digest)])
    assert [s["keyid"] for s in envelope["signatures"]] == [key_id(OTHER.public_key())]


def test_a_signature_attached_to_another_image_is_not_carried_into_this_ones():
    """KEY's signature over this image's documents, in an artifact whose subject is another image (same config),
    under this image's `.signature` tag: it is that image's artifact, not a signature of this one to keep."""
    registry = Registry()
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, made)
    twin = _twin(registry, config)
    envelope = signature(digest, made)
    doc = Attached("signature", KINDS["signature"], registry.put_blob(PATH, envelope), len(envelope))
    registry.put_manifest(PATH, fallback_tag(digest, "signature"),
                          artifact_manifest("signature", doc, DOCKER_MANIFEST, twin, 1), OCI_MANIFEST)
    ensure_signed(registry, REPO, digest, OTHER, IDENTITY)
    signed = json.loads(registry.blobs[registry_signature(registry, digest)])
    assert [s["keyid"] for s in signed["signatures"]] == [key_id(OTHER.public_key())]
