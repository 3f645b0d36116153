"""What attest writes and reads, field by field, where the other attest tests' fixtures never sit (issue 35, mutation
of `attest-store`): each artifact manifest's subject descriptor and media type as stored, artifacts whose type is
not a string or whose type or layer media type is long, a lister that warns on stderr, sglstack unpacked inside
another project's git checkout, a build record without its time on a machine outside UTC, the repository a
release's provenance names, a reused image's record whose time is null. In process, against the in-memory registry
(`attest_memory`)."""

from __future__ import annotations

import contextlib
import json
import time
from subprocess import run as run_git  # git, not a Python child: mutation runs keep it

import pytest
from attest_memory import PATH, REGISTRY, Registry, docs, image, plant, write_record

from sglstack import __version__
from sglstack.attest import release
from sglstack.attest.provenance import provenance_statement
from sglstack.attest.release import AttestPlan, reused_facts
from sglstack.attest.store import KINDS, attach, fallback_tag, find_attestations
from sglstack.config.imageref import parse_repository
from sglstack.imagebuild import identity as identity_mod
from sglstack.inventory import listing
from sglstack.inventory.model import Inventory
from sglstack.registry.client import DOCKER_MANIFEST, OCI_MANIFEST, compute_digest

REPO = parse_repository(REGISTRY)


@pytest.mark.parametrize("referrers_api", [True, False])
def test_each_artifact_names_its_image_by_media_type_digest_and_size_and_is_stored_as_an_oci_manifest(referrers_api):
    registry = Registry(referrers_api=referrers_api)
    digest, config = image(registry)
    attach(registry, PATH, digest, docs(digest, config))
    found = find_attestations(registry, PATH, digest)
    assert len(found) == 2
    size = len(registry.manifests[digest][1])
    for art in found:
        media, body = registry.manifests[art.manifest_digest]
        assert media == OCI_MANIFEST
        assert json.loads(body)["subject"] == {"mediaType": DOCKER_MANIFEST, "digest": digest, "size": size}


def test_an_artifact_type_that_is_no_string_or_a_long_one_is_a_reason_cut_at_80_characters():
    registry = Registry()
    digest, _ = image(registry)
    listed = plant(registry, digest, "sbom", {"artifactType": ["not", "a", "string"]})
    long = "application/" + "x" * 100
    named = plant(registry, digest, "provenance", {"artifactType": long})
    skipped: list[str] = []
    assert find_attestations(registry, PATH, digest, skipped) == []
    assert skipped == [
        f"artifact {listed[:19]} (tag): artifactType \"['not', 'a', 'string']\" is not an sglstack attestation",
        f"artifact {named[:19]} (tag): artifactType {long[:80]!r} is not an sglstack attestation"]


def test_a_layer_media_type_that_is_long_is_a_reason_cut_at_80_characters():
    registry = Registry()
    digest, _ = image(registry)
    long = "application/" + "y" * 100
    layer = {"mediaType": long, "digest": registry.put_blob(PATH, b"doc"), "size": 3}
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": KINDS["sbom"],
                       "layers": [layer], "subject": {"mediaType": DOCKER_MANIFEST, "digest": digest, "size": 1}})
    planted = registry.put_manifest(PATH, fallback_tag(digest, "sbom"), body.encode(), OCI_MANIFEST)
    skipped: list[str] = []
    assert find_attestations(registry, PATH, digest, skipped) == []
    assert skipped == [f"artifact {planted[:19]} (tag): its layer's media type {long[:80]!r} is not {KINDS['sbom']}"]


class _Container:
    """docker-py's container as the engine answers `logs`: the streams asked for, stdout then stderr."""

    def __init__(self, out: bytes, err: bytes) -> None:
        self.out, self.err = out, err

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, *, stdout: bool, stderr: bool) -> bytes:
        return (self.out if stdout else b"") + (self.err if stderr else b"")


def test_a_lister_that_warns_on_stderr_and_succeeds_is_read_from_stdout_alone(monkeypatch):
    listing_out = {"python": "3.11.2", "python_distributions": [{"name": "six", "version": "1.16.0"}],
                   "debian_packages": []}
    container = _Container(json.dumps(listing_out).encode(), b"<string>:1: DeprecationWarning: pkg_resources\n")

    @contextlib.contextmanager
    def running_container(client, image, **kwargs):
        yield container

    monkeypatch.setattr(listing, "running_container", running_container)
    inv = listing.image_inventory("client", "img:1")
    assert (inv.python_version, inv.python) == ("3.11.2", {"six": "1.16.0"})


def _git(cwd, *args: str) -> None:
    run_git(["git", "-C", str(cwd), *args], check=True, capture_output=True,
            env={"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                 "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd)})


