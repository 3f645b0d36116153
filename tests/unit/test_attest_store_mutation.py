"""Attestation artifacts pushed, found, refused and removed where the other attest tests' fixtures never sit
(issue 35, mutation of `attest-store`): a push that fails half-way, a referrer that is gone or in another tool's
shape, an artifact under another kind's tag, each reason word for word. In process, against the in-memory
registry (`attest_memory`: with deletes, and a fault on demand)."""

from __future__ import annotations

import json

import pytest
from attest_memory import PATH, Registry, docs, image, plant

from sglstack.attest.errors import AttestationError
from sglstack.attest.signing import Attached
from sglstack.attest.store import (
    EMPTY_DIGEST,
    KINDS,
    artifact_manifest,
    attach,
    fallback_tag,
    find_attestations,
    remove_attestations,
    remove_manifests,
)
from sglstack.core.errors import RegistryError
from sglstack.registry.client import OCI_MANIFEST, compute_digest

# ---- store: the artifacts -------------------------------------------------------------------------------

def test_the_tag_scheme_name_and_the_artifact_manifest_are_exactly_these():
    assert fallback_tag("sha256:" + "ab" * 32, "sbom") == "sha256-" + "ab" * 32 + ".sbom"
    doc = Attached("signature", KINDS["signature"], "sha256:" + "d" * 64, 77)
    body = artifact_manifest("signature", doc, OCI_MANIFEST, "sha256:" + "e" * 64, 123)
    assert json.loads(body) == {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": KINDS["signature"],
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY_DIGEST, "size": 2},
        "layers": [{"mediaType": KINDS["signature"], "digest": "sha256:" + "d" * 64, "size": 77}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "e" * 64, "size": 123},
        "annotations": {"io.sglstack.attestation": "signature"}}
    assert compute_digest(b"{}") == EMPTY_DIGEST
    assert body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize("referrers_api", [True, False])
def test_attach_says_what_it_pushed_and_a_second_attach_of_the_same_pushed_nothing_new(referrers_api):
    registry = Registry(referrers_api=referrers_api)
    digest, config = image(registry)
    made = docs(digest, config)
    first = attach(registry, PATH, digest, made)
    assert len(first.manifests) == 2 and first.referrers_api is referrers_api
    assert first.tags == ([] if referrers_api else [fallback_tag(digest, "sbom"), fallback_tag(digest, "provenance")])
    assert registry.blobs[EMPTY_DIGEST] == b"{}"
    again = attach(registry, PATH, digest, made)
    assert again.manifests == [] and again.tags == first.tags  # identical artifacts: none of them this call's
    assert [a.kind for a in find_attestations(registry, PATH, digest)] == ["provenance", "sbom"]


def test_a_push_failing_half_way_removes_what_that_call_pushed_and_keeps_what_was_there():
    registry = Registry()
    digest, config = image(registry)
    sbom, provenance = docs(digest, config)
    attach(registry, PATH, digest, [sbom])  # an earlier release's identical SBOM artifact
    before = set(registry.manifests)
    registry.fail_layer = compute_digest(b"the signature")
    with pytest.raises(RegistryError, match="HTTP 500"):
        attach(registry, PATH, digest, [sbom, provenance, ("signature", b"the signature")])
    assert set(registry.manifests) == before and len(registry.deleted) == 1  # the provenance, not the SBOM
    assert [a.kind for a in find_attestations(registry, PATH, digest)] == ["sbom"]


def test_remove_manifests_removes_each_once_and_says_which_went():
    registry = Registry()
    digest, config = image(registry)
    pushed = attach(registry, PATH, digest, docs(digest, config))
    gone = "sha256:" + "0" * 64
    assert remove_manifests(registry, PATH, [gone, *pushed.manifests, pushed.manifests[0]]) == pushed.manifests
    assert registry.deleted == pushed.manifests and find_attestations(registry, PATH, digest) == []


@pytest.mark.parametrize(("changes", "reason"), [
    ({"artifactType": "application/x-other"}, "artifactType 'application/x-other' is not an sglstack attestation"),
    ({"artifactType": 7}, "artifactType '7' is not an sglstack attestation"),
    ({"size": True}, "its layer's size true is not a number of bytes up to 33554432"),
    ({"size": -1}, "its layer's size -1 is not a number of bytes up to 33554432"),
    ({"size": "3"}, "its layer's size \"3\" is not a number of bytes up to 33554432"),
    ({"digest": "sha256:abc"}, "its layer's digest 'sha256:abc' is not sha256:<64 hex>"),
    ({"digest": 5}, "its layer's digest '5' is not sha256:<64 hex>"),
    ({"subject": {"mediaType": OCI_MANIFEST}}, "its subject is not a descriptor with a digest"),
    ({"subject": {"digest": 5}}, "its subject is not a descriptor with a digest"),
    ({"layers": {"a": 1}}, 'its layers are not one descriptor: {"a": 1}'),
])
def test_an_artifact_in_another_shape_is_skipped_with_its_reason(changes, reason):
    registry = Registry()
    digest, _ = image(registry)
    planted = plant(registry, digest, "sbom", changes)
    skipped: list[str] = []
    assert find_attestations(registry, PATH, digest, skipped) == []
    assert skipped == [f"artifact {planted[:19]} (tag): {reason}"]


