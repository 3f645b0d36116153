"""Each registry API call of `RegistryClient`: manifests, referrers, blobs and deletes, against the registry stand-in
(tests/lib/registry_double) answering what the test scripts and recording every request: the exact request sent
(method, path, query, headers, body), and each answer a registry may give (the ones that succeed, 404, a refusal, a
wrong digest) turned into the result or one error line (more: test_registry_client_auth.py,
test_registry_client_calls.py). The real distribution registry's cases are tests/e2e."""

from __future__ import annotations

import json

import pytest
from registry_api_fixtures import (
    ACCEPT,
    CONFIG,
    CONFIG_DIGEST,
    ERROR,
    IMAGE,
    IMAGE_DIGEST,
    INDEX,
    INDEX_DIGEST,
    _asked,
    _json,
    scripted_registries,
)

from sglstack.core.errors import RegistryError
from sglstack.registry.client import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    ManifestNotFound,
    compute_digest,
)


@pytest.fixture
def registry():
    with scripted_registries() as make:
        yield make


# ---- manifests ------------------------------------------------------------------------------------------

def test_a_manifest_by_tag_is_read_with_its_exact_bytes_and_media_type(registry):
    reg = registry({"GET /v2/team/app/manifests/v1": [
        (200, {"Content-Type": f"{OCI_MANIFEST}; charset=utf-8", "Docker-Content-Digest": IMAGE_DIGEST}, IMAGE)]})
    manifest = reg.client().get_manifest("team/app", "v1")
    assert manifest == Manifest(media_type=OCI_MANIFEST, body=IMAGE, digest=IMAGE_DIGEST)
    assert reg.seen == [("GET", "/v2/team/app/manifests/v1", None, ACCEPT, None, b"")]
    assert manifest.blobs() == [CONFIG_DIGEST, "sha256:" + "1" * 64, "sha256:" + "2" * 64]
    assert manifest.children() == [] and not manifest.is_index


def test_the_media_type_comes_from_the_body_when_the_header_is_not_a_manifests(registry):
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": "application/json"}, INDEX)],
                    "GET /v2/a/manifests/v2": [(200, {"Content-Type": "text/plain"}, b'{"mediaType": ""}')],
                    "GET /v2/a/manifests/v3": [(200, {}, b'{"mediaType": 3}')]})
    client = reg.client()
    index = client.get_manifest("a", "v1")
    assert (index.media_type, index.is_index) == (OCI_INDEX, True)
    assert index.children() == [IMAGE_DIGEST, "sha256:" + "3" * 64]
    assert index.blobs() == []
    assert client.get_manifest("a", "v2").media_type == "text/plain"
    assert client.get_manifest("a", "v3").media_type == ""


@pytest.mark.parametrize(("answer", "message"), [
    ((404, {}, b""), "registry {host}: team/app@{digest} not found"),
    ((409, {"Content-Type": "application/json"}, ERROR),
     "registry {host}: GET manifest team/app@{digest}: HTTP 409 DENIED: no"),
    ((200, {}, IMAGE), "registry {host}: manifest team/app@{digest} has content with digest " + IMAGE_DIGEST),
    ((200, {"Docker-Content-Digest": "sha256:" + "e" * 64}, INDEX),
     "registry {host}: manifest team/app:{digest} digest header sha256:" + "e" * 64 + " != content "
     + INDEX_DIGEST),
    ((200, {}, b"[1]"),
     "registry {host}: GET manifest team/app@{digest} answered a manifest that is not a JSON object"),
])
def test_a_manifest_answer_that_is_not_the_one_asked_for_is_one_line(registry, answer, message):
    digest = INDEX_DIGEST if answer[2] != b"[1]" else compute_digest(b"[1]")
    reg = registry({f"GET /v2/team/app/manifests/{digest}": [answer]})
    with pytest.raises(RegistryError) as err:
        reg.client().get_manifest("team/app", digest)
    assert str(err.value) == message.format(host=reg.host, digest=digest)
    assert isinstance(err.value, ManifestNotFound) == (answer[0] == 404)


