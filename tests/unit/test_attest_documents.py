"""The attestation documents checked whole, in process: the provenance statement field by field and byte
for byte, the SBOM's components, purls and roles, the DSSE envelope's exact bytes and PAE, and every
refusal of key loading, envelope opening and document reading word for word."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.attest.errors import AttestationError, BadInput, NotVerified
from sglstack.attest.provenance import provenance_statement, statement_subjects
from sglstack.attest.signing import (
    Attached,
    load_public_key,
    load_signing_key,
    open_envelope,
    pae,
    public_pem,
    sign_envelope,
    signed_attestations,
    signed_payload,
)
from sglstack.imagebuild.identity import tree_sha256
from sglstack.inventory.model import Inventory, InventoryError
from sglstack.inventory.sbom import read_sbom, sbom_document
from sglstack.lockfile.model import Lock, LockedPackage

PAYLOAD_TYPE = "application/vnd.sglstack.attestations.v1+json"
DIGEST = "sha256:" + "9" * 64
IMAGE_ID = "sha256:" + "ab" * 32


def _canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


# ---- provenance ----------------------------------------------------------------------------------------

def _record(**extra) -> dict:
    return {"stack": "cpu-test", "target": "runtime", "image_id": IMAGE_ID, "config_hash": "c" * 64,
            "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic", "client_version": "20.10.24"},
            "pins": {"sglang": "0.5.9"}, "base_image": {"name": "debian:bookworm-slim", "digest": "sha256:" + "d" * 64},
            "sglang": {"version": "0.5.9", "git": None}, "lock": {"content_sha256": "e" * 64},
            "provenance": {"patches": {"zeta": "f" * 64, "alpha": "a" * 64},
                           "sglstack": {"version": "0.1.0", "commit": "1" * 40},
                           "started_at": "2026-12-03T18:50:00Z"}, **extra}


def test_the_provenance_statement_is_exactly_the_canonical_slsa_document():
    body = provenance_statement(_record(), repository="reg.example/team/img", digest=DIGEST)
    assert body.startswith(b'{"_type":"https://in-toto.io/Statement/v1","predicate":{"buildDefinition":{')
    assert body == _canonical({
        "_type": "https://in-toto.io/Statement/v1",
        "predicateType": "https://slsa.dev/provenance/v1",
        "subject": [{"name": "reg.example/team/img", "digest": {"sha256": "9" * 64}}],
        "predicate": {
            "buildDefinition": {
                "buildType": "https://sglstack.dev/build/stack-image/v1",
                "externalParameters": {"stack": "cpu-test", "target": "runtime", "config_hash": "c" * 64},
                "internalParameters": {"pins": {"sglang": "0.5.9"}, "image_id": IMAGE_ID},
                "resolvedDependencies": [
                    {"name": "base-image", "uri": "pkg:docker/debian:bookworm-slim", "digest": {"sha256": "d" * 64}},
                    {"name": "lock", "digest": {"sha256": "e" * 64}},
                    {"name": "patch:alpha", "digest": {"sha256": "a" * 64}},
                    {"name": "patch:zeta", "digest": {"sha256": "f" * 64}},
                    {"name": "sglang", "uri": "pkg:pypi/sglang@0.5.9"},
                ],
            },
            "runDetails": {
                "builder": {"id": "https://sglstack.dev/builder/classic",
                            "version": {"sglstack": "0.1.0", "sglstack-commit": "1" * 40,
                                        "buildkit-client": "20.10.24"}},
                "metadata": {"invocationId": "cpu-test-" + "c" * 12, "startedOn": "2026-12-03T18:50:00Z",
                             "finishedOn": "2026-12-03T19:00:00Z"},
            },
        },
    })


def test_a_sparse_record_says_unknown_builder_none_versions_and_starts_when_built():
    record = _record(builder={"client_version": "27.0"}, pins=None, base_image={"name": "debian"}, lock=None,
                     provenance={}, sglang={"git": {"repo": "/src/sglang", "ref": None}})
    doc = json.loads(provenance_statement(record, repository="r", digest=DIGEST))
    definition, run = doc["predicate"]["buildDefinition"], doc["predicate"]["runDetails"]
    assert definition["internalParameters"] == {"pins": {}, "image_id": IMAGE_ID}
    assert definition["resolvedDependencies"] == [{"name": "sglang", "uri": "git+/src/sglang@",
                                                   "digest": {"gitCommit": ""}}]
    assert run == {"builder": {"id": "https://sglstack.dev/builder/unknown",
                               "version": {"sglstack": "None", "sglstack-commit": "None", "buildkit-client": "27.0"}},
                   "metadata": {"invocationId": "cpu-test-" + "c" * 12, "startedOn": "2026-12-03T19:00:00Z",
                                "finishedOn": "2026-12-03T19:00:00Z"}}
    bare = json.loads(provenance_statement(_record(builder=None), repository="r", digest=DIGEST))
    assert bare["predicate"]["runDetails"]["builder"] == {
        "id": "https://sglstack.dev/builder/unknown",
        "version": {"sglstack": "0.1.0", "sglstack-commit": "1" * 40, "buildkit-client": "None"}}


def test_a_git_sglang_without_a_ref_takes_the_locks_commit():
    record = _record(sglang={"git": {"repo": "https://github.com/sgl-project/sglang", "ref": ""}})
    record["provenance"]["lock_sglang_commit"] = "b" * 40
    deps = json.loads(provenance_statement(record, repository="r", digest=DIGEST))[
        "predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[-1] == {"name": "sglang", "uri": "git+https://github.com/sgl-project/sglang@" + "b" * 40,
                        "digest": {"gitCommit": "b" * 40}}


def test_the_provenance_refuses_a_digest_that_is_not_sha256_and_a_record_without_facts():
    with pytest.raises(AttestationError) as err:
        provenance_statement(_record(), repository="r", digest="md5:abc")
    assert str(err.value) == "provenance: 'md5:abc' is not a sha256 digest"
    record = _record()
    del record["provenance"]
    with pytest.raises(AttestationError) as err:
        provenance_statement(record, repository="r", digest=DIGEST)
    assert str(err.value) == ("the build record has no provenance facts ('provenance'): rebuild with this "
                              "sglstack to attest it")


def test_the_subjects_of_a_statement_and_what_is_not_one():
    body = provenance_statement(_record(), repository="r", digest=DIGEST)
    assert statement_subjects(body) == [DIGEST]
    wrong_predicate = json.loads(body)
    wrong_predicate["predicateType"] = "https://slsa.dev/provenance/v0.2"
    wrong_type = json.loads(body)
    wrong_type["_type"] = "https://in-toto.io/Statement/v0.1"
    for doc in (wrong_predicate, wrong_type):
        with pytest.raises(AttestationError) as err:
            statement_subjects(_canonical(doc))
        assert str(err.value) == ("the provenance is not an in-toto statement this tool wrote (not an in-toto SLSA "
                                  "provenance statement)")
    with pytest.raises(AttestationError) as err:
        statement_subjects(_canonical({"_type": "https://in-toto.io/Statement/v1",
                                       "predicateType": "https://slsa.dev/provenance/v1", "subject": [{}]}))
    assert str(err.value) == "the provenance is not an in-toto statement this tool wrote ('digest')"


def test_a_patch_tree_hash_covers_each_files_path_and_content_and_skips_caches(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_bytes(b"print(2)\n")
    (tmp_path / "a.txt").write_bytes(b"one\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0bytecode")

    def line(rel: str, data: bytes) -> str:
        return f"{rel}\0{hashlib.sha256(data).hexdigest()}\n"

    want = hashlib.sha256((line("a.txt", b"one\n") + line("sub/b.py", b"print(2)\n")).encode()).hexdigest()
    assert tree_sha256(tmp_path) == want
    assert tree_sha256(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


# ---- SBOM ----------------------------------------------------------------------------------------------

LISTING = {
    "python": "3.11.2",
    "python_distributions": [{"name": "Six", "version": "1.16.0"}, {"name": "pip", "version": "23.0.1"},
                             {"name": "idna", "version": "3.10"}],
    "debian_packages": [{"name": "tzdata", "version": "2024a"}, {"name": "libc6", "version": "2.36", "arch": "amd64"}],
}


def _lock(*packages: tuple[str, str]) -> Lock:
    return Lock(stack="s", stack_sha256="0" * 64, resolved_at="2026-12-03T00:00:00Z", resolver="uv", python="3.11",
                platforms=("linux",), layers=("deps",),
                packages=tuple(LockedPackage(name=n, version=v, layer="deps", hashes=("sha256:" + "1" * 64,))
                               for n, v in packages))


def test_an_inventory_is_read_whole_from_the_listing():
    inventory = Inventory.from_listing(LISTING)
    assert inventory == Inventory(python={"idna": "3.10", "pip": "23.0.1", "six": "1.16.0"},
                                  debian=(("libc6", "2.36", "amd64"), ("tzdata", "2024a", "")),
                                  python_version="3.11.2", requires={"idna": (), "pip": (), "six": ()})
    assert list(inventory.python) == ["idna", "pip", "six"]
    with pytest.raises(InventoryError) as err:
        Inventory.from_listing({"python_distributions": [{"name": "x"}], "debian_packages": []})
    assert str(err.value) == "the image's inventory is malformed (missing 'version')"


@pytest.fixture
def far_time_zone(monkeypatch):
    """The process's local zone far from UTC, so that only an explicit conversion gives the UTC timestamp."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _component(name: str, version: str, purl: str, description: str) -> dict:
    return {"bom-ref": purl, "description": description, "name": name, "purl": purl, "type": "library",
            "version": version}


