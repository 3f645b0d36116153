"""The attestation core without Docker: the SBOM and its lock check, the provenance statement, what the
signature covers and its keys, and the referrers-API code path against a double of the OCI 1.1 interface."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from registry_double import RegistryDouble

from sglstack.attest.errors import BadInput, NotVerified
from sglstack.attest.provenance import provenance_statement, statement_subjects
from sglstack.attest.signing import (
    Attached,
    load_public_key,
    load_signing_key,
    open_envelope,
    public_pem,
    sign_envelope,
    signed_attestations,
    signed_payload,
)
from sglstack.attest.store import KINDS, artifact_manifest, attach, fallback_tag, find_attestations
from sglstack.attest.verify import verify_image
from sglstack.config.imageref import parse_image_reference
from sglstack.inventory.model import Inventory, lock_problems
from sglstack.inventory.sbom import read_sbom, sbom_document
from sglstack.lockfile.model import Lock, LockedPackage
from sglstack.registry.client import OCI_MANIFEST, RegistryClient, compute_digest

WHEN = dt.datetime(2026, 12, 3, 19, 0, tzinfo=dt.UTC)
IMAGE_ID = "sha256:" + "ab" * 32
LISTING = {
    "python": "3.11.2",
    "python_distributions": [{"name": "Six", "version": "1.16.0"}, {"name": "pip", "version": "23.0.1"},
                             {"name": "setuptools", "version": "66.1.1"}],
    "debian_packages": [{"name": "libc6", "version": "2.36-9+deb12u9", "arch": "amd64"},
                        {"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"}],
}


def _lock(*packages: tuple[str, str]) -> Lock:
    return Lock(stack="s", stack_sha256="0" * 64, resolved_at="2026-12-03T00:00:00Z", resolver="uv", python="3.11",
                platforms=("linux",), layers=("deps",),
                packages=tuple(LockedPackage(name=n, version=v, layer="deps", hashes=("sha256:" + "1" * 64,))
                               for n, v in packages))


def _record(**extra) -> dict:
    return {"stack": "cpu-test", "target": "runtime", "image_id": IMAGE_ID, "config_hash": "c" * 64,
            "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic", "client_version": "20.10.24"},
            "pins": {"sglang": "0.5.9"}, "base_image": {"name": "debian:bookworm-slim", "digest": "sha256:" + "d" * 64},
            "sglang": {"version": "0.5.9", "git": None}, "lock": {"content_sha256": "e" * 64},
            "provenance": {"patches": {"kimi-k25-eagle3": "f" * 64}, "sglstack": {"version": "0.1.0",
                                                                                  "commit": "1" * 40},
                           "started_at": "2026-12-03T18:50:00Z"}, **extra}


# ---- SBOM ----------------------------------------------------------------------------------------------

def test_the_sbom_lists_python_and_debian_packages_deterministically():
    inventory = Inventory.from_listing(LISTING)
    first = sbom_document(inventory, image_name="sglstack/cpu-test:abc", image_id=IMAGE_ID, created=WHEN)
    again = sbom_document(Inventory.from_listing(json.loads(json.dumps(LISTING))), image_name="sglstack/cpu-test:abc",
                          image_id=IMAGE_ID, created=WHEN)
    assert first == again  # no random serial number or bom-ref: the same image gives the same bytes
    doc = json.loads(first)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    purls = {c["purl"] for c in doc["components"]}
    assert "pkg:pypi/six@1.16.0" in purls and "pkg:deb/debian/libc6@2.36-9%2Bdeb12u9?arch=amd64" in purls
    summary = read_sbom(first)
    assert summary.image_id == IMAGE_ID and summary.python == {"pip": "23.0.1", "setuptools": "66.1.1",
                                                                "six": "1.16.0"}
    assert summary.debian == 2 and summary.components == 5
    locked = json.loads(sbom_document(inventory, image_name="x", image_id=IMAGE_ID, created=WHEN,
                                      lock=_lock(("six", "1.16.0"))))
    roles = {c["name"]: c["description"] for c in locked["components"]}
    assert roles["six"] == "python package (in the lock)" and "bootstrap" in roles["pip"]
    assert roles["libc6"] == "debian package"
    other = sbom_document(inventory, image_name="sglstack/cpu-test:abc", image_id="sha256:" + "cd" * 32, created=WHEN)
    assert json.loads(other)["serialNumber"] != doc["serialNumber"]


def test_the_lock_check_names_extras_and_missing_and_skips_bootstrap_and_debian():
    inventory = Inventory.from_listing(LISTING)
    assert lock_problems(inventory, _lock(("six", "1.16.0"))) == []  # pip/setuptools and Debian: not compared
    assert lock_problems(inventory, _lock(("six", "1.16.0"), ("idna", "3.10"))) == [
        "idna==3.10 is in the lock but not installed"]
    assert lock_problems(inventory, _lock()) == ["installed but not in the lock: six==1.16.0"]
    assert lock_problems(inventory, _lock(("six", "1.17.0"))) == ["six: locked 1.17.0, installed 1.16.0"]


def test_a_malformed_inventory_is_one_line():
    with pytest.raises(Exception, match="inventory is malformed"):
        Inventory.from_listing({"python_distributions": []})


# ---- provenance ----------------------------------------------------------------------------------------

def test_the_provenance_is_an_in_toto_slsa_statement_about_the_digest():
    digest = "sha256:" + "9" * 64
    body = provenance_statement(_record(), repository="reg/sglstack", digest=digest)
    doc = json.loads(body)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement_subjects(body) == [digest]
    definition = doc["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["config_hash"] == "c" * 64
    deps = {d["name"]: d for d in definition["resolvedDependencies"]}
    assert deps["base-image"]["digest"] == {"sha256": "d" * 64}
    assert deps["lock"]["digest"] == {"sha256": "e" * 64}
    assert deps["patch:kimi-k25-eagle3"]["digest"] == {"sha256": "f" * 64}
    assert deps["sglang"]["uri"] == "pkg:pypi/sglang@0.5.9"
    run = doc["predicate"]["runDetails"]
    assert run["builder"]["version"]["sglstack-commit"] == "1" * 40
    assert run["metadata"] == {"invocationId": "cpu-test-" + "c" * 12, "startedOn": "2026-12-03T18:50:00Z",
                               "finishedOn": "2026-12-03T19:00:00Z"}
    git = provenance_statement(_record(sglang={"version": None, "git": {"repo": "/src/sglang", "ref": "a" * 40}}),
                               repository="reg/sglstack", digest=digest)
    assert {"name": "sglang", "uri": f"git+/src/sglang@{'a' * 40}", "digest": {"gitCommit": "a" * 40}} in \
        json.loads(git)["predicate"]["buildDefinition"]["resolvedDependencies"]


def test_a_record_without_provenance_facts_is_one_line():
    record = _record()
    del record["provenance"]
    with pytest.raises(Exception, match="no provenance facts"):
        provenance_statement(record, repository="r", digest="sha256:" + "9" * 64)


# ---- signing -------------------------------------------------------------------------------------------

def test_the_signature_covers_the_digest_and_every_document():
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    docs = [Attached("sbom", "application/vnd.cyclonedx+json", "sha256:" + "1" * 64, 10),
            Attached("provenance", "application/vnd.in-toto+json", "sha256:" + "2" * 64, 20)]
    envelope = sign_envelope(key, signed_payload("sha256:" + "3" * 64, docs))
    digest, named = signed_attestations(open_envelope(envelope, key.public_key()))
    assert digest == "sha256:" + "3" * 64 and sorted(named, key=lambda a: a.kind) == sorted(docs, key=lambda a: a.kind)
    with pytest.raises(NotVerified, match="no signature by key"):
        open_envelope(envelope, other.public_key())
    forged = json.loads(envelope)
    forged["payload"] = forged["payload"].replace("M", "N", 1)  # one changed payload byte
    with pytest.raises(NotVerified):
        open_envelope(json.dumps(forged).encode(), key.public_key())


def _pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def test_keys_from_the_option_the_environment_path_or_pem(tmp_path):
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signing.pem"
    path.write_bytes(_pem(key))
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    want = key.public_key().public_bytes(*raw)
    for loaded in (load_signing_key(str(path), env={}), load_signing_key(None, env={"SGLSTACK_SIGNING_KEY": str(path)}),
                   load_signing_key(None, env={"SGLSTACK_SIGNING_KEY": _pem(key).decode()})):
        assert loaded.public_key().public_bytes(*raw) == want
    pub = tmp_path / "signing.pub"
    pub.write_bytes(public_pem(key))
    assert load_public_key(str(pub)).public_bytes(*raw) == want


@pytest.mark.parametrize("make, needle", [
    (lambda p: None, "no signing key: pass --signing-key PATH or set SGLSTACK_SIGNING_KEY"),
    (lambda p: p.write_text("not a key"), "not a PEM private key"),
    (lambda p: p.write_bytes(_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))), "not ed25519"),
    (lambda p: p.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"))), "the key is encrypted"),
])
def test_a_bad_signing_key_is_bad_input(tmp_path, make, needle):
    path = tmp_path / "key.pem"
    made = make(path)
    env = {} if made is None and not path.exists() else {"SGLSTACK_SIGNING_KEY": str(path)}
    with pytest.raises(BadInput, match=needle) as err:
        load_signing_key(None, env=env)
    assert err.value.exit_code == 2 and "BEGIN" not in str(err.value)


def test_a_private_key_given_as_the_public_one_says_so(tmp_path):
    path = tmp_path / "key.pem"
    path.write_bytes(_pem(Ed25519PrivateKey.generate()))
    with pytest.raises(BadInput, match="that is a private key"):
        load_public_key(str(path))


# ---- the referrers API (OCI 1.1), against its double ---------------------------------------------------

@pytest.fixture
def referrers_registry():
    reg = RegistryDouble()
    yield reg
    reg.close()


def _push_image(client: RegistryClient, repo: str) -> tuple[str, str]:
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config_digest = client.put_blob(repo, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
        "layers": []}).encode()
    return client.put_manifest(repo, "v1", manifest, OCI_MANIFEST), config_digest


def signed_documents(key, *, repository: str, digest: str, config_digest: str) -> list[tuple[str, bytes]]:
    sbom = sbom_document(Inventory.from_listing(LISTING), image_name=repository, image_id=config_digest, created=WHEN)
    provenance = provenance_statement(_record(), repository=repository, digest=digest)
    attached = [Attached("sbom", "application/vnd.cyclonedx+json", compute_digest(sbom), len(sbom)),
                Attached("provenance", "application/vnd.in-toto+json", compute_digest(provenance), len(provenance))]
    return [("sbom", sbom), ("provenance", provenance), ("signature", sign_envelope(key, signed_payload(digest,
                                                                                                        attached)))]


def test_with_the_referrers_api_attestations_are_found_by_subject_without_tags(referrers_registry):
    client = RegistryClient(referrers_registry.host)
    digest, config = _push_image(client, "team/img")
    key = Ed25519PrivateKey.generate()
    pushed = attach(client, "team/img", digest, signed_documents(key, repository=f"{referrers_registry.host}/team/img",
                                                                 digest=digest, config_digest=config))
    assert pushed.referrers_api and pushed.tags == [] and len(pushed.manifests) == 3
    assert client.list_tags("team/img") == ["v1"]  # no sha256-<hex>.<kind> tag where the API exists
    found = find_attestations(client, "team/img", digest)
    assert f"GET /v2/team/img/referrers/{digest}" in referrers_registry.requests
    assert sorted((a.kind, a.via, a.subject) for a in found) == [
        ("provenance", "referrers", digest), ("sbom", "referrers", digest), ("signature", "referrers", digest)]
    ref = parse_image_reference(f"{referrers_registry.host}/team/img:v1")
    result = verify_image(client, ref, key.public_key())
    assert result.digest == digest and result.attestations["sbom"]["components"] == 5
    with pytest.raises(NotVerified, match="no signature by key"):
        verify_image(client, ref, Ed25519PrivateKey.generate().public_key())
    sbom = next(a for a in found if a.kind == "sbom")
    client.delete_manifest("team/img", sbom.manifest_digest)
    with pytest.raises(NotVerified, match=r"the sbom the signature names .* is not attached"):
        verify_image(client, ref, key.public_key())


def test_a_signed_document_attached_only_to_another_image_is_not_this_images(referrers_registry):
    """Someone with push access puts the artifact of the same (signed) SBOM, attached to another image, under
    this image's tag-scheme name: it is found, and its bytes are the signed ones, but it is not attached to
    this image, whose own SBOM is gone: refused as not attached, not taken for this image's."""
    client = RegistryClient(referrers_registry.host)
    digest, config = _push_image(client, "team/img")
    other = client.put_manifest("team/img", "v2", json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [], "annotations": {"other": "image"}}).encode(), OCI_MANIFEST)
    key = Ed25519PrivateKey.generate()
    documents = signed_documents(key, repository=f"{referrers_registry.host}/team/img", digest=digest,
                                 config_digest=config)
    attach(client, "team/img", digest, documents)
    ref = parse_image_reference(f"{referrers_registry.host}/team/img:v1")
    assert verify_image(client, ref, key.public_key()).digest == digest
    sbom = next(a for a in find_attestations(client, "team/img", digest) if a.kind == "sbom")
    client.delete_manifest("team/img", sbom.manifest_digest)
    body = dict(documents)["sbom"]
    image = client.get_manifest("team/img", other)
    manifest = artifact_manifest("sbom", Attached("sbom", KINDS["sbom"], compute_digest(body), len(body)),
                                 image.media_type, other, len(image.body))
    client.put_artifact("team/img", fallback_tag(digest, "sbom"), manifest, OCI_MANIFEST)
    assert [(a.kind, a.subject) for a in find_attestations(client, "team/img", digest) if a.kind == "sbom"] == [
        ("sbom", other)]
    with pytest.raises(NotVerified, match=r"the sbom the signature names .* is not attached: deleted or never"):
        verify_image(client, ref, key.public_key())