def test_a_tag_whose_manifest_is_not_json_names_the_request(registry):
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": "text/html"}, b"<html>")]})
    with pytest.raises(RegistryError) as err:
        reg.client().get_manifest("a", "v1")
    assert str(err.value) == (f"registry {reg.host}: GET manifest a:v1 answered HTTP 200 with a body that is not JSON "
                              "(text/html, 6 bytes)")


def test_the_digest_of_a_tag_comes_from_a_head_or_else_the_manifest(registry):
    reg = registry({"HEAD /v2/a/manifests/v1": [(200, {"Docker-Content-Digest": IMAGE_DIGEST}, b"")],
                    "HEAD /v2/a/manifests/v2": [(200, {"Docker-Content-Digest": "md5:x"}, b"")],
                    "GET /v2/a/manifests/v2": [(200, {"Content-Type": OCI_INDEX}, INDEX)],
                    "HEAD /v2/a/manifests/v3": [(200, {}, b"")],
                    "GET /v2/a/manifests/v3": [(200, {"Content-Type": OCI_MANIFEST}, IMAGE)],
                    "HEAD /v2/a/manifests/v4": [(409, {}, b"")]})
    client = reg.client()
    assert client.manifest_digest("a", "v1") == IMAGE_DIGEST
    assert reg.seen == [("HEAD", "/v2/a/manifests/v1", None, ACCEPT, None, b"")]
    assert client.manifest_digest("a", "v2") == INDEX_DIGEST
    assert client.manifest_digest("a", "v3") == IMAGE_DIGEST
    assert client.manifest_digest("a", "gone") is None
    with pytest.raises(RegistryError) as err:
        client.manifest_digest("a", "v4")
    assert str(err.value) == f"registry {reg.host}: HEAD manifest a:v4: HTTP 409"
    assert _asked(reg) == ["HEAD /v2/a/manifests/v1", "HEAD /v2/a/manifests/v2", "GET /v2/a/manifests/v2",
                              "HEAD /v2/a/manifests/v3", "GET /v2/a/manifests/v3", "HEAD /v2/a/manifests/gone",
                              "HEAD /v2/a/manifests/v4"]


def test_a_manifest_is_stored_with_its_media_type_and_its_digest_checked(registry):
    subject = json.dumps({"subject": {"digest": IMAGE_DIGEST}}).encode()
    reg = registry({"PUT /v2/a/manifests/v1": [(201, {"Docker-Content-Digest": IMAGE_DIGEST}, b""),
                                               (200, {}, b""), (202, {}, b""),
                                               (201, {"Docker-Content-Digest": "sha256:" + "0" * 64}, b""),
                                               (404, {"Content-Type": "application/json"}, ERROR),
                                               (409, {"Content-Type": "application/json"}, ERROR)],
                    "PUT /v2/a/manifests/s1": [(201, {"OCI-Subject": IMAGE_DIGEST}, b""),
                                               (201, {"OCI-Subject": "sha256:" + "0" * 64}, b""), (201, {}, b"")]})
    client = reg.client()
    assert client.put_manifest("a", "v1", IMAGE, OCI_MANIFEST) == IMAGE_DIGEST
    assert reg.seen == [("PUT", "/v2/a/manifests/v1", None, "*/*", OCI_MANIFEST, IMAGE)]
    assert client.put_manifest("a", "v1", IMAGE, DOCKER_MANIFEST) == IMAGE_DIGEST
    assert client.put_manifest("a", "v1", IMAGE, DOCKER_MANIFEST) == IMAGE_DIGEST
    errors = []
    for _ in range(3):
        with pytest.raises(RegistryError) as err:
            client.put_manifest("a", "v1", IMAGE, OCI_MANIFEST)
        errors.append((type(err.value), str(err.value)))
    assert errors == [
        (RegistryError, f"registry {reg.host}: PUT manifest a:v1: registry stored sha256:{'0' * 64}, expected "
                        f"{IMAGE_DIGEST}"),
        (ManifestNotFound, f"registry {reg.host}: PUT manifest a:v1: DENIED: no"),
        (RegistryError, f"registry {reg.host}: PUT manifest a:v1: HTTP 409 DENIED: no"),
    ]
    assert [client.put_artifact("a", "s1", subject, OCI_MANIFEST) for _ in range(3)] == [
        (compute_digest(subject), True), (compute_digest(subject), False), (compute_digest(subject), False)]
    reg.answers["PUT /v2/a/manifests/s2"] = [(201, {"OCI-Subject": ""}, b"")]
    assert client.put_artifact("a", "s2", b"{}", OCI_MANIFEST) == (compute_digest(b"{}"), False)