def test_the_largest_document_size_is_taken_and_zero_too():
    registry = Registry()
    digest, _ = image(registry)
    top = plant(registry, digest, "sbom", {"size": 32 * 1024 * 1024})
    zero = plant(registry, digest, "provenance", {"size": 0})
    found = find_attestations(registry, PATH, digest)
    assert [(a.manifest_digest, a.document_size, a.via) for a in found] == [
        (zero, 0, "tag"), (top, 32 * 1024 * 1024, "tag")]


def test_an_unreadable_or_non_object_manifest_is_a_reason_and_a_gone_referrer_is_nothing():
    registry = Registry(referrers_api=True)
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))
    made = {a.kind: a.manifest_digest for a in find_attestations(registry, PATH, digest)}
    sbom, provenance = made["sbom"], made["provenance"]
    array = registry.put_manifest(PATH, fallback_tag(digest, "signature"), b"[1]", OCI_MANIFEST)
    registry.unreadable.add(sbom)
    listed = registry.referrers
    registry.referrers = lambda repo, d: [*listed(repo, d), {"digest": "sha256:" + "9" * 64,
                                                             "artifactType": KINDS["signature"]}]
    skipped: list[str] = []
    found = find_attestations(registry, PATH, digest, skipped)
    assert [(a.kind, a.manifest_digest, a.via) for a in found] == [("provenance", provenance, "referrers")]
    assert skipped == [f"artifact {sbom[:19]} (referrers): registry memory: GET manifest {sbom[:19]}: HTTP 500",
                       f"artifact {array[:19]} (tag): not JSON (the manifest is not a JSON object)"]


def test_referrers_of_other_tools_are_passed_over_and_each_artifact_is_listed_once():
    registry = Registry(referrers_api=True)
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))
    registry.put_manifest(PATH, fallback_tag(digest, "sbom"),  # the tag scheme names the referrer found first
                          registry.manifests[find_attestations(registry, PATH, digest)[1].manifest_digest][1],
                          OCI_MANIFEST)
    listed = registry.referrers
    registry.referrers = lambda repo, d: [*listed(repo, d), {"digest": "sha256:" + "8" * 64,
                                                             "artifactType": "application/x-cosign"},
                                          {"digest": 5, "artifactType": KINDS["sbom"]},
                                          {"digest": "sha256:" + "7" * 64, "artifactType": 5}]
    skipped: list[str] = []
    found = find_attestations(registry, PATH, digest, skipped)
    assert [(a.kind, a.via) for a in found] == [("provenance", "referrers"), ("sbom", "referrers")]
    assert skipped == []


def test_an_artifact_under_another_kinds_tag_is_a_reason_not_an_attestation():
    registry = Registry()
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config)[:1])
    sbom_artifact = registry.tags.pop(fallback_tag(digest, "sbom"))
    registry.tags[fallback_tag(digest, "provenance")] = sbom_artifact
    skipped: list[str] = []
    assert find_attestations(registry, PATH, digest, skipped) == []
    assert skipped == [f"artifact {sbom_artifact[:19]} (tag): a sbom under the .provenance tag"]
    registry.tags[fallback_tag(digest, "sbom")] = sbom_artifact  # under its own tag too: found there, once
    skipped = []
    assert [(a.kind, a.via) for a in find_attestations(registry, PATH, digest, skipped)] == [("sbom", "tag")]
    assert skipped == []


def test_remove_attestations_says_in_one_line_when_they_cannot_be_listed():
    registry = Registry(referrers_api=True)
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))

    def refused(repo: str, d: str) -> None:
        raise RegistryError("registry memory: GET referrers: HTTP 503")

    kept = registry.referrers
    registry.referrers = refused
    with pytest.raises(AttestationError) as err:
        remove_attestations(registry, PATH, digest)
    assert str(err.value) == (f"attestations of {PATH}@{digest} could not be listed: registry memory: GET "
                              f"referrers: HTTP 503")
    registry.referrers = kept
    assert len(remove_attestations(registry, PATH, digest)) == 2 and find_attestations(registry, PATH, digest) == []
