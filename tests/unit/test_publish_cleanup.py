"""`invoke registry.cleanup` in the fast tier (issue 35, planted bugs P39, P40; before, only the e2e tier and one
dropped candidate of tests/cli looked): which candidate tags go and what stays, through the real registry client
against the OCI 1.1 registry double. A candidate that was released loses only its candidate tag (its manifest
and release tags stay); one that was not goes with its manifest; a young one, one whose image names no `created`
time, and every tag that is no candidate stay; a dry run removes nothing."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from registry_double import RegistryDouble

from sglstack.config.matrix import load_matrix
from sglstack.publish import cleanup_candidates
from sglstack.registry.client import OCI_MANIFEST, RegistryClient

STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks-cpu.yaml"
CPU = load_matrix(STACKS).get("cpu-test")
REPO = "team/clean"
NOW = dt.datetime(2026, 12, 10, tzinfo=dt.UTC)
OLD = "2026-12-01T00:00:00Z"  # 9 days before NOW
YOUNG = "2026-12-09T12:00:00Z"  # half a day before NOW


@pytest.fixture
def reg():
    registry = RegistryDouble()
    yield registry
    registry.close()


def _image(client: RegistryClient, marker: str, tags: list[str], created: str | None) -> str:
    """An image manifest of its own under each of `tags`; its config names `created` (None: no created time)."""
    config = {"architecture": "amd64", "os": "linux", "config": {"Labels": {}}, "marker": marker,
              "rootfs": {"type": "layers", "diff_ids": []}, **({"created": created} if created else {})}
    body = json.dumps(config).encode()
    config_digest = client.put_blob(REPO, body)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(body)},
        "layers": []}).encode()
    digests = {client.put_manifest(REPO, tag, manifest, OCI_MANIFEST) for tag in tags}
    [digest] = digests
    return digest


def _candidate(name: str) -> str:
    return f"candidate-cpu-test-{name * 12}"


@pytest.fixture
def images(reg):
    client = RegistryClient(reg.host)
    made = {
        "released": _image(client, "released", [_candidate("a"), "0.5.9-cpu-test", "cpu-test"], OLD),
        "dropped": _image(client, "dropped", [_candidate("b")], OLD),
        "young": _image(client, "young", [_candidate("c")], YOUNG),
        "undated": _image(client, "undated", [_candidate("d")], None),
        "other": _image(client, "other", ["nightly-old"], OLD),
    }
    return client, made


def _cleanup(reg, **kwargs) -> list[str]:
    return cleanup_candidates([CPU], registry=f"{reg.host}/{REPO}", older_than_days=7, now=NOW, **kwargs)


def _ref(reg, tag: str) -> str:
    return f"{reg.host}/{REPO}:{tag}"


def test_old_candidates_go_released_manifests_and_every_other_tag_stay(reg, images):
    client, made = images
    assert _cleanup(reg) == [_ref(reg, _candidate("a")), _ref(reg, _candidate("b"))]
    tags = set(client.list_tags(REPO))
    assert _candidate("a") not in tags and _candidate("b") not in tags
    # the released image keeps its manifest and its release tags
    assert client.manifest_digest(REPO, "cpu-test") == client.manifest_digest(REPO, "0.5.9-cpu-test") == \
        made["released"]
    assert client.manifest_digest(REPO, made["released"]) == made["released"]
    # the dropped candidate's manifest is gone with its tag
    assert client.manifest_digest(REPO, made["dropped"]) is None
    # a young candidate, one whose image has no created time (taken as new) and a tag that is no candidate stay
    assert client.manifest_digest(REPO, _candidate("c")) == made["young"]
    assert client.manifest_digest(REPO, _candidate("d")) == made["undated"]
    assert client.manifest_digest(REPO, "nightly-old") == made["other"]


def test_a_dry_run_names_the_same_tags_and_removes_nothing(reg, images):
    client, _ = images
    before = {tag: client.manifest_digest(REPO, tag) for tag in client.list_tags(REPO)}
    assert _cleanup(reg, dry_run=True) == [_ref(reg, _candidate("a")), _ref(reg, _candidate("b"))]
    assert {tag: client.manifest_digest(REPO, tag) for tag in client.list_tags(REPO)} == before


def test_the_age_is_counted_from_the_images_created_time(reg, images):
    """Ten days: none of the candidates is old enough."""
    client, _ = images
    assert cleanup_candidates([CPU], registry=f"{reg.host}/{REPO}", older_than_days=10, now=NOW) == []
    assert len(client.list_tags(REPO)) == 7