# ---- referrers, blobs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [400, 404, 405, 501])
def test_a_registry_without_the_referrers_api_is_none(registry, status):
    reg = registry({f"GET /v2/a/referrers/{IMAGE_DIGEST}": [(status, {}, b"")]})
    assert reg.client().referrers("a", IMAGE_DIGEST) is None
    assert reg.seen == [("GET", f"/v2/a/referrers/{IMAGE_DIGEST}", None, OCI_INDEX, None, b"")]


def test_referrers_are_the_index_descriptors_or_one_line(registry):
    found = [{"digest": INDEX_DIGEST, "artifactType": "x"}]
    reg = registry({f"GET /v2/a/referrers/{IMAGE_DIGEST}": [
        _json(200, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": found}), (409, {}, b"")]})
    client = reg.client()
    assert client.referrers("a", IMAGE_DIGEST) == found
    with pytest.raises(RegistryError) as err:
        client.referrers("a", IMAGE_DIGEST)
    assert str(err.value) == f"registry {reg.host}: GET referrers a@{IMAGE_DIGEST}: HTTP 409 Conflict"


def test_a_blob_exists_or_not_or_the_answer_is_one_line(registry):
    reg = registry({f"HEAD /v2/a/blobs/{CONFIG_DIGEST}": [(200, {}, b""), (404, {}, b""), (409, {}, b"")]})
    client = reg.client()
    assert [client.blob_exists("a", CONFIG_DIGEST), client.blob_exists("a", CONFIG_DIGEST)] == [True, False]
    with pytest.raises(RegistryError) as err:
        client.blob_exists("a", CONFIG_DIGEST)
    assert str(err.value) == f"registry {reg.host}: HEAD blob a@{CONFIG_DIGEST}: HTTP 409"


@pytest.mark.parametrize(("location", "put"), [
    ("/v2/a/blobs/uploads/u1", "/v2/a/blobs/uploads/u1?digest={digest}"),
    ("http://elsewhere:1/v2/a/blobs/uploads/u1?_state=s", "/v2/a/blobs/uploads/u1?_state=s&digest={digest}"),
    ("a/blobs/uploads/u2", "/v2/a/blobs/uploads/u2?digest={digest}"),
    ("/a/blobs/uploads/u3", "/v2/a/blobs/uploads/u3?digest={digest}"),
    ("/XX/uploads/u4", "/v2/XX/uploads/u4?digest={digest}"),  # only the leading slash is cut
])
def test_a_blob_is_uploaded_in_one_piece_at_the_location_given(registry, location, put):
    put = put.format(digest=CONFIG_DIGEST)
    reg = registry({"POST /v2/a/blobs/uploads/": [(202, {"Location": location}, b"")],
                    f"PUT {put}": [(201, {}, b""), (204, {}, b""), (200, {}, b"")]})
    client = reg.client()
    assert client.put_blob("a", CONFIG) == CONFIG_DIGEST
    assert reg.seen == [("HEAD", f"/v2/a/blobs/{CONFIG_DIGEST}", None, "*/*", None, b""),
                        ("POST", "/v2/a/blobs/uploads/", None, "*/*", None, b""),
                        ("PUT", put, None, "*/*", "application/octet-stream", CONFIG)]
    assert client.put_blob("a", CONFIG) == CONFIG_DIGEST
    with pytest.raises(RegistryError) as err:
        client.put_blob("a", CONFIG)
    assert str(err.value) == f"registry {reg.host}: PUT blob a@{CONFIG_DIGEST}: HTTP 200 OK"


def test_a_blob_already_there_is_not_sent_and_a_refused_upload_is_one_line(registry):
    reg = registry({f"HEAD /v2/a/blobs/{CONFIG_DIGEST}": [(200, {}, b"")],
                    "POST /v2/b/blobs/uploads/": [(202, {}, b""), _json(409, {"errors": [{"code": "X"}]},
                                                                        Location="/v2/b/blobs/uploads/u")]})
    client = reg.client()
    assert client.put_blob("a", CONFIG) == CONFIG_DIGEST
    assert _asked(reg) == [f"HEAD /v2/a/blobs/{CONFIG_DIGEST}"]
    messages = []
    for _ in range(2):
        with pytest.raises(RegistryError) as err:
            client.put_blob("b", CONFIG)
        messages.append(str(err.value))
    assert messages == [f"registry {reg.host}: POST blob upload b: HTTP 202 Accepted",
                        f"registry {reg.host}: POST blob upload b: HTTP 409 X"]


def test_a_blob_is_read_and_checked_against_its_digest(registry):
    reg = registry({f"GET /v2/a/blobs/{CONFIG_DIGEST}": [(200, {}, CONFIG), (200, {}, CONFIG + b" "),
                                                         (404, {}, b""), (409, {}, b""), (200, {}, CONFIG)]})
    client = reg.client()
    assert client.get_blob("a", CONFIG_DIGEST) == CONFIG
    errors = []
    for _ in range(3):
        with pytest.raises(RegistryError) as err:
            client.get_blob("a", CONFIG_DIGEST)
        errors.append((type(err.value).__name__, str(err.value)))
    assert errors == [
        ("RegistryError", f"registry {reg.host}: blob a@{CONFIG_DIGEST} content does not match its digest"),
        ("ManifestNotFound", f"registry {reg.host}: blob a@{CONFIG_DIGEST} not found"),
        ("RegistryError", f"registry {reg.host}: GET blob a@{CONFIG_DIGEST}: HTTP 409"),
    ]
    with pytest.raises(RegistryError) as err:
        client.get_blob("a", CONFIG_DIGEST, max_bytes=len(CONFIG) - 1)
    assert str(err.value).startswith(f"registry {reg.host}: GET blob a@{CONFIG_DIGEST}")


def test_the_image_config_of_an_index_is_its_first_childs(registry):
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": OCI_INDEX}, INDEX)],
                    f"GET /v2/a/manifests/{IMAGE_DIGEST}": [(200, {"Content-Type": OCI_MANIFEST}, IMAGE)],
                    f"GET /v2/a/blobs/{CONFIG_DIGEST}": [(200, {}, CONFIG)]})
    assert reg.client().image_config("a", "v1") == {"config": {"Labels": {"a": "b"}}}
    assert _asked(reg) == ["GET /v2/a/manifests/v1", f"GET /v2/a/manifests/{IMAGE_DIGEST}",
                              f"GET /v2/a/blobs/{CONFIG_DIGEST}"]


@pytest.mark.parametrize(("config", "why"), [(b"not json", "is not JSON"), (b"[]", "is not a JSON object")])
def test_an_image_config_that_is_not_an_object_is_one_line(registry, config, why):
    image = IMAGE.replace(CONFIG_DIGEST.encode(), compute_digest(config).encode())
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": OCI_MANIFEST}, image)],
                    f"GET /v2/a/blobs/{compute_digest(config)}": [(200, {}, config)]})
    with pytest.raises(RegistryError) as err:
        reg.client().image_config("a", "v1")
    assert str(err.value) == f"registry {reg.host}: the image config a@{compute_digest(config)} {why}"