def test_the_sbom_is_exactly_the_canonical_cyclonedx_document(far_time_zone):
    created = dt.datetime(2026, 12, 3, 21, 0, 0, 999999, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    body = sbom_document(Inventory.from_listing(LISTING), image_name="sglstack/cpu-test:abc", image_id=IMAGE_ID,
                         created=created)
    doc = json.loads(body)
    assert body == _canonical(doc) and body.startswith(b'{"$schema":"http://cyclonedx.org/schema/bom-1.6.schema.json",'
                                                       b'"bomFormat":"CycloneDX","components":[{"bom-ref":')
    libc, tz = "pkg:deb/debian/libc6@2.36?arch=amd64", "pkg:deb/debian/tzdata@2024a"
    idna, pip, six = "pkg:pypi/idna@3.10", "pkg:pypi/pip@23.0.1", "pkg:pypi/six@1.16.0"
    root = f"image:{IMAGE_ID}"
    assert doc == {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "version": 1,
        "serialNumber": doc["serialNumber"],
        "metadata": {"timestamp": "2026-12-03T19:00:00+00:00",
                     "component": {"bom-ref": root, "name": "sglstack/cpu-test:abc", "type": "container",
                                   "version": IMAGE_ID}},
        "components": [
            _component("idna", "3.10", idna, "python package"),
            _component("libc6", "2.36", libc, "debian package"),
            _component("pip", "23.0.1", pip,
                       "python package (the venv's bootstrap: not compared with the lock)"),
            _component("six", "1.16.0", six, "python package"),
            _component("tzdata", "2024a", tz, "debian package"),
        ],
        "dependencies": [{"ref": root, "dependsOn": sorted([libc, tz, idna, pip, six])},
                         {"ref": libc}, {"ref": tz}, {"ref": idna}, {"ref": pip}, {"ref": six}],
    }
    assert doc["serialNumber"].startswith("urn:uuid:")


def test_the_sbom_says_of_each_python_package_whether_the_lock_has_it():
    lock = _lock(("six", "1.16.0"), ("pip", "23.0.1"))
    doc = json.loads(sbom_document(Inventory.from_listing(LISTING), image_name="x", image_id=IMAGE_ID,
                                   created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC), lock=lock))
    assert {c["name"]: c["description"] for c in doc["components"]} == {
        "idna": "python package (not in the lock)", "pip": "python package (in the lock)",
        "six": "python package (in the lock)", "libc6": "debian package", "tzdata": "debian package"}
    unlocked = json.loads(sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name="x",
                                        image_id=IMAGE_ID, created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
                                        lock=_lock(("six", "1.16.0"))))
    assert [c["description"] for c in unlocked["components"]] == [
        "python package (the venv's bootstrap: not compared with the lock)"]


