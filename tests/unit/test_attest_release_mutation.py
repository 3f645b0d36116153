"""What a release attaches, from a build record, where the other attest tests never call it in process (issue 35,
mutation of `attest-store`; `invoke build --push` runs it in a child the mutation runs leave out): the line it
says, signed or `--unsigned`, on a registry with the referrers API or the tag scheme; the SBOM beside the record
or, when that is missing or changed, one listed from the image (the engine's listing stood in for at
`image_inventory`, its interface); a reused image's record; records that are not ones; an image with nothing to
sign. In process, against the in-memory registry (`attest_memory`)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from attest_memory import IDENTITY, KEY, KID, PATH, REGISTRY, Registry, image, verify, write_record
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sglstack.attest import release
from sglstack.attest.errors import AttestationError
from sglstack.attest.provenance import BuildIdentity, statement_identity
from sglstack.attest.release import AttestPlan, ensure_signed, read_record
from sglstack.attest.signing import open_envelope
from sglstack.attest.store import find_attestations
from sglstack.config.imageref import parse_repository
from sglstack.core import labels as lb
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import SBOM_FILE, read_sbom, sbom_document
from sglstack.registry.client import OCI_MANIFEST, compute_digest

REPO = parse_repository(REGISTRY)


def _sbom_beside(tmp_path, config: str, *, recorded: bool = True) -> bytes:
    body = sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name="x", image_id=config,
                         created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    (tmp_path / SBOM_FILE).write_bytes(body)
    record = json.loads((tmp_path / "record.json").read_text())
    record["sbom"] = {"sha256": compute_digest(body).removeprefix("sha256:") if recorded else "0" * 64}
    (tmp_path / "record.json").write_text(json.dumps(record))
    return body


@pytest.fixture
def listed(monkeypatch):
    """The engine's listing of an image, as `image_inventory` answers it: (docker host, image id) asked."""
    asked: list[tuple[object, str]] = []
    monkeypatch.setattr(release, "docker_client", lambda host: ("engine", host))
    monkeypatch.setattr(release, "image_inventory", lambda client, image_id: asked.append((client, image_id)) or
                        Inventory(python={"six": "1.16.0"}, debian=(("bash", "5.2", "amd64"),)))
    return asked


@pytest.mark.parametrize("referrers_api", [True, False])
def test_a_signed_release_attaches_three_documents_says_so_and_verifies(tmp_path, referrers_api, listed):
    registry = Registry(referrers_api=referrers_api)
    digest, config = image(registry)
    write_record(tmp_path, config)
    sbom = _sbom_beside(tmp_path, config)
    said = AttestPlan(tmp_path / "record.json", KEY)(registry, REPO, digest)
    found = find_attestations(registry, PATH, digest)
    size = sum(a.document_size for a in found)
    how = "referrers API" if referrers_api else "tag scheme sha256-<hex>.<kind>"
    assert said == (f"attached sbom, provenance, signature to {REGISTRY}@{digest} ({size} bytes, {how}); "
                    f"signed by key {KID}")
    assert registry.blobs[next(a.document_digest for a in found if a.kind == "sbom")] == sbom
    assert verify(registry, digest, IDENTITY).signed == BuildIdentity("cu130", "c" * 64, "pkg:pypi/sglang@0.5.9")
    assert listed == []  # the SBOM beside the record was used: the engine was not asked


def test_an_unsigned_release_attaches_the_sbom_and_provenance_only(tmp_path, listed):
    registry = Registry()
    digest, config = image(registry)
    write_record(tmp_path, config)
    _sbom_beside(tmp_path, config)
    said = AttestPlan(tmp_path / "record.json", None)(registry, REPO, digest)
    assert said.startswith(f"attached sbom, provenance to {REGISTRY}@{digest} (") and said.endswith(
        "bytes, tag scheme sha256-<hex>.<kind>); UNSIGNED (--unsigned)")
    assert sorted(a.kind for a in find_attestations(registry, PATH, digest)) == ["provenance", "sbom"]


@pytest.mark.parametrize(("beside", "recorded", "tag"), [(False, True, None), (True, False, "team/img:v1"),
                                                         (True, True, "only-the-hash")])
def test_an_sbom_missing_or_changed_beside_the_record_is_listed_from_the_image(tmp_path, listed, beside, recorded,
                                                                                tag):
    config = "sha256:" + "ab" * 32
    write_record(tmp_path, config, **({"tag": tag} if tag else {}), docker_host="ssh://builder")
    if beside:
        _sbom_beside(tmp_path, config, recorded=recorded)
    if tag == "only-the-hash":  # the SBOM is there but the record names no hash of it
        record = json.loads((tmp_path / "record.json").read_text())
        record["sbom"] = {}
        (tmp_path / "record.json").write_text(json.dumps(record))
    record = read_record(tmp_path / "record.json")
    body = release.sbom_bytes(tmp_path / "record.json", record, docker_host="tcp://engine:2375")
    assert listed == [(("engine", "tcp://engine:2375"), config)]
    summary = read_sbom(body)
    assert (summary.image_id, summary.python, summary.debian) == (config, {"six": "1.16.0"}, 1)
    doc = json.loads(body)
    assert doc["metadata"]["timestamp"].startswith("2026-12-03T19:00:00")
    assert doc["metadata"]["component"]["name"] == (tag or "cu130")


