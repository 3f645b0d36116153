"""Every call of `RegistryClient`: the scope it asks a token for and the name it has in errors, caps, endless answers,
tag lists and their pages, uploads; against the registry stand-in (tests/lib/registry_double) answering what the
test scripts."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from registry_api_fixtures import (
    CONFIG,
    CONFIG_DIGEST,
    IMAGE,
    IMAGE_DIGEST,
    INDEX,
    _asked,
    _bearer,
    _json,
    scripted_registries,
)
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry import client as client_mod
from sglstack.registry.client import (
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    RegistryClient,
    compute_digest,
)


@pytest.fixture
def registry():
    with scripted_registries() as make:
        yield make


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