def test_an_sbom_read_back_and_what_is_not_one():
    body = sbom_document(Inventory.from_listing(LISTING), image_name="x", image_id=IMAGE_ID,
                         created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    summary = read_sbom(body)
    assert (summary.image_id, summary.python, summary.debian, summary.components) == (
        IMAGE_ID, {"idna": "3.10", "pip": "23.0.1", "six": "1.16.0"}, 2, 5)
    odd = read_sbom(_canonical({"bomFormat": "CycloneDX", "metadata": {"component": {"version": 7}},
                                "components": [{"name": "nover", "purl": "pkg:pypi/nover"},
                                               {"name": "nopurl", "version": "1"},
                                               {"name": "npm", "purl": "pkg:npm/left-pad@1.0.0"}]}))
    assert (odd.image_id, odd.python, odd.debian) == (None, {"nover": ""}, 0)
    with pytest.raises(InventoryError) as err:
        read_sbom(_canonical({"bomFormat": "SPDX"}))
    assert str(err.value) == "the SBOM is not a CycloneDX JSON document this tool wrote (not CycloneDX)"
    with pytest.raises(InventoryError) as err:
        read_sbom(_canonical({"bomFormat": "CycloneDX", "components": [{"purl": "pkg:pypi/x@1"}]}))
    assert str(err.value) == "the SBOM is not a CycloneDX JSON document this tool wrote ('name')"


# ---- the envelope --------------------------------------------------------------------------------------

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


def _kid(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _envelope(payload: bytes, *signatures: dict) -> bytes:
    return _canonical({"payloadType": PAYLOAD_TYPE, "payload": _b64(payload), "signatures": list(signatures)})


def _sig(key: Ed25519PrivateKey, payload: bytes) -> dict:
    return {"keyid": _kid(key), "sig": _b64(key.sign(pae(PAYLOAD_TYPE, payload)))}


def _payload() -> bytes:
    return signed_payload("sha256:" + "3" * 64, [
        Attached("sbom", "application/vnd.cyclonedx+json", "sha256:" + "1" * 64, 10),
        Attached("provenance", "application/vnd.in-toto+json", "sha256:" + "2" * 64, 20)])


def test_pae_is_the_dsse_pre_authentication_encoding():
    assert pae("a/b", b"{}") == b"DSSEv1 3 a/b 2 {}"
    assert pae(PAYLOAD_TYPE, b"") == b"DSSEv1 45 application/vnd.sglstack.attestations.v1+json 0 "


def test_the_signed_payload_and_envelope_are_exact_bytes():
    payload = _payload()
    assert payload == (
        b'{"_type":"https://sglstack.dev/signed-attestations/v1","attestations":['
        b'{"digest":"sha256:' + b"2" * 64 + b'","kind":"provenance","mediaType":"application/vnd.in-toto+json",'
        b'"size":20},{"digest":"sha256:' + b"1" * 64 + b'","kind":"sbom","mediaType":"application/vnd.cyclonedx+json",'
        b'"size":10}],"image":{"digest":"sha256:' + b"3" * 64 + b'"}}')
    envelope = sign_envelope(KEY, payload)
    sig = KEY.sign(b"DSSEv1 45 application/vnd.sglstack.attestations.v1+json %d %s" % (len(payload), payload))
    assert envelope == (b'{"payload":"' + base64.b64encode(payload) + b'","payloadType":"' + PAYLOAD_TYPE.encode()
                        + b'","signatures":[{"keyid":"' + _kid(KEY).encode() + b'","sig":"' + base64.b64encode(sig)
                        + b'"}]}')
    assert open_envelope(envelope, KEY.public_key()) == json.loads(payload)


def test_an_envelope_opens_by_any_one_of_its_signatures():
    payload = _payload()
    both = _envelope(payload, _sig(OTHER, payload), _sig(KEY, payload))
    assert open_envelope(both, KEY.public_key()) == json.loads(payload)
    assert open_envelope(both, OTHER.public_key()) == json.loads(payload)


def _refusal(body: bytes, key: Ed25519PrivateKey = KEY) -> str:
    with pytest.raises(NotVerified) as err:
        open_envelope(body, key.public_key())
    return str(err.value)


def test_a_wrong_key_is_refused_naming_the_key_and_the_signers():
    payload = _payload()
    mine, theirs = _kid(KEY)[:16], _kid(OTHER)[:16]
    assert _refusal(sign_envelope(OTHER, payload)) == f"no signature by key {mine} (it was signed by {theirs})"
    anonymous = {"sig": _sig(OTHER, payload)["sig"]}
    assert _refusal(_envelope(payload, _sig(OTHER, payload), anonymous)) == (
        f"no signature by key {mine} (it was signed by {theirs}, ?)")
    assert _refusal(_envelope(payload)) == f"no signature by key {mine} (it was signed by nobody)"


def test_a_tampered_payload_or_signature_is_refused():
    payload = _payload()
    good = _sig(KEY, payload)
    mine = _kid(KEY)[:16]
    tampered = payload.replace(b'"size":10', b'"size":11')
    assert _refusal(_envelope(tampered, good)) == f"no signature by key {mine} (it was signed by {mine})"
    flipped = bytearray(base64.b64decode(good["sig"]))
    flipped[0] ^= 1
    assert _refusal(_envelope(payload, {"keyid": good["keyid"], "sig": _b64(bytes(flipped))})) == (
        f"no signature by key {mine} (it was signed by {mine})")


def test_what_is_not_an_envelope_is_refused_word_for_word():
    payload = _payload()
    good = _sig(KEY, payload)
    prefix = "the signature is not a DSSE envelope this tool wrote"
    other_type = _canonical({"payloadType": "text/plain", "payload": _b64(payload), "signatures": [good]})
    assert _refusal(other_type) == f"{prefix} (payload type 'text/plain')"
    assert _refusal(_canonical({"payload": _b64(payload), "signatures": [good]})) == f"{prefix} (payload type None)"
    noisy = _canonical({"payloadType": PAYLOAD_TYPE, "payload": "!" + _b64(payload), "signatures": [good]})
    assert _refusal(noisy) == f"{prefix} (Only base64 data is allowed)"
    noisy_sig = _envelope(payload, {"keyid": good["keyid"], "sig": "!" + good["sig"]})
    assert _refusal(noisy_sig) == f"{prefix} (Only base64 data is allowed)"
    assert _refusal(_canonical({"payloadType": PAYLOAD_TYPE, "signatures": []})) == f"{prefix} ('payload')"
    assert _refusal(b"[]") == f"{prefix} ('list' object has no attribute 'get')"


def test_a_signed_payload_that_is_not_ours_is_refused_word_for_word():
    assert _refusal(sign_envelope(KEY, b"not json")) == "the signed payload is not JSON"
    for data in (b'{"_type":"https://example.com/other"}', b"[1]"):
        assert _refusal(sign_envelope(KEY, data)) == "the signed payload is not an sglstack attestation list"


def test_a_verified_payload_names_the_image_and_documents_or_is_incomplete():
    digest, named = signed_attestations(json.loads(_payload()))
    assert digest == "sha256:" + "3" * 64 and named == [
        Attached("provenance", "application/vnd.in-toto+json", "sha256:" + "2" * 64, 20),
        Attached("sbom", "application/vnd.cyclonedx+json", "sha256:" + "1" * 64, 10)]
    with pytest.raises(NotVerified) as err:
        signed_attestations({"image": {"digest": "sha256:1"}})
    assert str(err.value) == "the signed payload is incomplete ('attestations')"


# ---- keys ----------------------------------------------------------------------------------------------

def _pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _raw(public) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _bad(option, env) -> str:
    with pytest.raises(BadInput) as err:
        load_signing_key(option, env=env)
    assert err.value.exit_code == 2
    return str(err.value)


def test_the_key_comes_from_the_process_environment_by_default(tmp_path, monkeypatch):
    path = tmp_path / "signing.pem"
    path.write_bytes(_pem(KEY))
    monkeypatch.setenv("SGLSTACK_SIGNING_KEY", str(path))
    assert _raw(load_signing_key().public_key()) == _raw(KEY.public_key())
    monkeypatch.setenv("SGLSTACK_SIGNING_KEY", "\n  " + _pem(KEY).decode())  # a PEM pasted with a leading newline
    assert _raw(load_signing_key(None).public_key()) == _raw(KEY.public_key())


def test_every_refusal_of_a_signing_key_word_for_word(tmp_path):
    missing = tmp_path / "missing.pem"
    assert _bad(None, {}) == ("no signing key: pass --signing-key PATH or set SGLSTACK_SIGNING_KEY (a path, or the PEM "
                              "itself), or --unsigned to release without a signature")
    assert _bad(None, {"SGLSTACK_SIGNING_KEY": ""}) == _bad(None, {})
    assert _bad(str(missing), {}) == f"--signing-key: cannot read key file '{missing}' (No such file or directory)"
    assert _bad(None, {"SGLSTACK_SIGNING_KEY": str(missing)}) == (
        f"SGLSTACK_SIGNING_KEY: cannot read key file '{missing}' (No such file or directory)")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    assert _bad(str(junk), {}) == f"--signing-key {junk}: not a PEM private key"
    assert _bad(None, {"SGLSTACK_SIGNING_KEY": str(junk)}) == f"SGLSTACK_SIGNING_KEY ({junk}): not a PEM private key"
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    assert _bad(None, {"SGLSTACK_SIGNING_KEY": _pem(rsa_key).decode()}) == (
        "SGLSTACK_SIGNING_KEY: a RSAPrivateKey key, not ed25519")
    locked = tmp_path / "locked.pem"
    locked.write_bytes(KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"pw")))
    assert _bad(str(locked), {}) == f"--signing-key {locked}: the key is encrypted; give an unencrypted ed25519 PEM key"


