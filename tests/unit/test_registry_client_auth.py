"""`RegistryClient`'s authentication (Bearer tokens per scope, identity tokens, Basic, refusals in one line) and where
it speaks to, against the registry stand-in (tests/lib/registry_double) answering what the test scripts."""

from __future__ import annotations

import base64

import pytest
from registry_api_fixtures import CONFIG, CONFIG_DIGEST, ERROR, _asked, _bearer, _json, scripted_registries

from sglstack.core.errors import RegistryError
from sglstack.registry import client as client_mod
from sglstack.registry.auth import Credentials
from sglstack.registry.client import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    RegistryClient,
)
from sglstack.registry.session import RegistryAuthError


@pytest.fixture
def registry():
    with scripted_registries() as make:
        yield make


# ---- authentication -------------------------------------------------------------------------------------

CREDS = Credentials("ci", "pw", "the test")


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
