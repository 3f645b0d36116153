"""The registry client without Docker: credentials, retries, permanent failures, against in-test servers
(the real distribution registry's cases are tests/e2e/test_registry_client_real.py)."""

from __future__ import annotations

import base64
import json

import pytest
from registry_double import RegistryDouble

from sglstack.core.errors import RegistryError
from sglstack.registry.auth import Credentials, resolve_credentials
from sglstack.registry.client import RegistryClient, compute_digest
from sglstack.registry.session import RegistryAuthError


def _config(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_environment_credentials_win(tmp_path):
    cfg = _config(tmp_path, {"auths": {"r.example:5000": {"auth": base64.b64encode(b"a:b").decode()}}})
    creds = resolve_credentials(
        "r.example:5000", env={"SGLSTACK_REGISTRY_USER": "u", "SGLSTACK_REGISTRY_PASSWORD": "p"}, config_path=cfg
    )
    assert (creds.username, creds.password) == ("u", "p")
    assert "SGLSTACK_REGISTRY_USER" in creds.source


def test_docker_config_auths_base64_and_plain(tmp_path):
    cfg = _config(
        tmp_path,
        {
            "auths": {
                "https://r.example:5000/v2/": {"auth": base64.b64encode(b"ci-bot:pa:ss").decode()},
                "other.example": {"username": "me", "password": "pw"},
                "tok.example": {"identitytoken": "refresh-123"},
            }
        },
    )
    creds = resolve_credentials("r.example:5000", env={}, config_path=cfg)
    assert (creds.username, creds.password) == ("ci-bot", "pa:ss")
    assert resolve_credentials("other.example", env={}, config_path=cfg).password == "pw"
    token = resolve_credentials("tok.example", env={}, config_path=cfg)
    assert token.identity_token and token.docker_auth_config("tok.example") == {
        "identitytoken": "refresh-123",
        "serveraddress": "tok.example",
    }
    assert resolve_credentials("unknown.example", env={}, config_path=cfg) is None


def test_docker_hub_keys(tmp_path):
    cfg = _config(tmp_path, {"auths": {"https://index.docker.io/v1/": {"auth": base64.b64encode(b"h:p").decode()}}})
    assert resolve_credentials("docker.io", env={}, config_path=cfg).username == "h"


def test_docker_config_dir_from_env(tmp_path):
    _config(tmp_path, {"auths": {"r.example": {"auth": base64.b64encode(b"x:y").decode()}}})
    assert resolve_credentials("r.example", env={"DOCKER_CONFIG": str(tmp_path)}).username == "x"


def test_credential_helper_is_run(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-sgltest"
    helper.write_text(
        "#!/bin/sh\nread server\n"
        'if [ "$server" = r.example ]; then\n'
        '  printf \'{"ServerURL":"%s","Username":"helper-user","Secret":"helper-secret"}\' '
        "\"$server\"\nelse echo 'credentials not found in native keychain'; exit 1; fi\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    cfg = _config(
        tmp_path,
        {
            "credHelpers": {"r.example": "sgltest"},
            "credsStore": "sgltest",
            "auths": {"s.example": {"auth": base64.b64encode(b"file:pw").decode()}},
        },
    )
    creds = resolve_credentials("r.example", env={}, config_path=cfg)
    assert (creds.username, creds.password) == ("helper-user", "helper-secret")
    assert "docker-credential-sgltest" in creds.source
    # The store has nothing for s.example: the auths entry is used.
    assert resolve_credentials("s.example", env={}, config_path=cfg).username == "file"


def test_missing_helper_and_bad_auth_fail_in_one_line(tmp_path):
    cfg = _config(tmp_path, {"credHelpers": {"r.example": "does-not-exist-anywhere"}})
    with pytest.raises(RegistryError, match=r"registry r.example: credential helper .* not installed"):
        resolve_credentials("r.example", env={}, config_path=cfg)
    cfg = _config(tmp_path, {"auths": {"r.example": {"auth": base64.b64encode(b"nocolon").decode()}}})
    with pytest.raises(RegistryError, match="not base64 user:password"):
        resolve_credentials("r.example", env={}, config_path=cfg)


def test_a_default_store_that_is_not_installed_leaves_the_config_entries(tmp_path):
    cfg = _config(
        tmp_path,
        {"credsStore": "desktop-not-here", "auths": {"r.example": {"auth": base64.b64encode(b"u:p").decode()}}},
    )
    creds = resolve_credentials("r.example", env={}, config_path=cfg)
    assert (creds.username, creds.password) == ("u", "p") and creds.source.startswith("Docker config")
    assert resolve_credentials("s.example", env={}, config_path=cfg) is None


def test_an_identity_token_from_a_credential_helper(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-sgltok"
    helper.write_text('#!/bin/sh\nread server\nprintf \'{"Username":"<token>","Secret":"refresh-xyz"}\'\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    cfg = _config(tmp_path, {"credHelpers": {"r.example": "sgltok"}})
    creds = resolve_credentials("r.example", env={}, config_path=cfg)
    assert creds.identity_token and creds.password == "refresh-xyz"
    assert creds.docker_auth_config("r.example") == {"identitytoken": "refresh-xyz", "serveraddress": "r.example"}


def test_a_docker_config_that_is_not_json_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(RegistryError, match=r"^registry r.example: cannot read Docker config .*: JSONDecodeError$"):
        resolve_credentials("r.example", env={}, config_path=path)


def test_credentials_never_show_in_repr():
    creds = Credentials("user", "hunter2-secret", "test")
    assert "hunter2-secret" not in repr(creds)
    assert "hunter2-secret" not in repr(RegistryClient("127.0.0.1:1", credentials=creds))


# ---- retries ----------------------------------------------------------------------------------------


UNAVAILABLE = b'{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}'


def _scripted(key: str, statuses: list[int], headers: dict[str, str] | None = None) -> RegistryDouble:
    """A registry answering `key` ("METHOD /path") from a script of status codes (then 200)."""
    answers = [(status, headers or {}, UNAVAILABLE) for status in statuses]
    return RegistryDouble({key: [*answers, (200, {}, b"{}")]})


def test_transient_5xx_is_retried_with_bounded_backoff():
    server = _scripted("GET /v2/", [503, 502])
    delays = []
    server.client(sleep=delays.append, backoff_s=0.5, attempts=4).ping()
    assert len(server.seen) == 3
    assert delays == [0.5, 1.0]
    server.close()


def test_retries_are_bounded_and_the_error_names_the_registry():
    server = _scripted("GET /v2/", [500] * 10)
    delays = []
    with pytest.raises(RegistryError) as err:
        server.client(sleep=delays.append, attempts=4, backoff_s=1, max_backoff_s=2).ping()
    assert len(server.seen) == 4 and delays == [1, 2, 2]
    assert f"registry 127.0.0.1:{server.port}" in str(err.value) and "after 4 attempts" in str(err.value)
    server.close()


@pytest.mark.parametrize("status", [401, 403, 404])
def test_permanent_errors_fail_at_once(status):
    key = "HEAD /v2/a/b/manifests/missing" if status == 404 else "GET /v2/"
    server = _scripted(key, [status] * 5, headers={"WWW-Authenticate": 'Basic realm="x"'} if status == 401 else None)
    delays = []
    client = server.client(sleep=delays.append, attempts=4)
    if status == 404:
        assert client.manifest_digest("a/b", "missing") is None
    else:
        with pytest.raises(RegistryAuthError, match=f"registry 127.0.0.1:{server.port}"):
            client.ping()
    assert len(server.seen) == 1 and delays == []
    server.close()








def test_a_200_that_is_not_json_names_the_registry_and_the_request():
    served = RegistryDouble({"GET /v2/team/app/tags/list?n=1000": [
        (200, {"Content-Type": "text/html"}, b"<html>down for maintenance</html>")]})
    port = served.port
    try:
        with pytest.raises(RegistryError) as err:
            RegistryClient(f"127.0.0.1:{port}").list_tags("team/app")
    finally:
        served.close()
    assert str(err.value) == (
        f"registry 127.0.0.1:{port}: GET /v2/team/app/tags/list answered HTTP 200 with a body that is not JSON "
        "(text/html, 33 bytes)"
    )


def test_compute_digest():
    assert compute_digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


LINK_STYLES = {
    "quoted": '<{path}>; rel="next"',
    "unquoted": "<{path}>; rel=next",
    "absolute URL": '<http://127.0.0.1:{port}{path}>; rel="next"',
    "after a prev link": '</v2/team/app/tags/list?n=2>; rel="prev", <{path}>; rel="next"',
}


def _paged_tags(tags, page, style, loop_back=False) -> RegistryDouble:
    """A registry answering /v2/team/app/tags/list in pages of `page` tags, each naming the next in a Link header
    of `style`."""
    server = RegistryDouble({})

    def answer(handler) -> None:
        last = handler.path.split("last=", 1)[1] if "last=" in handler.path else None
        start = tags.index(last) + 1 if last else 0
        chunk = tags[start:start + page]
        body = json.dumps({"name": "team/app", "tags": chunk}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        more = start + page < len(tags)
        if more or loop_back:
            after = chunk[-1] if more else tags[0]
            path = f"/v2/team/app/tags/list?n={page}&last={after}"
            handler.send_header("Link", LINK_STYLES[style].format(path=path, port=server.port))
        handler.end_headers()
        handler.wfile.write(body)

    server.fallback = answer
    return server


@pytest.mark.parametrize("style", sorted(LINK_STYLES))
@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_every_page_of_tags_is_read_whatever_the_link_form(style, count):
    tags = [f"v{i}" for i in range(count)]
    server = _paged_tags(tags, page=2, style=style)
    try:
        assert RegistryClient(f"127.0.0.1:{server.port}").list_tags("team/app") == tags
    finally:
        server.close()
    assert len(server.requests) == max(1, -(-count // 2))  # one request a page, an empty list one page too


def test_a_registry_whose_pages_link_back_is_refused_not_followed_forever():
    server = _paged_tags(["a", "b", "c"], page=2, style="quoted", loop_back=True)
    try:
        with pytest.raises(RegistryError) as err:
            RegistryClient(f"127.0.0.1:{server.port}").list_tags("team/app")
    finally:
        server.close()
    assert str(err.value) == (f"registry 127.0.0.1:{server.port}: GET /v2/team/app/tags/list: page 4 links back "
                              "to a page it already served")