def test_an_unreadable_key_file_that_is_no_missing_file_says_why(tmp_path):
    assert _bad(str(tmp_path), {}) == f"--signing-key: cannot read key file '{tmp_path}' (a folder, not a regular file)"


def _body_lines(pem: bytes) -> list[str]:
    """The lines of a PEM that are the key itself (its base64), which no message may hold."""
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


def _shapes() -> dict[str, str]:
    """A key pasted into SGLSTACK_SIGNING_KEY as people paste it, none starting with '-----BEGIN'."""
    pem = _pem(KEY).decode()
    body = "".join(_body_lines(_pem(KEY)))
    bag = ("Bag Attributes\n    localKeyID: 01 00 00 00 \n    friendlyName: signing\n"
           "Key Attributes: <No Attributes>\n")
    return {"bag attributes": bag + pem, "bom": "\ufeff" + pem, "bom and crlf": "\ufeff" + pem.replace("\n", "\r\n"),
            "body alone": body, "body in lines": body[:32] + "\n" + body[32:] + "\n",
            "spaces for newlines": pem.replace("\n", " "), "no end line": pem.split("-----END")[0],
            "bag attributes, truncated": bag + pem[:60]}


@pytest.mark.parametrize("shape", ["bag attributes", "bom", "bom and crlf", "spaces for newlines"])
def test_a_key_pasted_with_a_preamble_or_a_byte_order_mark_is_read_as_the_key(shape):
    loaded = load_signing_key(None, env={"SGLSTACK_SIGNING_KEY": _shapes()[shape]})
    assert _raw(loaded.public_key()) == _raw(KEY.public_key())