def test_sglstack_unpacked_inside_another_projects_checkout_names_no_commit(tmp_path, monkeypatch):
    """A source tree with no `.git` of its own, in a folder of another git checkout: that project's commit is not
    sglstack's."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "c")
    inside = tmp_path / "vendor" / "sglstack"
    inside.mkdir(parents=True)
    monkeypatch.setattr(identity_mod, "CHECKOUT_DIR", inside)
    assert identity_mod.sglstack_identity() == {"version": __version__, "commit": None}


@pytest.fixture
def outside_utc(monkeypatch):
    """The machine's local time zone five hours west of UTC (a POSIX TZ: no zone database needed)."""
    monkeypatch.setenv("TZ", "EST5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def listed(monkeypatch):
    monkeypatch.setattr(release, "docker_client", lambda host: ("engine", host))
    monkeypatch.setattr(release, "image_inventory", lambda client, image_id: Inventory(python={"six": "1"}, debian=()))


def test_a_record_without_its_build_time_is_listed_as_of_1970_utc_on_a_machine_outside_utc(tmp_path, listed,
                                                                                           outside_utc):
    record = write_record(tmp_path, "sha256:" + "ab" * 32, built_at=None)
    doc = json.loads(release.sbom_bytes(tmp_path / "record.json", record, docker_host=None))
    assert doc["metadata"]["timestamp"].startswith("1970-01-01T00:00:00")


def test_a_release_names_the_repository_it_pushes_to_in_the_provenance(tmp_path, listed):
    registry = Registry()
    digest, config = image(registry)
    write_record(tmp_path, config)
    AttestPlan(tmp_path / "record.json", None)(registry, REPO, digest)
    provenance = next(a for a in find_attestations(registry, PATH, digest) if a.kind == "provenance")
    statement = json.loads(registry.blobs[provenance.document_digest])
    assert statement["subject"] == [{"name": REGISTRY, "digest": {"sha256": digest.removeprefix("sha256:")}}]


def test_signing_what_is_published_needs_a_plan_with_a_key(tmp_path):
    with pytest.raises(AssertionError, match=r"^only a signing release signs what is published$"):
        AttestPlan(tmp_path / "record.json", None).sign_published(Registry(), REPO, "sha256:" + "1" * 64)


@pytest.mark.parametrize("built_at", [None, ""])
def test_a_reused_images_record_whose_time_is_null_gets_1970_in_its_provenance(built_at):
    record = {"stack": "cu130", "target": "runtime", "image_id": "sha256:" + "ab" * 32, "config_hash": "c" * 64,
              "reused": "local image", "built_at": built_at, "labels": {}}
    record["provenance"] = reused_facts(record)
    assert record["built_at"] == "1970-01-01T00:00:00Z"
    metadata = json.loads(provenance_statement(record, repository=REGISTRY, digest="sha256:" + "1" * 64))[
        "predicate"]["runDetails"]["metadata"]
    assert (metadata["startedOn"], metadata["finishedOn"]) == ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z")
    kept = {"stack": "cu130", "built_at": "2026-12-03T00:00:00Z"}
    reused_facts(kept)
    assert kept["built_at"] == "2026-12-03T00:00:00Z"



def test_a_layer_digest_that_is_long_is_a_reason_cut_at_80_characters_and_no_list_is_needed():
    registry = Registry()
    digest, _ = image(registry)
    long = "sha256:" + "z" * 100
    planted = plant(registry, digest, "sbom", {"digest": long})
    skipped: list[str] = []
    assert find_attestations(registry, PATH, digest, skipped) == []
    assert skipped == [f"artifact {planted[:19]} (tag): its layer's digest {long[:80]!r} is not sha256:<64 hex>"]
    assert find_attestations(registry, PATH, digest) == []  # without a list for the reasons: the same, unsaid


def test_another_tools_referrers_listed_first_are_passed_over_without_a_reason():
    registry = Registry(referrers_api=True)
    digest, config = image(registry)
    layer = {"mediaType": "application/vnd.example.scan+json", "digest": registry.put_blob(PATH, b"scan"), "size": 4}
    for artifact_type in ("application/vnd.example.scan+json", None):  # another tool's, and one naming no type
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [layer],
                           **({"artifactType": artifact_type} if artifact_type else {}),
                           "subject": {"mediaType": DOCKER_MANIFEST, "digest": digest, "size": 1}}).encode()
        registry.put_manifest(PATH, compute_digest(body), body, OCI_MANIFEST)
    attach(registry, PATH, digest, docs(digest, config))
    skipped: list[str] = []
    assert sorted(a.kind for a in find_attestations(registry, PATH, digest, skipped)) == ["provenance", "sbom"]
    assert skipped == []
