"""An index signed by two keys, an index signature that does not verify once pushed, and what a verification reports
of signatures it skipped, of a provenance naming other subjects and of a document a signature names beyond the SBOM
and provenance; the verified line on a colour terminal, with an IPv6 registry host (issue 35, mutation of
`attest-store`). In process, against the in-memory registry (`attest_memory`: one repository, a call naming another
is refused)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from attest_memory import IDENTITY, KEY, KID, PATH, REGISTRY, Registry, docs, image, signature, verify
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from sglstack.attest import verify as verify_mod
from sglstack.attest.errors import AttestationError, NotVerified
from sglstack.attest.release import ensure_index_signed
from sglstack.attest.signing import Attached, key_id, open_envelope, public_pem, sign_envelope, signed_payload
from sglstack.attest.store import KINDS, attach, find_attestations
from sglstack.attest.verify import verified_for_render, verify_image, verify_index_signature
from sglstack.config.imageref import parse_image_reference, parse_repository
from sglstack.registry.client import DOCKER_MANIFEST, compute_digest

REPO = parse_repository(REGISTRY)
INDEX = "application/vnd.oci.image.index.v1+json"
OTHER = Ed25519PrivateKey.generate()
OTHER_KID = key_id(OTHER.public_key())[:16]


def _index(registry: Registry) -> tuple[str, dict[str, str]]:
    """An index of one platform released `--unsigned` (its SBOM and provenance attached): (index, children)."""
    amd64, config = image(registry)
    attach(registry, PATH, amd64, docs(amd64, config))
    body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [
        {"mediaType": DOCKER_MANIFEST, "digest": amd64, "size": 1,
         "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    return registry.put_manifest(PATH, "v1", body, INDEX), {"linux/amd64": amd64}


def test_an_index_signed_by_a_second_key_keeps_the_first_keys_signature():
    registry = Registry()  # the tag scheme: one `.signature` tag per manifest, so keeping the first is cosigning
    index, children = _index(registry)
    assert ensure_index_signed(registry, REPO, index, children, KEY, IDENTITY)[-1] == (
        f"index {REGISTRY}@{index} signed by key {KID}")
    said = ensure_index_signed(registry, REPO, index, children, OTHER, IDENTITY)
    assert said == [f"linux/amd64: signed the SBOM and provenance attached to it: {REGISTRY}@{children['linux/amd64']},"
                    f" signed by key {OTHER_KID}", f"index {REGISTRY}@{index} signed by key {OTHER_KID}"]
    for key in (KEY, OTHER):
        assert verify_index_signature(registry, REPO, index, key.public_key()) == (
            f"signature by key {key_id(key.public_key())[:16]} covers the index {index}")
    assert ensure_index_signed(registry, REPO, index, children, KEY, IDENTITY)[-1] == (
        f"index {REGISTRY}@{index} is already signed by key {KID}")


def test_an_index_signed_by_another_key_only_is_not_verified_and_says_which_key_signed():
    registry = Registry()
    index, children = _index(registry)
    ensure_index_signed(registry, REPO, index, children, OTHER, IDENTITY)
    with pytest.raises(NotVerified) as err:
        verify_index_signature(registry, REPO, index, KEY.public_key())
    assert str(err.value) == f"no signature by key {KID} (it was signed by {key_id(OTHER.public_key())[:16]})"


class _Forgetful(Registry):
    """A registry that answers the PUT of a signature artifact of `forget` as stored and keeps nothing of it (a
    lost write)."""

    forget: str | None = None

    def put_artifact(self, repo: str, reference: str, body: bytes, media_type: str) -> tuple[str, bool]:
        data = json.loads(body)
        if data["subject"]["digest"] == self.forget and data["artifactType"] == KINDS["signature"]:
            return compute_digest(body), self.referrers_api
        return super().put_artifact(repo, reference, body, media_type)


def test_an_index_signature_that_does_not_verify_once_pushed_is_refused_in_one_line():
    registry = _Forgetful()
    index, children = _index(registry)
    ensure_index_signed(registry, REPO, index, children, KEY, IDENTITY)
    registry.forget = index
    with pytest.raises(AttestationError) as err:
        ensure_index_signed(registry, REPO, index, children, OTHER, IDENTITY)
    assert str(err.value) == (f"{REGISTRY}@{index}: signed, but it does not verify: no signature by key "
                              f"{OTHER_KID} (it was signed by {key_id(KEY.public_key())[:16]})")


def test_a_signature_another_key_made_listed_first_is_a_skipped_line_of_the_verification():
    registry = Registry(referrers_api=True)  # both signature artifacts listed
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, made)
    payload = signed_payload(digest, [Attached(k, KINDS[k], compute_digest(b), len(b)) for k, b in made])
    envelopes = {KEY: sign_envelope(KEY, payload), OTHER: sign_envelope(OTHER, payload)}
    for envelope in envelopes.values():
        attach(registry, PATH, digest, [("signature", envelope)])
    first, _ = [a for a in find_attestations(registry, PATH, digest) if a.kind == "signature"]
    signer = KEY if registry.blobs[first.document_digest] == envelopes[KEY] else OTHER
    checker = OTHER if signer is KEY else KEY
    with pytest.raises(NotVerified) as why:
        open_envelope(envelopes[signer], checker.public_key())
    done = verify_image(registry, parse_image_reference(f"{REGISTRY}@{digest}"), checker.public_key(), IDENTITY)
    assert done.skipped == [f"signature {first.manifest_digest[:19]}: {why.value}"]
    assert done.as_dict()["skipped"] == done.skipped


def test_a_provenance_naming_two_other_subjects_is_refused_naming_each():
    registry = Registry()
    digest, config = image(registry)
    sbom, provenance = docs(digest, config)
    statement = json.loads(provenance[1])
    others = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    statement["subject"] = [{"name": REGISTRY, "digest": {"sha256": d.removeprefix("sha256:")}} for d in others]
    changed = [sbom, ("provenance", json.dumps(statement).encode())]
    attach(registry, PATH, digest, [*changed, ("signature", signature(digest, changed))])
    with pytest.raises(NotVerified) as err:
        verify(registry, digest)
    assert str(err.value) == f"the provenance names {others[0][:19]}, {others[1][:19]}, not {digest[:19]}"


def test_a_signature_naming_a_third_document_reports_its_digest():
    """A signature naming, beside the SBOM and provenance, another signature document (a countersignature)."""
    registry = Registry(referrers_api=True)
    digest, config = image(registry)
    made = docs(digest, config)
    counter = sign_envelope(OTHER, b'{"_type":"countersignature"}')
    named = [*made, ("signature", counter)]
    attach(registry, PATH, digest, [*named, ("signature", signature(digest, named))])
    done = verify(registry, digest)
    assert done.attestations["signature"] == {"digest": compute_digest(counter)}
    assert done.as_dict()["attestations"]["signature"] == {"digest": compute_digest(counter)}


def test_the_verified_line_on_a_colour_terminal_is_the_line_itself_with_an_ipv6_host(tmp_path, monkeypatch):
    """rich reads `[fd00::1]` as a style tag (`[` and a letter) and colours digests and numbers: neither may touch the
    line, on a terminal as in a pipe."""
    registry = Registry()
    digest, config = image(registry)
    made = docs(digest, config)
    attach(registry, PATH, digest, [*made, ("signature", signature(digest, made))])
    registry.tags["v1"] = digest
    monkeypatch.setattr(verify_mod, "RegistryClient", SimpleNamespace(from_environment=lambda host: registry))
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, color_system="truecolor", width=400, emoji=False)
    monkeypatch.setattr(verify_mod, "console", lambda stderr=False: terminal)
    key = tmp_path / "release.pub"
    key.write_bytes(public_pem(KEY))
    image_ref = f"[fd00::1]:5000/{PATH}:v1"
    assert verified_for_render(image_ref, str(key), IDENTITY) == f"[fd00::1]:5000/{PATH}@{digest}"
    named = verify(registry, digest).signed.describe()
    assert out.getvalue() == f"verified: {image_ref} is {digest}, signed by key {KID} for {named}\n"
