"""`RegistryClient.image_platforms`: the platforms (`os/arch`) a reference serves, read from the registry as a
user's tag is, against the OCI distribution double (tests/lib/registry_double.py: the real routes, the
`Content-Type` and `Docker-Content-Digest` headers, JSON error bodies). An index names each image's platform in
its descriptors (attestation manifests are `unknown/unknown`, not platforms); a single image's is in its config."""

from __future__ import annotations

import json

import pytest
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry.client import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    ManifestNotFound,
    RegistryClient,
    compute_digest,
)

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"


@pytest.fixture
def reg():
    registry = RegistryDouble()
    yield registry
    registry.close()


def _client(reg: RegistryDouble) -> RegistryClient:
    return RegistryClient(reg.host, sleep=lambda _s: None, attempts=1)


def _image(reg: RegistryDouble, config: dict | bytes, *, media_type: str = OCI_MANIFEST, tag: str | None = None
           ) -> str:
    """An image manifest over `config` (its blob stored), under `tag` too; returns the manifest's digest."""
    body = config if isinstance(config, bytes) else json.dumps(config).encode()
    reg.blobs[("team/app", compute_digest(body))] = body
    manifest = {"schemaVersion": 2, "mediaType": media_type,
                "config": {"mediaType": CONFIG_TYPE, "digest": compute_digest(body), "size": len(body)}, "layers": []}
    return reg.store("team/app", json.dumps(manifest).encode(), media_type, tag)


def _index(reg: RegistryDouble, entries: list, *, media_type: str = OCI_INDEX, tag: str = "v1") -> str:
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries}).encode()
    return reg.store("team/app", body, media_type, tag)


@pytest.mark.parametrize(("config", "platform"), [
    ({"os": "linux", "architecture": "arm64"}, "linux/arm64"),
    ({"os": "windows", "architecture": "amd64"}, "windows/amd64"),
    ({"architecture": "amd64"}, "linux/amd64"),  # no os said: a Linux image
    ({"os": "", "architecture": "s390x"}, "linux/s390x"),
    ({"os": "linux"}, "linux/unknown"),
    ({"os": "linux", "architecture": None}, "linux/unknown"),
    ({}, "linux/unknown"),
])
def test_a_single_image_serves_the_platform_of_its_config(reg, config, platform):
    _image(reg, config, tag="v1")
    assert _client(reg).image_platforms("team/app", "v1") == (platform,)


@pytest.mark.parametrize("media_type", [OCI_MANIFEST, DOCKER_MANIFEST])
def test_an_image_by_digest_reads_its_manifest_and_then_its_config_blob(reg, media_type):
    config = json.dumps({"os": "linux", "architecture": "amd64"}).encode()
    digest = _image(reg, config, media_type=media_type)
    assert _client(reg).image_platforms("team/app", digest) == ("linux/amd64",)
    assert reg.requests == [f"GET /v2/team/app/manifests/{digest}", f"GET /v2/team/app/blobs/{compute_digest(config)}"]


@pytest.mark.parametrize("media_type", [OCI_INDEX, DOCKER_MANIFEST_LIST])
def test_an_index_serves_each_platform_of_its_images_once_in_its_order_and_no_attestation(reg, media_type):
    def entry(os_: object, arch: object, n: int) -> dict:
        return {"mediaType": OCI_MANIFEST, "digest": "sha256:" + str(n) * 64, "size": 1,
                "platform": {"os": os_, "architecture": arch}}

    _index(reg, [
        entry("linux", "arm64", 1),
        entry("unknown", "unknown", 2),  # BuildKit's attestation manifest
        entry("linux", "amd64", 3),
        entry("linux", "arm64", 4),  # a second arm64 variant: said once
        entry(None, "riscv64", 5),
        entry("linux", "", 6),
        entry("linux", None, 7),
        {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "8" * 64, "size": 1},  # no platform at all
        {"digest": "sha256:" + "9" * 64, "platform": "linux/ppc64le"},  # a platform that is not an object
        "sha256:" + "a" * 64,  # an entry that is not an object
        entry("freebsd", "amd64", 0),
    ], media_type=media_type)
    assert _client(reg).image_platforms("team/app", "v1") == ("linux/arm64", "linux/amd64", "freebsd/amd64")
    assert reg.requests == ["GET /v2/team/app/manifests/v1"]  # the children are not read


def test_an_index_without_platforms_serves_none(reg):
    _index(reg, [])
    assert _client(reg).image_platforms("team/app", "v1") == ()
    reg.store("team/app", json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX}).encode(), OCI_INDEX, "bare")
    assert _client(reg).image_platforms("team/app", "bare") == ()  # no `manifests` at all
    _index(reg, [{"digest": "sha256:" + "1" * 64, "platform": {"os": "unknown", "architecture": "unknown"}}],
           tag="v2")
    assert _client(reg).image_platforms("team/app", "v2") == ()


def test_a_reference_that_is_not_there_or_a_config_that_is_not_one_is_one_line(reg):
    with pytest.raises(ManifestNotFound) as err:
        _client(reg).image_platforms("team/app", "missing")
    assert str(err.value) == f"registry {reg.host}: team/app:missing not found"
    odd = b'["linux", "amd64"]'
    _image(reg, odd, tag="odd")
    with pytest.raises(RegistryError) as err:
        _client(reg).image_platforms("team/app", "odd")
    assert str(err.value) == (f"registry {reg.host}: the image config "
                              f"team/app@{compute_digest(odd)} is not a JSON object")