def test_a_record_without_its_build_time_is_listed_as_of_1970(tmp_path, listed):
    config = "sha256:" + "ab" * 32
    record = write_record(tmp_path, config, built_at=None)
    doc = json.loads(release.sbom_bytes(tmp_path / "record.json", record, docker_host=None))
    assert doc["metadata"]["timestamp"].startswith("1970-01-01T00:00:00")


def test_a_reused_images_record_gets_the_facts_its_labels_keep(tmp_path, listed):
    registry = Registry()
    digest, config = image(registry)
    record = write_record(tmp_path, config, reused="sha256:" + "9" * 64,
                     labels={lb.LOCK_LABEL: "7" * 64, lb.BUILDER_LABEL: "buildkit"})
    for fact in ("base_image", "builder"):
        del record[fact]
    del record["provenance"]
    (tmp_path / "record.json").write_text(json.dumps(record))
    docs = dict(AttestPlan(tmp_path / "record.json", None).documents(str(REPO), digest))
    assert sorted(docs) == ["provenance", "sbom"]
    assert statement_identity(docs["provenance"]) == BuildIdentity("cu130", "c" * 64, "pkg:pypi/sglang@0.5.9")
    predicate = json.loads(docs["provenance"])["predicate"]
    assert predicate["buildDefinition"]["resolvedDependencies"][0] == {"name": "lock", "digest": {"sha256": "7" * 64}}
    assert predicate["runDetails"]["builder"]["id"] == "https://sglstack.dev/builder/buildkit"


@pytest.mark.parametrize(("text", "why"), [
    ("[1]", "not a build record"),
    ('{"stack": "cu130"}', "not a build record"),
    ("{", None),
])
def test_what_is_no_build_record_is_one_line(tmp_path, text, why):
    (tmp_path / "record.json").write_text(text)
    with pytest.raises(AttestationError) as err:
        read_record(tmp_path / "record.json")
    said = str(err.value)
    assert said.startswith(f"build record {tmp_path / 'record.json'}: ") and "\n" not in said
    assert said.endswith(why) if why else said.startswith(f"build record {tmp_path / 'record.json'}: cannot be "
                                                          f"read (")


def test_an_image_with_nothing_to_sign_or_no_config_is_refused_in_one_line():
    registry = Registry()
    digest, _ = image(registry)
    key = Ed25519PrivateKey.generate()
    with pytest.raises(AttestationError) as err:
        ensure_signed(registry, REPO, digest, key, IDENTITY)
    kid = release.key_id(key.public_key())[:16]
    assert str(err.value) == (
        f"{REGISTRY}@{digest}: not signed by key {kid} ({REGISTRY}@{digest}: no signature attached (unsigned, or "
        f"its signature was deleted)), and no SBOM and provenance of {IDENTITY.describe()} are attached to sign: "
        f"release it with `invoke build --push --signing-key`, or promote it with --unsigned")
    bare = registry.put_manifest(PATH, "bare", json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                                           "layers": []}).encode(), OCI_MANIFEST)
    with pytest.raises(AttestationError) as err:
        ensure_signed(registry, REPO, bare, key, IDENTITY)
    assert str(err.value) == f"{REGISTRY}@{bare}: not an image manifest (no config descriptor)"


def test_what_a_plan_attaches_names_the_repository_the_records_facts_and_each_documents_media_type(tmp_path,
                                                                                                 listed):
    config = "sha256:" + "ab" * 32
    write_record(tmp_path, config, provenance={"patches": {"kimi": "2" * 64}, "sglstack": {"version": "0.9"}})
    digest = "sha256:" + "cd" * 32
    docs = dict(AttestPlan(tmp_path / "record.json", KEY, docker_host="tcp://engine:2375").documents("r/x", digest))
    assert listed == [(("engine", "tcp://engine:2375"), config)]  # no SBOM beside the record: listed there
    statement = json.loads(docs["provenance"])
    assert statement["subject"] == [{"name": "r/x", "digest": {"sha256": "cd" * 32}}]
    assert statement["predicate"]["buildDefinition"]["resolvedDependencies"][0] == {
        "name": "patch:kimi", "digest": {"sha256": "2" * 64}}
    assert statement["predicate"]["runDetails"]["builder"]["version"]["sglstack"] == "0.9"
    payload = open_envelope(docs["signature"], KEY.public_key())
    assert [(a["kind"], a["mediaType"]) for a in payload["attestations"]] == [
        ("provenance", "application/vnd.in-toto+json"), ("sbom", "application/vnd.cyclonedx+json")]