@pytest.mark.parametrize("shape, line", [
    ("body alone", "SGLSTACK_SIGNING_KEY: only the base64 body of a key, without its '-----BEGIN PRIVATE KEY-----' "
                   "and '-----END' lines: give the whole PEM"),
    ("body in lines", "SGLSTACK_SIGNING_KEY: only the base64 body of a key, without its "
                      "'-----BEGIN PRIVATE KEY-----' and '-----END' lines: give the whole PEM"),
    ("no end line", "SGLSTACK_SIGNING_KEY: not a PEM private key"),
    ("bag attributes, truncated", "SGLSTACK_SIGNING_KEY: not a PEM private key"),
])
def test_key_text_that_is_no_pem_is_never_taken_for_a_path_nor_shown(shape, line):
    """The issue: key text not starting with '-----BEGIN' was opened as a path and the error quoted it."""
    message = _bad(None, {"SGLSTACK_SIGNING_KEY": _shapes()[shape]})
    assert message == line
    assert not any(part in message for part in _body_lines(_pem(KEY)))


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_key_text_given_to_key_is_refused_without_opening_or_showing_it(shape):
    assert _bad(_shapes()[shape], {}) == ("--signing-key: takes a path to the key file, and this is key text (never "
                                          "put a key on a command line: use a file, or SGLSTACK_SIGNING_KEY)")
    with pytest.raises(BadInput) as err:
        load_public_key(_shapes()[shape], what="--verify-key")
    assert str(err.value) == "--verify-key: takes a path to the public key file, and this is key text"