def test_an_empty_index_has_no_image_config(registry):
    empty = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": OCI_INDEX}, empty)]})
    with pytest.raises(RegistryError) as err:
        reg.client().image_config("a", "v1")
    assert str(err.value) == f"registry {reg.host}: index a@{compute_digest(empty)} lists no manifests"


# ---- deletes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [200, 202])
def test_a_tag_is_deleted_by_name_where_the_registry_can(registry, status):
    reg = registry({"DELETE /v2/a/manifests/v1": [(status, {}, b"")]})
    reg.client().untag("a", "v1")
    assert _asked(reg) == ["DELETE /v2/a/manifests/v1"]


@pytest.mark.parametrize(("media_type", "body", "throwaway"), [
    (OCI_MANIFEST, IMAGE, {"annotations": {"io.sglstack.untag": "v1"}, "config": json.loads(IMAGE)["config"],
                           "layers": [], "mediaType": OCI_MANIFEST, "schemaVersion": 2}),
    (OCI_INDEX, INDEX, {"annotations": {"io.sglstack.untag": "v1"}, "manifests": [], "mediaType": OCI_INDEX,
                        "schemaVersion": 2}),
])
def test_an_older_registry_untags_through_a_throwaway_manifest(registry, media_type, body, throwaway):
    from sglstack.core import labels

    assert labels.UNTAG_LABEL == "io.sglstack.untag"
    data = json.dumps(throwaway, sort_keys=True).encode()
    reg = registry({"DELETE /v2/a/manifests/v1": [(400, {}, b"")],
                    "GET /v2/a/manifests/v1": [(200, {"Content-Type": media_type}, body)],
                    "PUT /v2/a/manifests/v1": [(201, {}, b"")],
                    f"DELETE /v2/a/manifests/{compute_digest(data)}": [(202, {}, b"")]})
    reg.client().untag("a", "v1")
    assert _asked(reg) == ["DELETE /v2/a/manifests/v1", "GET /v2/a/manifests/v1", "PUT /v2/a/manifests/v1",
                              f"DELETE /v2/a/manifests/{compute_digest(data)}"]
    assert reg.seen[2][4:] == (media_type, data)


