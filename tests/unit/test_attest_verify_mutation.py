"""Each refusal of `verify_image` word for word, and what a verification says (issue 35, mutation of
`attest-store`): a reference naming nothing, no or an unreadable signature, one naming less than a release
attaches or another digest, documents changed, missing, gone or of another size, an SBOM or provenance about
another image, another stack. In process, against the in-memory registry (`attest_memory`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from attest_memory import IDENTITY, KEY, KID, PATH, REGISTRY, Registry, docs, image, plant, refusal, signature, verify
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memory_registry import MemoryRegistry

from sglstack.attest import verify as verify_mod
from sglstack.attest.errors import BadInput, NotVerified
from sglstack.attest.provenance import BuildIdentity
from sglstack.attest.signing import key_id, public_pem, sign_envelope, signed_payload
from sglstack.attest.store import attach
from sglstack.attest.verify import IndexNotVerified, verified_for_render, verified_line, verify_image
from sglstack.config.imageref import parse_image_reference
from sglstack.core.errors import RegistryError
from sglstack.registry.client import ManifestNotFound, compute_digest

# ---- verify: each refusal, word for word ----------------------------------------------------------------

def _signed(registry: Registry, *, made: list[tuple[str, bytes]] | None = None, named: list[tuple[str, bytes]]
            | None = None, signed_digest: str | None = None) -> tuple[str, str, list[tuple[str, bytes]]]:
    """An image with `docs` attached (its own SBOM and provenance unless told) and a signature naming `named`
    (what is attached unless told) over `signed_digest` (its own unless told): (digest, config, docs)."""
    digest, config = image(registry)
    made = docs(digest, config) if made is None else made
    envelope = signature(digest, made if named is None else named, signed_digest=signed_digest)
    attach(registry, PATH, digest, [*made, ("signature", envelope)])
    return digest, config, made


def test_what_verifies_says_each_check_and_what_the_signature_names():
    registry = Registry()
    digest, _, made = _signed(registry)
    done = verify(registry, digest, IDENTITY)
    sizes = {kind: (compute_digest(body), len(body)) for kind, body in made}
    assert done.checked == [
        f"signature by key {KID} covers {digest}",
        *(f"{k} {sizes[k][0]} ({sizes[k][1]} bytes) attached and unchanged" for k in ("provenance", "sbom")),
        f"the signed provenance names {IDENTITY.describe()}"]
    assert done.as_dict() == {
        "image": f"{REGISTRY}@{digest}", "digest": digest, "verified": True, "key_id": key_id(KEY.public_key()),
        "checked": done.checked, "skipped": [], "bound_to": IDENTITY.as_dict(), "signed_for": done.signed.as_dict(),
        "attestations": {"sbom": {"digest": sizes["sbom"][0], "components": 1, "python": 1, "debian": 0},
                         "provenance": {"digest": sizes["provenance"][0], "subjects": [digest]}}}
    assert verified_line("img", done) == (f"verified: img is {digest}, signed by key {KID} for "
                                          f"{done.signed.describe()}")
    free = verify(registry, digest)
    assert free.checked[-1].startswith("sbom ") and free.as_dict()["bound_to"] is None
    assert verified_line("img", free).endswith(" (not bound to a stack: give --stack to check it names yours)")
    free.signed = None
    assert verified_line("img", free).startswith(f"verified: img is {digest}, signed by key {KID} for nothing (")
    assert free.as_dict()["signed_for"] is None


def test_a_reference_naming_nothing_is_refused_by_digest_and_by_tag():
    registry = Registry()
    gone = "sha256:" + "1" * 64
    with pytest.raises(NotVerified, match=r"^127\.0\.0\.1:5000/team/store@sha256:1{64}: no such manifest in the "
                                          r"registry$"):
        verify(registry, gone)
    with pytest.raises(NotVerified, match=r"^127\.0\.0\.1:5000/team/store: no such tag in the registry$"):
        verify_image(registry, parse_image_reference(REGISTRY), KEY.public_key())
    digest, _, _ = _signed(registry)
    registry.tags["latest"] = digest
    assert verify_image(registry, parse_image_reference(REGISTRY), KEY.public_key()).digest == digest


def test_no_signature_and_an_unreadable_one_are_told_apart():
    registry = Registry()
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))
    assert refusal(registry, digest) == (f"{REGISTRY}@{digest}: no signature attached (unsigned, or its "
                                          f"signature was deleted)")
    planted = plant(registry, digest, "signature", {"size": -1})
    assert refusal(registry, digest) == (
        f"{REGISTRY}@{digest}: no signature attached (unsigned, or its signature was deleted) (1 unreadable: "
        f"artifact {planted[:19]} (tag): its layer's size -1 is not a number of bytes up to 33554432)")


def test_a_signature_by_another_key_is_a_skipped_line_and_the_refusal():
    registry = Registry()
    digest, config = image(registry)
    other = Ed25519PrivateKey.generate()
    theirs = sign_envelope(other, signed_payload(digest, []))
    attach(registry, PATH, digest, [*docs(digest, config), ("signature", theirs)])
    assert refusal(registry, digest).startswith(f"no signature by key {KID}")
    registry.blobs.pop(compute_digest(theirs))
    assert refusal(registry, digest) == (f"the signature {compute_digest(theirs)[:19]} cannot be read: registry "
                                         f"memory: GET blob {PATH}@{compute_digest(theirs)}: HTTP 404")


@pytest.mark.parametrize(("named", "why"), [
    ([], "the signature names no provenance and no sbom"),
    (["sbom"], "the signature names no provenance"),
    (["provenance"], "the signature names no sbom"),
])
def test_a_signature_naming_less_than_a_release_attaches_is_refused(named, why):
    registry = Registry()
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, [d for d in made if d[0] in named]))])
    assert refusal(registry, digest) == f"{REGISTRY}@{digest}: {why}"


def test_a_signature_over_another_digest_is_refused_naming_both():
    registry = Registry()
    other = "sha256:" + "2" * 64
    digest, _, _ = _signed(registry, signed_digest=other)
    assert refusal(registry, digest) == (f"{REGISTRY}@{digest}: resolves to {digest[:19]}, but the signature "
                                          f"covers {other[:19]}")


def test_documents_changed_missing_gone_or_of_another_size_are_each_refused():
    registry = Registry()
    digest, config = image(registry)
    sbom, provenance = docs(digest, config)
    changed = ("sbom", sbom[1] + b" ")
    attach(registry, PATH, digest, [changed, provenance, ("signature", signature(digest, [sbom, provenance]))])
    assert refusal(registry, digest) == (f"the sbom attached is {compute_digest(changed[1])[:19]}, the signature "
                                         f"names {compute_digest(sbom[1])[:19]}: it was changed after signing")
    registry = Registry()
    digest, config = image(registry)
    sbom, provenance = docs(digest, config)
    attach(registry, PATH, digest, [provenance, ("signature", signature(digest, [sbom, provenance]))])
    assert refusal(registry, digest) == (f"the sbom the signature names ({compute_digest(sbom[1])[:19]}) is not "
                                          f"attached: deleted or never pushed")
    registry = Registry()
    digest, _, made = _signed(registry)
    want = compute_digest(made[1][1])
    registry.blobs[want] = made[1][1] + b"\n"  # more bytes than signed: a registry serving other bytes
    assert refusal(registry, digest) == f"the provenance is {len(made[1][1]) + 1} bytes, the signature names " \
                                         f"{len(made[1][1])}"

    def gone(repo: str, blob: str, *, max_bytes: int | None = None) -> bytes:
        if blob == want:
            raise ManifestNotFound(blob)
        return MemoryRegistry.get_blob(registry, repo, blob, max_bytes=max_bytes)

    registry.get_blob = gone
    assert refusal(registry, digest) == f"the provenance document {want[:19]} is gone from the registry"

    def broken(repo: str, blob: str, *, max_bytes: int | None = None) -> bytes:
        if blob == want:
            assert max_bytes == len(made[1][1])  # no more than the signature names
            raise RegistryError("registry memory: GET blob: HTTP 500")
        return MemoryRegistry.get_blob(registry, repo, blob, max_bytes=max_bytes)

    registry.get_blob = broken
    assert refusal(registry, digest) == f"the provenance document {want[:19]}: registry memory: GET blob: HTTP 500"


def test_an_sbom_of_another_image_or_a_provenance_of_another_subject_is_refused():
    registry = Registry()
    digest, config = image(registry)
    stranger = "sha256:" + "3" * 64
    made = docs(digest, config, sbom_image=stranger)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    assert refusal(registry, digest) == (f"the SBOM describes image {stranger[:19]}, this manifest's config is "
                                          f"{config[:19]}")
    registry = Registry()
    digest, config = image(registry)
    made = docs(digest, config, subject=stranger)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    assert refusal(registry, digest) == f"the provenance names {stranger[:19]}, not {digest[:19]}"


def test_a_signed_build_of_another_stack_is_refused_and_render_needs_an_image():
    registry = Registry()
    digest, _, _ = _signed(registry)
    with pytest.raises(NotVerified) as err:
        verify(registry, digest, BuildIdentity("other"))
    assert str(err.value) == f"{REGISTRY}@{digest}: signed for another build: stack: expected 'other', found 'cu130'"
    for given in (None, ""):
        with pytest.raises(BadInput) as bad:
            verified_for_render(given, "k.pub", IDENTITY)
        assert str(bad.value) == ("--verify-key needs --image REPO@sha256:... (or REPO:TAG) of a published image")


# ---- an index: its own signature, then each platform bound to the stack (not to one platform's config hash) ----

INDEX = "application/vnd.oci.image.index.v1+json"


def _index(registry: Registry, *, signed_over: str | None = None, manifests: bool = True) -> tuple[str, str, str]:
    """An index of two platforms, amd64 signed and arm64 released unsigned, its own signature over `signed_over`
    (its digest unless told): (index digest, amd64 digest, arm64 digest)."""
    amd64, _, _ = _signed(registry)
    arm64, config = image(registry, "arm64")
    attach(registry, PATH, arm64, docs(arm64, config))
    entries = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1,
                "platform": {"os": "linux", "architecture": arch}} for arch, d in (("amd64", amd64), ("arm64", arm64))]
    body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, **({"manifests": entries} if manifests else {})})
    digest = registry.put_manifest(PATH, "v1", body.encode(), INDEX)
    attach(registry, PATH, digest, [("signature", signature(digest, [], signed_digest=signed_over))])
    return digest, amd64, arm64


def test_an_index_says_each_platforms_verdict_bound_to_the_stack_not_a_config_hash():
    registry = Registry()
    index, amd64, arm64 = _index(registry)
    skipped = plant(registry, index, "sbom", {"size": -1})
    with pytest.raises(IndexNotVerified) as err:
        verify(registry, index, BuildIdentity("cu130", "d" * 64, "pkg:pypi/sglang@0.5.9"))
    unsigned = f"{REGISTRY}@{arm64}: no signature attached (unsigned, or its signature was deleted)"
    assert str(err.value) == f"linux/arm64 {arm64[:19]}: {unsigned}"
    done = err.value.verification
    assert done.platforms == [
        {"platform": "index", "digest": index, "verified": True},
        {"platform": "linux/amd64", "digest": amd64, "verified": True,
         "signed_for": {"stack": "cu130", "config_hash": "c" * 64, "sglang": "pkg:pypi/sglang@0.5.9"}},
        {"platform": "linux/arm64", "digest": arm64, "verified": False, "reason": unsigned}]
    assert done.checked[0] == f"signature by key {KID} covers the index {index}"
    assert done.skipped == [f"artifact {skipped[:19]} (tag): its layer's size -1 is not a number of bytes up to "
                            f"33554432"]
    with pytest.raises(IndexNotVerified) as err:
        verify(registry, index, BuildIdentity("other"))
    assert [p["reason"].split(": ", 1)[1] for p in err.value.verification.platforms[1:2]] == [
        "signed for another build: stack: expected 'other', found 'cu130'"]


def test_an_index_signature_over_another_digest_or_beside_other_documents():
    registry = Registry()
    other = "sha256:" + "4" * 64
    index, _, _ = _index(registry, signed_over=other)
    with pytest.raises(IndexNotVerified) as err:
        verify(registry, index)
    assert err.value.verification.platforms[0] == {
        "platform": "index", "digest": index, "verified": False,
        "reason": f"{REGISTRY}@{index}: the signature covers {other[:19]}, not this index"}
    registry = Registry()
    index, _, _ = _index(registry, manifests=False)  # an index listing no manifests: its own signature only
    attach(registry, PATH, index, docs(index, "sha256:" + "5" * 64)[:1])  # an SBOM beside it: not a signature
    done = verify(registry, index)
    assert [p["platform"] for p in done.platforms] == ["index"] and done.skipped == []


def test_render_verify_key_prints_the_verified_line_and_gives_the_digest(tmp_path, monkeypatch, capsys):
    registry = Registry()
    digest, _, _ = _signed(registry)
    registry.tags["v1"] = digest
    monkeypatch.setattr(verify_mod, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    key = tmp_path / "release.pub"
    key.write_bytes(public_pem(KEY))
    assert verified_for_render(f"{REGISTRY}:v1", str(key), IDENTITY) == f"{REGISTRY}@{digest}"
    named = verify(registry, digest).signed.describe()
    assert capsys.readouterr().err == f"verified: {REGISTRY}:v1 is {digest}, signed by key {KID} for {named}\n"
    with pytest.raises(NotVerified, match="signed for another build: stack: expected 'other', found 'cu130'"):
        verified_for_render(f"{REGISTRY}:v1", str(key), BuildIdentity("other"))
