# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""Auth against real registries: htpasswd (Basic) and `auth: token` (Bearer, a JWT token service)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys

import pytest
from registry_fixtures import htpasswd_registry, tiny_image, token_registry  # noqa: F401 - fixtures

from sglstack.config.matrix import load_matrix
from sglstack.core.clock import utc_today
from sglstack.publish import publish_digest, push_candidate, target_repository
from sglstack.publish.tags import release_tags
from sglstack.registry.auth import Credentials
from sglstack.registry.client import RegistryClient
from sglstack.registry.session import RegistryAuthError

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack(repo_root):
    return load_matrix(repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")


def _docker_config(tmp_path, host, user, password):
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return tmp_path


def test_basic_auth_publish_with_docker_config_credentials(
    stack,
    htpasswd_registry,
    tiny_image,
    docker_client,
    tmp_path,
    monkeypatch,
):
    reg = htpasswd_registry
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, reg.host, reg.user, reg.password)))
    monkeypatch.delenv("SGLSTACK_REGISTRY_USER", raising=False)
    repo_name = f"{reg.host}/sglstack-test/auth-{secrets.token_hex(3)}"
    repo = target_repository(stack, repo_name)
    client = RegistryClient.from_environment(repo.registry)
    assert client.credentials.source.startswith("Docker config")
    digest = push_candidate(docker_client, tiny_image, repo, "cand", client)
    config_hash = secrets.token_hex(32)
    publish_digest(stack, digest, unsigned=True, registry=repo_name, config_hash=config_hash, build_dir=tmp_path)
    for tag in release_tags(stack, config_hash, utc_today()).moving:
        assert client.manifest_digest(repo.path, tag) == digest


def test_wrong_password_fails_clearly_without_leaking_it(htpasswd_registry, repo_root, tmp_path):
    reg = htpasswd_registry
    wrong = "wrong-" + secrets.token_hex(8)
    env = {
        **os.environ,
        "SGLSTACK_REGISTRY_USER": reg.user,
        "SGLSTACK_REGISTRY_PASSWORD": wrong,
        "SGLSTACK_BUILD_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "publish",
            "--stack",
            "cpu-test",
            "--digest",
            "sha256:" + "a" * 64,
            "--registry",
            f"{reg.host}/sglstack-test/denied",
            "--stacks-file",
            "tests/fixtures/stacks-cpu.yaml",
            "--unsigned",
        ],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert err.count("\n") == 0, err
    assert f"registry {reg.host}" in err and "rejected the credentials" in err
    assert "Traceback" not in proc.stderr + proc.stdout
    assert wrong not in proc.stderr + proc.stdout and reg.password not in proc.stderr + proc.stdout


def test_no_credentials_say_how_to_give_them(htpasswd_registry):
    with pytest.raises(RegistryAuthError, match="authentication required and no credentials found"):
        RegistryClient(htpasswd_registry.host).ping()


def _scope(text: str) -> tuple[str, str, frozenset[str]]:
    """`repository:NAME:a,b` as (type, name, actions); the name may hold a port's colon, the actions never."""
    kind, _, rest = text.partition(":")
    name, _, actions = rest.rpartition(":")
    return kind, name, frozenset(a for a in actions.split(",") if a)


def test_scope_comparison_ignores_the_order_of_actions():
    assert _scope("repository:a/b:push,pull") == _scope("repository:a/b:pull,push")
    assert _scope("repository:a/b:pull") != _scope("repository:a/b:pull,push")


def test_bearer_token_flow(stack, token_registry, tiny_image, docker_client, tmp_path, monkeypatch):
    reg, service = token_registry
    monkeypatch.setenv("SGLSTACK_REGISTRY_USER", reg.user)
    monkeypatch.setenv("SGLSTACK_REGISTRY_PASSWORD", reg.password)
    repo_name = f"{reg.host}/sglstack-test/token-{secrets.token_hex(3)}"
    repo = target_repository(stack, repo_name)
    client = RegistryClient.from_environment(repo.registry)
    digest = push_candidate(docker_client, tiny_image, repo, "cand", client)  # dockerd: its own bearer flow
    config_hash = secrets.token_hex(32)
    publish_digest(stack, digest, unsigned=True, registry=repo_name, config_hash=config_hash, build_dir=tmp_path)
    tags = release_tags(stack, config_hash, utc_today())
    checker = RegistryClient(reg.host, credentials=Credentials(reg.user, reg.password, "test"))
    assert all(checker.manifest_digest(repo.path, t) == digest for t in tags.release)
    # The token service lists a scope's actions in no promised order (dockerd asks `push,pull`, we ask
    # `pull,push`): compare each scope as (type, name, set of actions).
    scopes = {_scope(s) for q in service.requests for s in q.get("scope", [])}
    assert ("repository", repo.path, frozenset({"pull", "push"})) in scopes
    assert ("repository", repo.path, frozenset({"pull"})) in scopes

    bad = RegistryClient(reg.host, credentials=Credentials(reg.user, "nope-" + secrets.token_hex(4), "env"))
    with pytest.raises(RegistryAuthError, match=f"registry {reg.host}: the token service rejected"):
        bad.list_tags(repo.path)