def test_untag_and_delete_refusals_are_one_line(registry):
    reg = registry({"DELETE /v2/a/manifests/v1": [(404, {}, b""), (405, {}, b"")],
                    f"DELETE /v2/a/manifests/{IMAGE_DIGEST}": [(404, {}, b""), (405, {}, b""),
                                                               _json(409, {"errors": [{"code": "C", "message": "m"}]}),
                                                               (200, {}, b""), (202, {}, b"")]})
    client = reg.client()
    errors = []
    for call in (lambda: client.untag("a", "v1"), lambda: client.untag("a", "v1"),
                 lambda: client.delete_manifest("a", IMAGE_DIGEST), lambda: client.delete_manifest("a", IMAGE_DIGEST),
                 lambda: client.delete_manifest("a", IMAGE_DIGEST)):
        with pytest.raises(RegistryError) as err:
            call()
        errors.append((type(err.value).__name__, str(err.value).replace(reg.host, "R")))
    assert errors == [
        ("ManifestNotFound", "registry R: a:v1 not found"),
        ("RegistryError", "registry R: DELETE manifest a:v1: deleting is disabled on this registry (enable "
                          "storage.delete)"),
        ("ManifestNotFound", f"registry R: a@{IMAGE_DIGEST} not found"),
        ("RegistryError", f"registry R: DELETE manifest a@{IMAGE_DIGEST}: deleting manifests is disabled (enable "
                          "storage.delete in its config)"),
        ("RegistryError", f"registry R: DELETE manifest a@{IMAGE_DIGEST}: HTTP 409 C: m"),
    ]
    client.delete_manifest("a", IMAGE_DIGEST)
    client.delete_manifest("a", IMAGE_DIGEST)