def test_the_tag_scheme_names_each_kind_after_the_digest():
    assert fallback_tag("sha256:" + "a" * 64, "sbom") == "sha256-" + "a" * 64 + ".sbom"


# ---- the release asks for its key before any work -------------------------------------------------------

@pytest.mark.parametrize("shape, line", [
    ("body", "error: SGLSTACK_SIGNING_KEY: only the base64 body of a key, without its '-----BEGIN PRIVATE KEY-----' "
             "and '-----END' lines: give the whole PEM"),
    ("bag", "error: SGLSTACK_SIGNING_KEY: not a PEM private key"),
])
def test_key_text_in_the_environment_is_never_printed(tmp_path, repo_root, shape, line):
    """A key that does not start with '-----BEGIN' was opened as a path, and the error printed it whole."""
    from clirun import run_invoke  # the CLI helper starts a process: only these tests need it

    pem = _pem(Ed25519PrivateKey.generate()).decode()
    body = [x for x in pem.splitlines() if not x.startswith("-----")]
    value = "".join(body) if shape == "body" else "Bag Attributes\n    friendlyName: k\n" + pem[:70]
    stacks = str(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml")
    env = {"SGLSTACK_SIGNING_KEY": value, "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    proc = run_invoke("build", "--stack", "cpu-test", "--stacks-file", stacks, "--push", cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stderr.strip()) == (2, line)
    shown = proc.stdout + proc.stderr
    assert not any(part in shown for part in [*body, *(p[:16] for p in body)])
    assert not (tmp_path / "build").exists()


def test_a_release_without_a_key_stops_before_any_work(tmp_path, repo_root):
    from clirun import run_invoke  # the CLI helper starts a process: only these two tests need it

    stacks = str(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml")
    env = {"SGLSTACK_SIGNING_KEY": "", "SGLSTACK_BUILD_DIR": str(tmp_path / "build")}
    proc = run_invoke("build", "--stack", "cpu-test", "--stacks-file", stacks, "--push", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == ("error: no signing key: pass --signing-key PATH or set SGLSTACK_SIGNING_KEY (a "
                                   "path, or the PEM itself), or --unsigned to release without a signature")
    assert not (tmp_path / "build").exists()  # nothing rendered, nothing built
    both = run_invoke("build", "--stack", "cpu-test", "--stacks-file", stacks, "--push", "--signing-key", "k.pem",
                      "--unsigned", cwd=tmp_path, env=env)
    assert both.returncode == 2
    assert both.stderr.strip() == "error: stack 'cpu-test': give --signing-key or --unsigned, not both"


def test_a_verify_key_that_is_a_fifo_is_refused_at_once(tmp_path, repo_root):
    """A FIFO as the public key hung `render --verify-key` (and deploy, verify-image) on its open forever."""
    from clirun import run_invoke  # the CLI helper starts a process: only these tests need it

    fifo = tmp_path / "trusted.pub"
    os.mkfifo(fifo)
    stacks = str(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml")
    proc = run_invoke("render", "--stack", "cpu-test", "--stacks-file", stacks, "--image",
                      "127.0.0.1:5000/x/y@sha256:" + "ab" * 32, "--verify-key", str(fifo), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert (proc.returncode, proc.stderr.strip()) == (
        2, f"error: --verify-key: cannot read key file '{fifo}' (a FIFO, not a regular file)")
    assert not (tmp_path / "build").exists()
