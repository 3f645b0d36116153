"""A registry HTTP API v2 client (requests): manifests, tags, deletes, with auth and bounded retries.

Credentials come from the environment (SGLSTACK_REGISTRY_USER / SGLSTACK_REGISTRY_PASSWORD) or the
Docker config (`$DOCKER_CONFIG/config.json`: `auths`, `credHelpers`, `credsStore`). Both the Basic and
the Bearer-token challenge are answered. Transient failures (5xx, 429, connection errors) are retried with
bounded backoff; 401/403/404 fail at once. Every error is one line naming the registry, never a secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from .errors import RegistryError
from .tags import DOCKER_HUB

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_MEDIA_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_MEDIA_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)

ENV_USER = "SGLSTACK_REGISTRY_USER"
ENV_PASSWORD = "SGLSTACK_REGISTRY_PASSWORD"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


class RegistryAuthError(RegistryError):
    """The registry refused our credentials (401) or our access (403)."""


class ManifestNotFound(RegistryError):
    """The repository has no manifest under that tag or digest."""


def compute_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


# ---- credentials -----------------------------------------------------------------------------------


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


def _server_key(key: str) -> str:
    key = re.sub(r"^https?://", "", key)
    return key.split("/", 1)[0]


def _config_keys(registry: str) -> tuple[str, ...]:
    return _HUB_KEYS if registry in (DOCKER_HUB, "registry-1.docker.io", "index.docker.io") else (registry,)


def _run_helper(helper: str, server: str, *, registry: str) -> Credentials | None:
    binary = f"docker-credential-{helper}"
    if not shutil.which(binary):
        raise RegistryError(
            f"registry {registry}: credential helper {binary} is configured in the Docker config but not installed"
        )
    try:
        proc = subprocess.run([binary, "get"], input=server, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise RegistryError(f"registry {registry}: credential helper {binary} timed out") from None
    if proc.returncode != 0:
        # Helpers answer "credentials not found" with a non-zero exit: no credentials, not an error.
        if "not found" in (proc.stdout + proc.stderr).lower():
            return None
        raise RegistryError(f"registry {registry}: credential helper {binary} failed (exit {proc.returncode})")
    try:
        data = json.loads(proc.stdout)
        username, secret = data["Username"], data["Secret"]
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"registry {registry}: credential helper {binary} gave no usable answer") from None
    source = f"credential helper {binary}"
    if username == "<token>":
        return Credentials("<token>", secret, source, identity_token=True)
    return Credentials(username, secret, source)


def resolve_credentials(
    registry: str, *, env: Mapping[str, str] | None = None, config_path: Path | None = None
) -> Credentials | None:
    """Credentials for `registry` (host[:port]): environment first, then the Docker config."""
    env = os.environ if env is None else env
    user, password = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if user and password is not None:
        return Credentials(user, password, f"{ENV_USER}/{ENV_PASSWORD}")
    path = config_path or docker_config_path(env)
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RegistryError(f"registry {registry}: cannot read Docker config {path}: {type(exc).__name__}") from None
    if not isinstance(config, dict):
        return None
    keys = _config_keys(registry)
    wanted = {_server_key(k) for k in keys}

    helpers = config.get("credHelpers") or {}
    for key, helper in helpers.items():
        if _server_key(key) in wanted:
            return _run_helper(helper, key, registry=registry)

    auths = config.get("auths") or {}
    entry_key = next((k for k in auths if _server_key(k) in wanted), None)
    store = config.get("credsStore")
    if store and shutil.which(f"docker-credential-{store}"):
        found = _run_helper(store, entry_key or keys[0], registry=registry)
        if found:
            return found
    if entry_key is None:
        return None
    entry = auths[entry_key] or {}
    source = f"Docker config {path}"
    if entry.get("identitytoken"):
        return Credentials("<token>", entry["identitytoken"], source, identity_token=True)
    if entry.get("auth"):
        try:
            decoded = base64.b64decode(entry["auth"]).decode()
        except (ValueError, UnicodeDecodeError):
            raise RegistryError(
                f"registry {registry}: the 'auth' entry in {path} is not base64 user:password"
            ) from None
        username, sep, secret = decoded.partition(":")
        if not sep:
            raise RegistryError(f"registry {registry}: the 'auth' entry in {path} is not base64 user:password")
        return Credentials(username, secret, source)
    if entry.get("username") and entry.get("password") is not None:
        return Credentials(entry["username"], entry["password"], source)
    return None


# ---- manifests -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    media_type: str
    body: bytes = field(repr=False)
    digest: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_MEDIA_TYPES

    def children(self) -> list[str]:
        """The manifests an index refers to (empty for an image manifest)."""
        return [m["digest"] for m in self.json().get("manifests", [])] if self.is_index else []

    def blobs(self) -> list[str]:
        """Config and layer digests of an image manifest (empty for an index)."""
        if self.is_index:
            return []
        data = self.json()
        return [data["config"]["digest"], *(layer["digest"] for layer in data.get("layers", []))]


def _media_type(resp: requests.Response, body: bytes) -> str:
    header = (resp.headers.get("Content-Type") or "").split(";")[0].strip()
    if header in MANIFEST_MEDIA_TYPES:
        return header
    try:
        declared = json.loads(body).get("mediaType")
    except (ValueError, AttributeError):
        declared = None
    return declared or header


# ---- the client ------------------------------------------------------------------------------------


def _is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    return host.strip("[]") in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


def _error_detail(resp: requests.Response) -> str:
    try:
        errors = resp.json().get("errors") or []
        if errors:
            first = errors[0]
            return f"{first.get('code', '')}: {first.get('message', '')}".strip(": ")
    except (ValueError, AttributeError):
        pass
    return resp.reason or ""


class RegistryClient:
    """One registry (host[:port]). Loopback registries are spoken to over HTTP, others over HTTPS."""

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        scheme: str | None = None,
        session: requests.Session | None = None,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        timeout_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.registry = registry
        self.api_host = "registry-1.docker.io" if registry == DOCKER_HUB else registry
        self.scheme = (
            scheme or os.environ.get("SGLSTACK_REGISTRY_SCHEME") or ("http" if _is_loopback(self.api_host) else "https")
        )
        self.credentials = credentials
        self.session = session or requests.Session()
        self.attempts, self.backoff_s, self.max_backoff_s = max(1, attempts), backoff_s, max_backoff_s
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._basic = False
        self._tokens: dict[str, str] = {}

    @classmethod
    def from_environment(cls, registry: str, **kwargs: Any) -> RegistryClient:
        return cls(registry, credentials=resolve_credentials(registry), **kwargs)

    def __repr__(self) -> str:
        return f"RegistryClient({self.registry!r})"

    # -- transport ---------------------------------------------------------------------------------

    def _fail(self, what: str) -> RegistryError:
        return RegistryError(f"registry {self.registry}: {what}")

    def _send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        data: bytes | None,
        auth: Any = None,
        allow_redirects: bool = True,
    ) -> requests.Response:
        """One request, retried on transient failures with bounded exponential backoff."""
        delay = self.backoff_s
        last = ""
        for attempt in range(1, self.attempts + 1):
            try:
                resp = self.session.request(
                    method,
                    url,
                    headers=dict(headers),
                    data=data,
                    auth=auth,
                    timeout=self.timeout_s,
                    allow_redirects=allow_redirects,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}"
                reason = str(exc.args[0]) if exc.args else ""
                if "Connection refused" in reason:
                    last += " (connection refused)"
                elif "reset" in reason.lower():
                    last += " (connection reset)"
            else:
                if resp.status_code not in TRANSIENT_STATUS:
                    return resp
                last = f"HTTP {resp.status_code} {_error_detail(resp)}".strip()
                retry_after = resp.headers.get("Retry-After", "")
                if retry_after.isdigit():
                    delay = max(delay, float(retry_after))
            if attempt < self.attempts:
                self._sleep(min(delay, self.max_backoff_s))
                delay *= 2
        path = url.split("/v2", 1)[-1]
        raise self._fail(f"{method} /v2{path} failed after {self.attempts} attempts: {last}")

    def _auth_header(self, scope: str) -> dict[str, str]:
        if scope in self._tokens:
            return {"Authorization": f"Bearer {self._tokens[scope]}"}
        return {}

    def _basic_auth(self) -> tuple[str, str] | None:
        if self._basic and self.credentials is not None:
            return (self.credentials.username, self.credentials.password)
        return None

    def _fetch_token(self, params: dict[str, str], scope: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise self._fail("Bearer challenge without a realm")
        query: dict[str, str] = {}
        if params.get("service"):
            query["service"] = params["service"]
        scope = params.get("scope") or scope
        creds = self.credentials
        if creds is not None and creds.identity_token:
            form = {
                "grant_type": "refresh_token",
                "refresh_token": creds.password,
                "client_id": "sglstack",
                "scope": scope,
                **query,
            }
            resp = self._send_token("POST", realm, data=form)
        else:
            if scope:
                query["scope"] = scope
            auth = (creds.username, creds.password) if creds is not None else None
            resp = self._send_token("GET", realm, params=query, auth=auth)
        if resp.status_code in (401, 403):
            raise self._auth_failed("the token service")
        if resp.status_code != 200:
            raise self._fail(f"token service answered HTTP {resp.status_code}")
        try:
            body = resp.json()
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError):
            raise self._fail("token service answered without a token") from None

    def _send_token(self, method: str, realm: str, **kwargs: Any) -> requests.Response:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                resp = self.session.request(method, realm, timeout=self.timeout_s, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt == self.attempts:
                    raise self._fail(f"token service unreachable: {type(exc).__name__}") from None
            else:
                if resp.status_code not in TRANSIENT_STATUS or attempt == self.attempts:
                    return resp
            self._sleep(min(delay, self.max_backoff_s))
            delay *= 2
        raise AssertionError("unreachable")

    def _auth_failed(self, by: str) -> RegistryAuthError:
        if self.credentials is None:
            return RegistryAuthError(
                f"registry {self.registry}: authentication required and no credentials found (set "
                f"{ENV_USER}/{ENV_PASSWORD} or run `docker login {self.registry}`)"
            )
        return RegistryAuthError(
            f"registry {self.registry}: {by} rejected the credentials from "
            f"{self.credentials.source} (wrong user or password?)"
        )

    def _send_authorized(
        self,
        method: str,
        url: str,
        scope: str,
        headers: Mapping[str, str],
        data: bytes | None,
        allow_redirects: bool,
    ) -> requests.Response:
        # Credentials are read at send time, not captured once: answering a challenge in `request`
        # changes them (a new bearer token for `scope`, or Basic switched on), and the retry must carry them.
        return self._send(
            method,
            url,
            headers={**headers, **self._auth_header(scope)},
            data=data,
            auth=self._basic_auth(),
            allow_redirects=allow_redirects,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        scope: str,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        allow_redirects: bool = True,
    ) -> requests.Response:
        """A /v2 request, answering one auth challenge. Returns any non-transient, non-auth response."""
        url = f"{self.scheme}://{self.api_host}/v2/{path}"
        base_headers = dict(headers or {})
        resp = self._send_authorized(method, url, scope, base_headers, data, allow_redirects)
        if resp.status_code == 401:
            challenge = resp.headers.get("WWW-Authenticate", "")
            kind, params = _parse_challenge(challenge)
            if kind == "bearer":
                self._tokens[scope] = self._fetch_token(params, scope)
            elif kind == "basic" and self.credentials is not None and not self._basic:
                self._basic = True
            else:
                raise self._auth_failed("the registry")
            resp = self._send_authorized(method, url, scope, base_headers, data, allow_redirects)
            if resp.status_code == 401:
                raise self._auth_failed("the registry")
        if resp.status_code == 403:
            raise RegistryAuthError(
                f"registry {self.registry}: access denied to {path.split('/manifests')[0]} ({_error_detail(resp)})"
            )
        return resp

    # -- API ---------------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/: the registry is up and our credentials (if it wants any) are accepted."""
        resp = self.request("GET", "", scope="")
        if resp.status_code != 200:
            raise self._fail(f"GET /v2/ answered HTTP {resp.status_code}")

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        """The manifest (image manifest or index) under a tag or digest, with its exact bytes."""
        resp = self.request(
            "GET",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull",
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}:{reference} not found")
        if resp.status_code != 200:
            raise self._fail(f"GET manifest {repo}:{reference}: HTTP {resp.status_code} {_error_detail(resp)}")
        body = resp.content
        digest = compute_digest(body)
        claimed = resp.headers.get("Docker-Content-Digest")
        if reference.startswith("sha256:") and digest != reference:
            raise self._fail(f"manifest {repo}@{reference} has content with digest {digest}")
        if claimed and claimed != digest:
            raise self._fail(f"manifest {repo}:{reference} digest header {claimed} != content {digest}")
        return Manifest(media_type=_media_type(resp, body), body=body, digest=digest)

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag points to, or None when there is no such tag (HEAD, no body)."""
        resp = self.request(
            "HEAD",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull",
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(f"HEAD manifest {repo}:{reference}: HTTP {resp.status_code}")
        digest = resp.headers.get("Docker-Content-Digest")
        return digest or self.get_manifest(repo, reference).digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        """Store manifest bytes under a tag (or their digest); return the digest the registry reports."""
        resp = self.request(
            "PUT",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull,push",
            headers={"Content-Type": media_type},
            data=body,
        )
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: PUT {repo}:{reference}: {_error_detail(resp)}")
        if resp.status_code not in (200, 201, 202):
            raise self._fail(f"PUT manifest {repo}:{reference}: HTTP {resp.status_code} {_error_detail(resp)}")
        digest = compute_digest(body)
        reported = resp.headers.get("Docker-Content-Digest")
        if reported and reported != digest:
            raise self._fail(f"PUT {repo}:{reference}: registry stored {reported}, expected {digest}")
        return digest

    def copy_manifest(self, repo: str, source: str, tags: Iterable[str]) -> Manifest:
        """Point `tags` at the manifest `source` (tag or digest) by PUTting its bytes: no blob moves."""
        manifest = self.get_manifest(repo, source)
        for tag in tags:
            self.put_manifest(repo, tag, manifest.body, manifest.media_type)
        return manifest

    def list_tags(self, repo: str) -> list[str]:
        """Every tag of `repo` (following pagination); empty when the repository does not exist yet."""
        tags: list[str] = []
        path = f"{repo}/tags/list?n=1000"
        while path:
            resp = self.request("GET", path, scope=f"repository:{repo}:pull")
            if resp.status_code == 404:
                return tags
            if resp.status_code != 200:
                raise self._fail(f"GET tags of {repo}: HTTP {resp.status_code} {_error_detail(resp)}")
            tags += resp.json().get("tags") or []
            match = re.search(r"<([^>]+)>;\s*rel=\"?next\"?", resp.headers.get("Link", ""))
            path = match.group(1).split("/v2/", 1)[-1] if match else ""
        return tags

    def get_blob(self, repo: str, digest: str) -> bytes:
        resp = self.request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: blob {repo}@{digest} not found")
        if resp.status_code != 200:
            raise self._fail(f"GET blob {repo}@{digest}: HTTP {resp.status_code}")
        if compute_digest(resp.content) != digest:
            raise self._fail(f"blob {repo}@{digest} content does not match its digest")
        return resp.content

    def image_config(self, repo: str, reference: str) -> dict[str, Any]:
        """The image config JSON (labels, created) of an image manifest, or of an index's first child."""
        manifest = self.get_manifest(repo, reference)
        if manifest.is_index:
            children = manifest.children()
            if not children:
                raise self._fail(f"index {repo}@{manifest.digest} lists no manifests")
            manifest = self.get_manifest(repo, children[0])
        return json.loads(self.get_blob(repo, manifest.blobs()[0]))

    def untag(self, repo: str, tag: str) -> None:
        """Remove one tag, keeping its manifest and every other tag of it.

        The v2 API deletes manifests, not tags: move the tag onto a throwaway manifest (the image's own
        config and no layers, so nothing is uploaded), then delete that manifest.
        """
        manifest = self.get_manifest(repo, tag)
        marker = {"io.sglstack.untag": tag}
        if manifest.is_index:
            data: dict[str, Any] = {
                "schemaVersion": 2,
                "mediaType": manifest.media_type,
                "manifests": [],
                "annotations": marker,
            }
        else:
            data = {
                "schemaVersion": 2,
                "mediaType": manifest.media_type,
                "config": manifest.json()["config"],
                "layers": [],
                "annotations": marker,
            }
        body = json.dumps(data, sort_keys=True).encode()
        throwaway = self.put_manifest(repo, tag, body, manifest.media_type)
        self.delete_manifest(repo, throwaway)

    def delete_manifest(self, repo: str, digest: str) -> None:
        """Delete a manifest by digest (removes every tag that points to it)."""
        resp = self.request("DELETE", f"{repo}/manifests/{digest}", scope=f"repository:{repo}:delete")
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}@{digest} not found")
        if resp.status_code == 405:
            raise self._fail("deleting manifests is disabled (enable storage.delete in its config)")
        if resp.status_code not in (200, 202):
            raise self._fail(f"DELETE {repo}@{digest}: HTTP {resp.status_code} {_error_detail(resp)}")
