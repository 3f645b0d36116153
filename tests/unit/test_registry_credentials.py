"""Where registry credentials come from, word for word: the environment, the Docker config's entries, a
credential helper (a real executable on PATH, speaking docker's helper protocol), and each one-line refusal."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from sglstack.core.errors import RegistryError
from sglstack.registry.auth import Credentials, docker_config_path, resolve_credentials

ENV_SOURCE = "SGLSTACK_REGISTRY_USER/SGLSTACK_REGISTRY_PASSWORD"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _config(tmp_path: Path, data) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def _helper(tmp_path: Path, monkeypatch, name: str, script: str) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    helper = bindir / f"docker-credential-{name}"
    helper.write_text("#!/bin/sh\nread server\n" + script)
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")


def _as_tuple(creds: Credentials | None):
    return None if creds is None else (creds.username, creds.password, creds.source, creds.identity_token)


@pytest.mark.parametrize(("env", "expected"), [
    ({"SGLSTACK_REGISTRY_USER": "u", "SGLSTACK_REGISTRY_PASSWORD": ""}, ("u", "", ENV_SOURCE, False)),
    ({"SGLSTACK_REGISTRY_USER": "", "SGLSTACK_REGISTRY_PASSWORD": "p"}, ("file", "pw", "Docker config {cfg}", False)),
    ({"SGLSTACK_REGISTRY_USER": "u"}, ("file", "pw", "Docker config {cfg}", False)),
])
def test_the_environment_wins_only_with_a_user_and_a_password(tmp_path, env, expected):
    cfg = _config(tmp_path, {"auths": {"r.example": {"auth": _b64("file:pw")}}})
    got = _as_tuple(resolve_credentials("r.example", env=env, config_path=cfg))
    assert got == tuple(str(v).format(cfg=cfg) if isinstance(v, str) else v for v in expected)


def test_the_docker_config_is_found_by_docker_config_else_in_home(tmp_path, monkeypatch):
    assert docker_config_path({"DOCKER_CONFIG": str(tmp_path)}) == tmp_path / "config.json"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert docker_config_path({}) == tmp_path / "home" / ".docker" / "config.json"
    assert docker_config_path({"DOCKER_CONFIG": ""}) == tmp_path / "home" / ".docker" / "config.json"
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "d"))
    assert docker_config_path() == tmp_path / "d" / "config.json"
    (tmp_path / "d").mkdir()
    _config(tmp_path / "d", {"auths": {"r.example": {"auth": _b64("a:b")}}})
    assert _as_tuple(resolve_credentials("r.example", env={"DOCKER_CONFIG": str(tmp_path / "d")})) == (
        "a", "b", f"Docker config {tmp_path / 'd' / 'config.json'}", False)


@pytest.mark.parametrize("data", [{}, {"auths": {}}, {"credHelpers": {}, "credsStore": ""}, {"other": 1}])
def test_a_config_with_nothing_to_resolve_gives_none(tmp_path, data):
    assert resolve_credentials("r.example", env={}, config_path=_config(tmp_path, data)) is None
    assert resolve_credentials("r.example", env={}, config_path=tmp_path / "absent.json") is None


@pytest.mark.parametrize(("text", "why"), [
    (b"[]", "Docker config {path} is not a JSON object"),
    (b"{not json", "cannot read Docker config {path}: JSONDecodeError"),
    (b"\xff\xfe{}", "cannot read Docker config {path}: UnicodeDecodeError"),
    (json.dumps({"auths": {"r.example": {"auth": _b64("nocolon")}}}).encode(),
     "Docker config {path}: an 'auths' entry is not base64 user:password"),
])
def test_a_bad_docker_config_is_one_line(tmp_path, text, why):
    path = tmp_path / "config.json"
    path.write_bytes(text)
    with pytest.raises(RegistryError) as err:
        resolve_credentials("r.example", env={}, config_path=path)
    assert str(err.value) == "registry r.example: " + why.format(path=path)


@pytest.mark.parametrize(("entry", "expected"), [
    ({"username": "me", "password": "pw"}, ("me", "pw")),
    ({"username": "me", "password": ""}, ("me", "")),
    ({"username": "me"}, None),
    ({"password": "pw"}, None),
    ({"username": "me", "password": "pw", "auth": _b64("a:b")}, ("a", "b")),
])
def test_plain_user_and_password_entries_read_as_the_docker_cli_does(tmp_path, entry, expected):
    cfg = _config(tmp_path, {"auths": {"r.example": entry}})
    got = _as_tuple(resolve_credentials("r.example", env={}, config_path=cfg))
    assert got == (None if expected is None else (*expected, f"Docker config {cfg}", False))


def test_an_identity_token_entry_is_a_refresh_token(tmp_path):
    cfg = _config(tmp_path, {"auths": {"r.example": {"auth": _b64("<token>:"), "identitytoken": "rt"}}})
    creds = resolve_credentials("r.example", env={}, config_path=cfg)
    assert _as_tuple(creds) == ("<token>", "rt", f"Docker config {cfg}", True)
    assert creds is not None
    assert creds.docker_auth_config("r.example") == {"identitytoken": "rt", "serveraddress": "r.example"}
    plain = Credentials("u", "p")
    assert plain.docker_auth_config("r:5") == {"username": "u", "password": "p", "serveraddress": "r:5"}
    assert (plain.source, plain.identity_token) == ("unknown", False)


def test_a_helper_answers_for_its_registry_and_the_entries_for_the_rest(tmp_path, monkeypatch):
    _helper(tmp_path, monkeypatch, "sgl",
            'if [ "$server" = r.example ]; then\n'
            '  printf \'{"ServerURL":"%s","Username":"hu","Secret":"hs"}\' "$server"\n'
            "else echo 'credentials not found in native keychain'; exit 1; fi\n")
    cfg = _config(tmp_path, {"credsStore": "sgl", "auths": {"s.example": {"auth": _b64("file:pw")}}})
    assert _as_tuple(resolve_credentials("r.example", env={}, config_path=cfg)) == (
        "hu", "hs", "credential helper docker-credential-sgl", False)
    assert _as_tuple(resolve_credentials("s.example", env={}, config_path=cfg)) == (
        "file", "pw", f"Docker config {cfg}", False)
    assert resolve_credentials("t.example", env={}, config_path=cfg) is None


def test_a_helper_that_answers_without_a_user_gives_none(tmp_path, monkeypatch):
    _helper(tmp_path, monkeypatch, "nouser", 'printf \'{"ServerURL":"%s","Username":"","Secret":"s"}\' "$server"\n')
    cfg = _config(tmp_path, {"credHelpers": {"r.example": "nouser"}})
    assert resolve_credentials("r.example", env={}, config_path=cfg) is None


def test_a_helper_that_fails_is_one_line_without_its_output(tmp_path, monkeypatch):
    _helper(tmp_path, monkeypatch, "broken", "echo 'secret-ish output'; exit 3\n")
    cfg = _config(tmp_path, {"credHelpers": {"r.example": "broken"}})
    with pytest.raises(RegistryError) as err:
        resolve_credentials("r.example", env={}, config_path=cfg)
    assert str(err.value) == "registry r.example: credential helper docker-credential-broken failed"


def test_a_per_registry_helper_that_is_not_installed_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    cfg = _config(tmp_path, {"credHelpers": {"r.example": "absent"}, "credsStore": "absent-too",
                             "auths": {"s.example": {"auth": _b64("u:p")}}})
    with pytest.raises(RegistryError) as err:
        resolve_credentials("r.example", env={}, config_path=cfg)
    assert str(err.value) == (f"registry r.example: credential helper docker-credential-absent is configured in {cfg} "
                              "but not installed")
    # The default store missing is no error: the entries answer.
    assert _as_tuple(resolve_credentials("s.example", env={}, config_path=cfg)) == (
        "u", "p", f"Docker config {cfg}", False)


def test_docker_hubs_helper_is_found_under_the_index_url(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    cfg = _config(tmp_path, {"credHelpers": {"https://index.docker.io/v1/": "hub-absent"}})
    with pytest.raises(RegistryError) as err:
        resolve_credentials("docker.io", env={}, config_path=cfg)
    assert str(err.value) == (f"registry docker.io: credential helper docker-credential-hub-absent is configured in "
                              f"{cfg} but not installed")


def test_a_default_store_alone_is_asked(tmp_path, monkeypatch):
    _helper(tmp_path, monkeypatch, "only", 'printf \'{"ServerURL":"%s","Username":"su","Secret":"ss"}\' "$server"\n')
    cfg = _config(tmp_path, {"credsStore": "only"})
    assert _as_tuple(resolve_credentials("r.example", env={}, config_path=cfg)) == (
        "su", "ss", "credential helper docker-credential-only", False)