def test_a_path_of_base64_letters_that_exists_is_a_path(tmp_path):
    folder = tmp_path / ("k" * 20) / "signingKeyForTheReleasePipeline"
    folder.parent.mkdir()
    folder.write_bytes(_pem(KEY))
    assert _raw(load_signing_key(str(folder), env={}).public_key()) == _raw(KEY.public_key())


def test_a_key_file_that_is_a_fifo_a_device_or_too_big_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)  # nobody writes it: an open or read that blocked would hang this test
    assert _bad(str(fifo), {}) == f"--signing-key: cannot read key file '{fifo}' (a FIFO, not a regular file)"
    assert _bad(None, {"SGLSTACK_SIGNING_KEY": str(fifo)}) == (
        f"SGLSTACK_SIGNING_KEY: cannot read key file '{fifo}' (a FIFO, not a regular file)")
    assert _bad_public(fifo, what="--verify-key") == (
        f"--verify-key: cannot read key file '{fifo}' (a FIFO, not a regular file)")
    assert _bad("/dev/zero", {}) == ("--signing-key: cannot read key file '/dev/zero' (a character device, not a "
                                     "regular file)")
    big = tmp_path / "big.pem"
    big.write_bytes(_pem(KEY) + b"#" * (64 * 1024))
    assert _bad(str(big), {}) == f"--signing-key: cannot read key file '{big}' (larger than 64 KiB)"
    assert _bad_public(big) == f"--verify-key: cannot read key file '{big}' (larger than 64 KiB)"
    link = tmp_path / "link.pem"
    link.symlink_to(fifo)
    assert _bad(str(link), {}) == f"--signing-key: cannot read key file '{link}' (a FIFO, not a regular file)"


def _bad_public(path, **what) -> str:
    with pytest.raises(BadInput) as err:
        load_public_key(str(path), **what)
    return str(err.value)


def test_every_refusal_of_a_public_key_word_for_word(tmp_path):
    good = tmp_path / "good.pub"
    good.write_bytes(public_pem(KEY))
    assert _raw(load_public_key(str(good))) == _raw(KEY.public_key())
    missing = tmp_path / "missing.pub"
    assert _bad_public(missing) == f"--verify-key: cannot read key file '{missing}' (No such file or directory)"
    assert _bad_public(missing, what="--trust") == (
        f"--trust: cannot read key file '{missing}' (No such file or directory)")
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key")
    assert _bad_public(junk) == f"--verify-key {junk}: not a PEM public key"
    private = tmp_path / "private.pem"
    private.write_bytes(_pem(KEY))
    assert _bad_public(private, what="--trust") == (
        f"--trust {private}: not a PEM public key (that is a private key: give its public half)")
    other = tmp_path / "rsa.pub"
    other.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert _bad_public(other) == f"--verify-key {other}: not an ed25519 public key"
