"""Each registry API call of `RegistryClient`, against the registry stand-in (tests/lib/registry_double) answering
what the test scripts and recording every request: the exact request sent (method, path, query, headers, body), and each
answer a registry may give (the ones that succeed, 404, a refusal, a wrong digest, an auth challenge)
turned into the result or one error line. The real distribution registry's cases are tests/e2e."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry import client as client_mod
from sglstack.registry.auth import Credentials
from sglstack.registry.client import (
    DOCKER_MANIFEST,
    MANIFEST_MEDIA_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    ManifestNotFound,
    RegistryClient,
    compute_digest,
)
from sglstack.registry.session import RegistryAuthError

ACCEPT = ", ".join(MANIFEST_MEDIA_TYPES)
CONFIG = json.dumps({"config": {"Labels": {"a": "b"}}}).encode()
CONFIG_DIGEST = compute_digest(CONFIG)
IMAGE = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST,
                               "size": len(CONFIG)},
                    "layers": [{"digest": "sha256:" + "1" * 64}, {"digest": "sha256:" + "2" * 64}]}).encode()
IMAGE_DIGEST = compute_digest(IMAGE)
INDEX = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                    "manifests": [{"digest": IMAGE_DIGEST}, {"digest": "sha256:" + "3" * 64}]}).encode()
INDEX_DIGEST = compute_digest(INDEX)
ERROR = json.dumps({"errors": [{"code": "DENIED", "message": "no"}]}).encode()


@pytest.fixture
def registry():
    """A scripted registry (tests/lib/registry_double): "METHOD /path?query" -> its answers, 404 to the rest."""
    made: list[RegistryDouble] = []

    def make(answers):
        made.append(RegistryDouble(answers))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _asked(reg: RegistryDouble) -> list[str]:
    """Each request as "METHOD /path?query"."""
    return [f"{m} {p}" for m, p, *_ in reg.seen]


def _json(status, data, **headers):
    return (status, {"Content-Type": "application/json", **headers}, json.dumps(data).encode())


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


# ---- authentication -------------------------------------------------------------------------------------

CREDS = Credentials("ci", "pw", "the test")


def _bearer(reg_host: str, extra: str = ',service="reg",scope="repository:a:pull"', path: str = "/token"
            ) -> dict[str, str]:
    return {"WWW-Authenticate": f'Bearer realm="http://{reg_host}{path}"{extra}'}


def test_a_bearer_challenge_gets_a_token_with_the_credentials_and_keeps_it_per_scope(registry):
    reg = registry({})
    reg.answers = {
        "GET /v2/a/tags/list?n=1000": [(401, _bearer(reg.host), b""), _json(200, {"tags": ["x"]})],
        "GET /token?service=reg&scope=repository%3Aa%3Apull": [_json(200, {"token": "T1"})],
    }
    client = reg.client(credentials=CREDS)
    assert client.list_tags("a") == ["x"]
    assert client.list_tags("a") == ["x"]
    basic = "Basic " + base64.b64encode(b"ci:pw").decode()
    assert [(m, p, a) for m, p, a, *_ in reg.seen] == [
        ("GET", "/v2/a/tags/list?n=1000", None),
        ("GET", "/token?service=reg&scope=repository%3Aa%3Apull", basic),
        ("GET", "/v2/a/tags/list?n=1000", "Bearer T1"),
        ("GET", "/v2/a/tags/list?n=1000", "Bearer T1"),
    ]


def test_a_challenge_without_a_scope_asks_for_the_requests_own_and_access_token_is_read(registry):
    reg = registry({})
    reg.answers = {
        "GET /v2/a/blobs/" + CONFIG_DIGEST: [(401, _bearer(reg.host, ""), b""), (200, {}, CONFIG)],
        "GET /token?scope=repository%3Aa%3Apull": [_json(200, {"access_token": "T2"})],
    }
    assert reg.client().get_blob("a", CONFIG_DIGEST) == CONFIG
    assert [(p, a) for _m, p, a, *_ in reg.seen] == [
        (f"/v2/a/blobs/{CONFIG_DIGEST}", None), ("/token?scope=repository%3Aa%3Apull", None),
        (f"/v2/a/blobs/{CONFIG_DIGEST}", "Bearer T2")]


def test_an_identity_token_is_exchanged_by_a_refresh_token_post(registry):
    reg = registry({})
    reg.answers = {
        "GET /v2/": [(401, _bearer(reg.host, ',service="reg"'), b""), (200, {}, b"{}")],
        "POST /token": [_json(200, {"token": "T3"})],
    }
    reg.client(credentials=Credentials("<token>", "refresh-1", "the test", identity_token=True)).ping()
    method, path, auth, _accept, content_type, body = reg.seen[1]
    assert (method, path, auth, content_type) == ("POST", "/token", None, "application/x-www-form-urlencoded")
    assert sorted(body.decode().split("&")) == ["client_id=sglstack", "grant_type=refresh_token",
                                               "refresh_token=refresh-1", "scope=", "service=reg"]
    assert reg.seen[2][2] == "Bearer T3"


@pytest.mark.parametrize(("token", "message"), [
    ((401, {}, b""), "registry {host}: the token service rejected the credentials from the test (wrong user or "
                     "password?)"),
    ((403, {}, b""), "registry {host}: the token service rejected the credentials from the test (wrong user or "
                     "password?)"),
    ((409, {}, b""), "registry {host}: token service answered HTTP 409"),
    ((200, {}, b"{}"), "registry {host}: token service answered without a token"),
    ((200, {}, b"[]"), "registry {host}: token service answered without a token"),
    ((200, {}, b"nope"), "registry {host}: token service answered without a token"),
    ((503, {}, b""), "registry {host}: token service http://{host}/token: GET /v2/ failed after 1 attempts: "
                     "HTTP 503 Service Unavailable"),
])
def test_a_token_service_that_gives_no_token_is_one_line(registry, token, message):
    reg = registry({})
    reg.answers = {"GET /v2/": [(401, _bearer(reg.host, "", "/token?x=1"), b"")],
                   "GET /token?x=1": [token]}
    with pytest.raises(RegistryError) as err:
        reg.client(credentials=CREDS).ping()
    assert str(err.value) == message.format(host=reg.host)


def test_a_bearer_challenge_without_a_realm_is_one_line(registry):
    reg = registry({"GET /v2/": [(401, {"WWW-Authenticate": 'Bearer service="x"'}, b"")]})
    with pytest.raises(RegistryError) as err:
        reg.client().ping()
    assert str(err.value) == f"registry {reg.host}: Bearer challenge without a realm"


def test_a_basic_challenge_is_answered_once_with_the_credentials(registry):
    reg = registry({"GET /v2/": [(401, {"WWW-Authenticate": 'Basic realm="r"'}, b""), (200, {}, b"{}"),
                                 (200, {}, b"{}")]})
    client = reg.client(credentials=CREDS)
    client.ping()
    client.ping()
    basic = "Basic " + base64.b64encode(b"ci:pw").decode()
    assert [a for _m, _p, a, *_ in reg.seen] == [None, basic, basic]


@pytest.mark.parametrize(("credentials", "answers", "message"), [
    (None, [(401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")],
     "registry {host}: authentication required and no credentials found (set SGLSTACK_REGISTRY_USER/"
     "SGLSTACK_REGISTRY_PASSWORD or run `docker login {host}`)"),
    (CREDS, [(401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")],
     "registry {host}: the registry rejected the credentials from the test (wrong user or password?)"),
    (CREDS, [(401, {}, b"")],
     "registry {host}: the registry rejected the credentials from the test (wrong user or password?)"),
    (CREDS, [(403, {"Content-Type": "application/json"}, ERROR)],
     "registry {host}: access denied to a (DENIED: no)"),
])
def test_refused_credentials_are_one_line_naming_their_source(registry, credentials, answers, message):
    reg = registry({"GET /v2/a/manifests/v1": answers})
    with pytest.raises(RegistryAuthError) as err:
        reg.client(credentials=credentials).get_manifest("a", "v1")
    assert str(err.value) == message.format(host=reg.host)


def test_a_token_refused_by_the_registry_is_one_line(registry):
    reg = registry({})
    reg.answers = {"GET /v2/": [(401, _bearer(reg.host, ""), b"")], "GET /token": [_json(200, {"token": "T"})]}
    with pytest.raises(RegistryAuthError) as err:
        reg.client(credentials=CREDS).ping()
    assert str(err.value) == (f"registry {reg.host}: the registry rejected the credentials from the test (wrong "
                              "user or password?)")
    assert _asked(reg) == ["GET /v2/", "GET /token", "GET /v2/"]


def test_ping_wants_a_200(registry):
    reg = registry({"GET /v2/": [(204, {}, b"")]})
    with pytest.raises(RegistryError) as err:
        reg.client().ping()
    assert str(err.value) == f"registry {reg.host}: GET /v2/ answered HTTP 204"


# ---- where the client speaks to -------------------------------------------------------------------------

@pytest.mark.parametrize(("registry_name", "api_host", "scheme"), [
    ("127.0.0.1:5000", "127.0.0.1:5000", "http"),
    ("127.9.9.9", "127.9.9.9", "http"),
    ("localhost:5000", "localhost:5000", "http"),
    ("localhost", "localhost", "http"),
    ("[::1]:5000", "[::1]:5000", "http"),
    ("[::1]", "[::1]", "http"),
    ("ghcr.io", "ghcr.io", "https"),
    ("128.0.0.1:5000", "128.0.0.1:5000", "https"),
    ("localhost.example:443", "localhost.example:443", "https"),
    ("docker.io", "registry-1.docker.io", "https"),
])
def test_loopback_registries_are_spoken_to_over_http(monkeypatch, registry_name, api_host, scheme):
    monkeypatch.delenv("SGLSTACK_REGISTRY_SCHEME", raising=False)
    client = RegistryClient(registry_name)
    assert (client.registry, client.api_host, client.scheme) == (registry_name, api_host, scheme)
    monkeypatch.setenv("SGLSTACK_REGISTRY_SCHEME", "https")
    assert RegistryClient(registry_name).scheme == "https"
    assert RegistryClient(registry_name, scheme="http").scheme == "http"


def test_from_environment_reads_the_credentials_and_passes_the_options_on(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLSTACK_REGISTRY_USER", "u")
    monkeypatch.setenv("SGLSTACK_REGISTRY_PASSWORD", "p")
    client = RegistryClient.from_environment("r.example", timeout_s=7)
    assert client.credentials is not None
    assert (client.credentials.username, client.credentials.password, client.timeout_s) == ("u", "p", 7)
    assert repr(client) == "RegistryClient('r.example')"


def test_a_manifest_that_is_not_an_object_is_a_value_error():
    with pytest.raises(ValueError) as err:
        Manifest(media_type=OCI_MANIFEST, body=b"[]", digest="d").json()
    assert str(err.value) == "the manifest is not a JSON object"
    assert client_mod.MANIFEST_MEDIA_TYPES == (OCI_INDEX, OCI_MANIFEST, client_mod.DOCKER_MANIFEST_LIST,
                                               DOCKER_MANIFEST)


# ---- every call: the scope it asks a token for, the name it has in errors ------------------------------

D = CONFIG_DIGEST
CALLS = {
    "ping": (lambda c: c.ping(), "", "GET /v2/"),
    "get_manifest": (lambda c: c.get_manifest("a", "v1"), "repository:a:pull", "GET manifest a:v1"),
    "get_manifest by digest": (lambda c: c.get_manifest("a", D), "repository:a:pull", f"GET manifest a@{D}"),
    "manifest_digest": (lambda c: c.manifest_digest("a", "v1"), "repository:a:pull", "HEAD manifest a:v1"),
    "put_manifest": (lambda c: c.put_manifest("a", "v1", IMAGE, OCI_MANIFEST), "repository:a:pull,push",
                     "PUT manifest a:v1"),
    "put_artifact": (lambda c: c.put_artifact("a", D, IMAGE, OCI_MANIFEST), "repository:a:pull,push",
                     f"PUT manifest a@{D}"),
    "referrers": (lambda c: c.referrers("a", D), "repository:a:pull", f"GET referrers a@{D}"),
    "blob_exists": (lambda c: c.blob_exists("a", D), "repository:a:pull", f"HEAD blob a@{D}"),
    "put_blob": (lambda c: c.put_blob("a", CONFIG), "repository:a:pull", f"HEAD blob a@{D}"),
    "list_tags": (lambda c: c.list_tags("a"), "repository:a:pull", "GET /v2/a/tags/list"),
    "get_blob": (lambda c: c.get_blob("a", D), "repository:a:pull", f"GET blob a@{D}"),
    "get_blob capped": (lambda c: c.get_blob("a", D, max_bytes=10), "repository:a:pull", f"GET blob a@{D}"),
    "image_config": (lambda c: c.image_config("a", "v1"), "repository:a:pull", "GET manifest a:v1"),
    "untag": (lambda c: c.untag("a", "v1"), "repository:a:delete", "DELETE manifest a:v1"),
    "delete_manifest": (lambda c: c.delete_manifest("a", D), "repository:a:delete", f"DELETE manifest a@{D}"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_call_asks_a_token_for_its_own_scope(registry, name):
    call, scope, _what = CALLS[name]
    reg = registry({})
    reg.fallback = (401, _bearer(reg.host, ',service="reg"'), b"")
    reg.answers["GET /token?service=reg" + (f"&scope={scope.replace(':', '%3A').replace(',', '%2C')}" if scope
                                            else "")] = [(409, {}, b"")]
    with pytest.raises(RegistryError) as err:
        call(reg.client())
    assert str(err.value) == f"registry {reg.host}: token service answered HTTP 409"
    assert len(reg.seen) == 2


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_call_is_named_when_the_registry_does_not_answer(registry, name):
    call, _scope, what = CALLS[name]
    reg = registry({})
    reg.fallback = (503, {}, b"")
    with pytest.raises(RegistryError) as err:
        call(reg.client())
    assert str(err.value) == f"registry {reg.host}: {what} failed after 1 attempts: HTTP 503 Service Unavailable"


@pytest.mark.parametrize(("answers", "what"), [
    ({"POST /v2/a/blobs/uploads/": [(503, {}, b"")]}, "POST blob upload a"),
    ({"POST /v2/a/blobs/uploads/": [(202, {"Location": "/v2/a/blobs/uploads/u"}, b"")],
      f"PUT /v2/a/blobs/uploads/u?digest={D}": [(503, {}, b"")]}, f"PUT blob a@{D}"),
])
def test_each_step_of_a_blob_upload_has_its_name_and_scope(registry, answers, what):
    reg = registry(answers)
    with pytest.raises(RegistryError) as err:
        reg.client().put_blob("a", CONFIG)
    assert str(err.value) == f"registry {reg.host}: {what} failed after 1 attempts: HTTP 503 Service Unavailable"
    reg = registry({})
    reg.fallback = (401, _bearer(reg.host, ',service="reg"'), b"")
    reg.answers[f"HEAD /v2/a/blobs/{D}"] = [(404, {}, b"")]
    reg.answers["GET /token?service=reg&scope=repository%3Aa%3Apull%2Cpush"] = [(409, {}, b"")]
    with pytest.raises(RegistryError) as err:
        reg.client().put_blob("a", CONFIG)
    assert str(err.value) == f"registry {reg.host}: token service answered HTTP 409"


def test_a_referrers_answer_that_is_no_index_names_the_request(registry):
    reg = registry({f"GET /v2/a/referrers/{D}": [(200, {"Content-Type": "text/html"}, b"<html>")]})
    with pytest.raises(RegistryError) as err:
        reg.client().referrers("a", D)
    assert str(err.value) == (f"registry {reg.host}: GET referrers a@{D} answered HTTP 200 with a body that is not "
                              "JSON (text/html, 6 bytes)")


def test_an_oversized_manifest_or_blob_names_the_request(registry, monkeypatch):
    monkeypatch.setattr(client_mod, "MAX_MANIFEST_BYTES", 10)
    reg = registry({"GET /v2/a/manifests/v1": [(200, {}, IMAGE)], f"GET /v2/a/blobs/{D}": [(200, {}, CONFIG)]})
    messages = []
    for call in (lambda c: c.get_manifest("a", "v1"), lambda c: c.get_blob("a", D, max_bytes=10)):
        with pytest.raises(RegistryError) as err:
            call(reg.client())
        messages.append(str(err.value))
    assert messages == [f"registry {reg.host}: GET manifest a:v1: {len(IMAGE)} bytes, over the 10-byte limit",
                        f"registry {reg.host}: GET blob a@{D}: {len(CONFIG)} bytes, over the 10-byte limit"]


def test_an_upload_location_is_cut_at_its_first_v2(registry):
    put = f"/v2/team/v2/app/blobs/uploads/u?digest={D}"
    reg = registry({"POST /v2/team/v2/app/blobs/uploads/": [(202, {"Location": "/v2/team/v2/app/blobs/uploads/u"},
                                                              b"")],
                    f"PUT {put}": [(201, {}, b"")]})
    assert reg.client().put_blob("team/v2/app", CONFIG) == D
    assert _asked(reg)[-1] == f"PUT {put}"


def test_from_environment_reads_the_docker_config_for_that_registry(monkeypatch, tmp_path):
    for name in ("SGLSTACK_REGISTRY_USER", "SGLSTACK_REGISTRY_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "r.example": {"auth": base64.b64encode(b"cfg:pw").decode()},
        "s.example": {"auth": base64.b64encode(b"other:pw").decode()}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    creds = RegistryClient.from_environment("r.example").credentials
    assert creds is not None and (creds.username, creds.source) == ("cfg", f"Docker config {tmp_path / 'config.json'}")
    assert RegistryClient.from_environment("t.example").credentials is None


def test_an_index_lists_its_children_and_an_image_its_blobs_whatever_else_they_hold():
    odd_image = json.dumps({"mediaType": OCI_MANIFEST, "config": {"digest": "c"}, "manifests": [{"digest": "x"}]})
    assert Manifest(media_type=OCI_MANIFEST, body=odd_image.encode(), digest="d").children() == []
    assert Manifest(media_type=OCI_MANIFEST, body=odd_image.encode(), digest="d").blobs() == ["c"]
    assert Manifest(media_type=OCI_INDEX, body=b'{"mediaType": "x"}', digest="d").children() == []
    assert Manifest(media_type=OCI_INDEX, body=b'{"config": {"digest": "c"}}', digest="d").blobs() == []
    assert Manifest(media_type=client_mod.DOCKER_MANIFEST_LIST, body=INDEX, digest="d").children() == [
        IMAGE_DIGEST, "sha256:" + "3" * 64]


def test_an_artifact_is_put_with_its_media_type(registry):
    reg = registry({f"PUT /v2/a/manifests/{compute_digest(IMAGE)}": [(201, {}, b"")]})
    reg.client().put_artifact("a", compute_digest(IMAGE), IMAGE, "application/vnd.x+json")
    assert reg.seen[0][4] == "application/vnd.x+json"


def test_an_image_config_over_its_cap_is_refused(registry, monkeypatch):
    monkeypatch.setattr(client_mod, "MAX_CONFIG_BYTES", 10)
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": OCI_MANIFEST}, IMAGE)],
                    f"GET /v2/a/blobs/{D}": [(200, {}, CONFIG)]})
    with pytest.raises(RegistryError) as err:
        reg.client().image_config("a", "v1")
    assert str(err.value) == f"registry {reg.host}: GET blob a@{D}: {len(CONFIG)} bytes, over the 10-byte limit"


def test_a_manifest_type_with_parameters_is_cut_to_the_type(registry):
    bare = json.dumps({"manifests": []}).encode()
    reg = registry({"GET /v2/a/manifests/v1": [(200, {"Content-Type": f"{OCI_INDEX} ; charset=utf-8"}, bare)]})
    assert reg.client().get_manifest("a", "v1").media_type == OCI_INDEX


def _endless(blocks: int, stop: threading.Event):
    """An answer with a body without a length that never ends: 64 KiB blocks, `blocks` of them, then nothing
    until the test ends (a reader that does not stop at its cap waits for its deadline)."""

    def answer(handler) -> None:
        handler.close_connection = True
        handler.send_response(200)
        handler.end_headers()
        try:
            for _ in range(blocks):
                handler.wfile.write(b"x" * 65536)
            handler.wfile.flush()
        except OSError:
            return
        stop.wait(30)

    return answer


@pytest.mark.parametrize(("call", "message"), [
    (lambda c: c.get_manifest("a", "v1"), "GET manifest a:v1: over the 4194304-byte limit"),
    (lambda c: c.get_blob("a", D, max_bytes=100_000), f"GET blob a@{D}: over the 100000-byte limit"),
    (lambda c: c.referrers("a", D), f"GET referrers a@{D}: over the 4194304-byte limit"),
])
def test_an_endless_answer_is_refused_at_its_cap_not_read_to_the_deadline(call, message):
    server, stop = RegistryDouble({}), threading.Event()
    server.fallback = _endless(70, stop)
    try:
        with pytest.raises(RegistryError) as err:
            call(RegistryClient(f"127.0.0.1:{server.port}", timeout_s=6, attempts=1))
    finally:
        stop.set()
        server.close()
    assert str(err.value) == f"registry 127.0.0.1:{server.port}: {message}"


def test_a_challenge_with_spaces_between_its_parameters_and_its_own_scope(registry):
    reg = registry({})
    challenge = f'Bearer realm="http://{reg.host}/token", service="reg", scope="repository:a:pull,push"'
    reg.answers = {
        "GET /v2/a/tags/list?n=1000": [(401, {"WWW-Authenticate": challenge}, b""), _json(200, {"tags": []})],
        "GET /token?service=reg&scope=repository%3Aa%3Apull%2Cpush": [_json(200, {"token": "T4"})],
    }
    assert reg.client().list_tags("a") == []
    assert reg.seen[-1][2] == "Bearer T4"


def test_tags_of_a_repository_not_there_yet_are_none_and_a_refusal_is_one_line(registry, monkeypatch):
    reg = registry({"GET /v2/b/tags/list?n=1000": [_json(409, {"errors": [{"code": "DENIED", "message": "no"}]})]})
    client = reg.client()
    assert client.list_tags("a") == []
    with pytest.raises(RegistryError) as err:
        client.list_tags("b")
    assert str(err.value) == f"registry {reg.host}: GET /v2/b/tags/list: HTTP 409 DENIED: no"
    monkeypatch.setattr(client_mod, "MAX_TAG_PAGES", 2)
    reg.answers = {
        "GET /v2/c/tags/list?n=1000": [_json(200, {"tags": ["1"]}, Link='</v2/c/tags/list?n=1000&last=1>; rel="next"')],
        "GET /v2/c/tags/list?n=1000&last=1": [_json(200, {"tags": ["2"]},
                                                    Link='</v2/c/tags/list?n=1000&last=2>; rel="next"')],
    }
    with pytest.raises(RegistryError) as err:
        client.list_tags("c")
    assert str(err.value) == f"registry {reg.host}: GET /v2/c/tags/list: page 3 is one too many"


@pytest.mark.parametrize("answer", [{"name": "a", "tags": None}, {"name": "a"}, {"name": "a", "tags": []}])
def test_a_tag_list_that_is_null_or_missing_or_empty_is_no_tags(registry, answer):
    reg = registry({"GET /v2/a/tags/list?n=1000": [_json(200, answer)]})
    assert reg.client().list_tags("a") == []


@pytest.mark.parametrize("answer", [[], ["v1"], "v1", None, 3, {"tags": "v1"}, {"tags": [1, "v1"]},
                                    {"tags": ["v1", None]}, {"tags": {"v1": 1}}])
def test_a_tag_list_answer_of_another_shape_is_one_line_not_no_tags(registry, answer):
    reg = registry({"GET /v2/a/tags/list?n=1000": [_json(200, answer)]})
    with pytest.raises(RegistryError) as err:
        reg.client().list_tags("a")
    assert str(err.value) == f"registry {reg.host}: GET /v2/a/tags/list answered JSON without a list of tags"


@pytest.mark.parametrize(("headers", "kind"), [({"Content-Type": "text/html; charset=utf-8"}, "text/html"),
                                              ({"Content-Type": "text/plain"}, "text/plain"), ({}, "no content type")])
def test_a_tag_list_that_is_not_json_says_its_content_type_without_parameters(registry, headers, kind):
    reg = registry({"GET /v2/a/tags/list?n=1000": [(200, headers, b"<html>down</html>")]})
    with pytest.raises(RegistryError) as err:
        reg.client().list_tags("a")
    assert str(err.value) == (f"registry {reg.host}: GET /v2/a/tags/list answered HTTP 200 with a body that is not "
                              f"JSON ({kind}, 17 bytes)")


def test_the_next_page_of_a_repository_named_with_v2_is_cut_at_the_first_v2(registry):
    reg = registry({
        "GET /v2/t/v2/app/tags/list?n=1000": [_json(200, {"tags": ["a"]},
                                                   Link='</v2/t/v2/app/tags/list?n=1000&last=a>; rel="next"')],
        "GET /v2/t/v2/app/tags/list?n=1000&last=a": [_json(200, {"tags": ["b"]})],
    })
    assert reg.client().list_tags("t/v2/app") == ["a", "b"]
    assert _asked(reg) == ["GET /v2/t/v2/app/tags/list?n=1000", "GET /v2/t/v2/app/tags/list?n=1000&last=a"]


def test_an_upload_start_that_redirects_is_not_followed(registry):
    reg = registry({"POST /v2/a/blobs/uploads/": [(307, {"Location": "/v2/a/blobs/uploads/elsewhere"}, b"")],
                    "POST /v2/a/blobs/uploads/elsewhere": [(202, {"Location": "/v2/a/blobs/uploads/u"}, b"")],
                    f"PUT /v2/a/blobs/uploads/u?digest={D}": [(201, {}, b"")]})
    with pytest.raises(RegistryError) as err:
        reg.client().put_blob("a", CONFIG)
    assert str(err.value) == f"registry {reg.host}: POST blob upload a: HTTP 307 Temporary Redirect"


def test_the_blob_put_carries_the_token_of_the_upload(registry):
    reg = registry({})
    challenge = (401, _bearer(reg.host, ',service="reg"'), b"")
    reg.answers = {
        f"HEAD /v2/a/blobs/{D}": [challenge, (404, {}, b"")],
        "GET /token?service=reg&scope=repository%3Aa%3Apull": [_json(200, {"token": "PULL"})],
        "POST /v2/a/blobs/uploads/": [challenge, (202, {"Location": "/v2/a/blobs/uploads/u"}, b"")],
        "GET /token?service=reg&scope=repository%3Aa%3Apull%2Cpush": [_json(200, {"token": "PUSH"})],
        f"PUT /v2/a/blobs/uploads/u?digest={D}": [(201, {}, b"")],
    }
    assert reg.client().put_blob("a", CONFIG) == D
    assert [(m, a) for m, _p, a, *_ in reg.seen] == [
        ("HEAD", None), ("GET", None), ("HEAD", "Bearer PULL"), ("POST", None), ("GET", None), ("POST", "Bearer PUSH"),
        ("PUT", "Bearer PUSH")]
