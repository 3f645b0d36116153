"""Registry credentials: the environment first, then the Docker config through docker's own `docker.auth`.

`SGLSTACK_REGISTRY_USER` / `SGLSTACK_REGISTRY_PASSWORD` win. Otherwise `$DOCKER_CONFIG/config.json` (or
`~/.docker/config.json`) is read the way `docker login` wrote it: `auths` entries (base64 `auth`,
`identitytoken`), `credHelpers` and `credsStore`, resolved by `docker.auth`, so the rules (which key
matches which registry, Docker Hub's several names, helper protocol) are docker-py's, not a copy of them.
Errors are one line naming the registry and where the credentials came from, never what they are.
"""

from __future__ import annotations

import base64
import os
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.auth
import docker.errors

from ..config.imageref import DOCKER_HUB
from ..core.credentials import REGISTRY_PASSWORD_ENV
from ..core.errors import RegistryError
from ..core.inputs import loads

ENV_USER = "SGLSTACK_REGISTRY_USER"
ENV_PASSWORD = REGISTRY_PASSWORD_ENV


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = "unknown"  # shown in errors: where the credentials came from, never what they are
    identity_token: bool = False  # `password` is an OAuth refresh token (docker login --identity-token)

    def docker_auth_config(self, registry: str) -> dict[str, str]:
        """The `auth_config` the Docker engine wants for a push."""
        if self.identity_token:
            return {"identitytoken": self.password, "serveraddress": registry}
        return {"username": self.username, "password": self.password, "serveraddress": registry}


def docker_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    return Path(base) / "config.json"


def _read_config(path: Path, registry: str) -> dict[str, Any]:
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RegistryError(f"registry {registry}: cannot read Docker config {path}: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"registry {registry}: Docker config {path} is not a JSON object")
    # The Docker CLI also accepts plain `username`/`password` in an `auths` entry; docker-py only reads
    # `auth`. Give those entries the `auth` the CLI would derive, so both spellings keep working.
    for entry in (data.get("auths") or {}).values():
        if isinstance(entry, dict) and not entry.get("auth") and entry.get("username") and "password" in entry:
            entry["auth"] = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
    return data


def _store_name(config: docker.auth.AuthConfig, registry: str) -> tuple[str | None, bool]:
    """(the credential helper docker.auth runs for `registry`, whether it is a per-registry `credHelpers` one)."""
    helper = config.get_credential_store(registry)
    key = docker.auth.INDEX_URL if registry == DOCKER_HUB else registry
    return helper, key in config.cred_helpers


def resolve_credentials(
    registry: str, *, env: Mapping[str, str] | None = None, config_path: Path | None = None
) -> Credentials | None:
    """Credentials for `registry` (host[:port]): environment first, then the Docker config (None: none)."""
    env = os.environ if env is None else env
    user, password = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if user and password is not None:
        return Credentials(user, password, f"{ENV_USER}/{ENV_PASSWORD}")
    path = config_path or docker_config_path(env)
    if not path.is_file():
        return None
    data = _read_config(path, registry)
    if not any(data.get(k) for k in ("auths", "credHelpers", "credsStore")):
        return None  # nothing to resolve (and handed an empty dict, docker-py would read ~/.docker instead)
    try:
        config = docker.auth.load_config(config_dict=data)
    except (ValueError, docker.errors.DockerException):
        raise RegistryError(
            f"registry {registry}: Docker config {path}: an 'auths' entry is not base64 user:password"
        ) from None
    helper, per_registry = _store_name(config, registry)
    source = f"Docker config {path}"
    if helper:
        binary = f"docker-credential-{helper}"
        if shutil.which(binary) is None:
            if per_registry:
                raise RegistryError(
                    f"registry {registry}: credential helper {binary} is configured in {path} but not installed"
                )
            # A default store that is not installed (a config copied from Docker Desktop): the Docker
            # config's own entries still count, as they did before a store was configured.
            config.pop("credsStore", None)
        else:
            source = f"credential helper {binary}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # docker-py warns about helpers; the errors above say it better
            found = docker.auth.resolve_authconfig(config, registry)
    except docker.errors.DockerException:
        raise RegistryError(f"registry {registry}: credential helper docker-credential-{helper} failed") from None
    if not found:
        return None
    if not helper or "ServerAddress" not in found:  # the store had nothing: an `auths` entry answered
        source = f"Docker config {path}"
    token = found.get("IdentityToken")
    if token:
        return Credentials("<token>", token, source, identity_token=True)
    username = found.get("username") or found.get("Username")
    secret = found.get("password") if "password" in found else found.get("Password")
    if not username or secret is None:
        return None
    return Credentials(username, secret, source)
