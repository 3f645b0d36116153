"""A registry session: one registry's /v2 requests as operations, answering its auth challenge.

Both the Basic and the Bearer-token challenge are answered, with credentials from `registry_auth`.
Requests go through `registry_transport` (one retry policy, one deadline per operation, wait notices);
401/403 fail at once. Every error is one line naming the registry and the request, never a secret.
The endpoints (manifests, blobs, tags, deletes) are `RegistryClient`'s, in `client`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import Any, Self

import requests

from ..config.imageref import DOCKER_HUB
from ..core.errors import RegistryError
from ..core.inputs import loads
from .auth import ENV_PASSWORD, ENV_USER, Credentials, resolve_credentials
from .transport import Transport, error_detail


class RegistryAuthError(RegistryError):
    """The registry refused our credentials (401) or our access (403)."""



def _is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    return host.strip("[]") in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params



class RegistrySession:
    """One registry (host[:port]). Loopback registries are spoken to over HTTP, others over HTTPS.

    The keyword options after `session` configure its `Transport`: attempts and backoff of the retry
    policy, the deadline of one operation (`timeout_s`, default $SGLSTACK_REGISTRY_TIMEOUT or 60 s), the
    notices while waiting.
    """

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        scheme: str | None = None,
        session: requests.Session | None = None,
        **transport: Any,
    ) -> None:
        self.registry = registry
        self.api_host = "registry-1.docker.io" if registry == DOCKER_HUB else registry
        self.scheme = (
            scheme or os.environ.get("SGLSTACK_REGISTRY_SCHEME") or ("http" if _is_loopback(self.api_host) else "https")
        )
        self.credentials = credentials
        self.transport = Transport(registry, session=session, **transport)
        self._basic = False
        self._tokens: dict[str, str] = {}

    @classmethod
    def from_environment(cls, registry: str, **kwargs: Any) -> Self:
        return cls(registry, credentials=resolve_credentials(registry), **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.registry!r})"

    @property
    def timeout_s(self) -> float:
        """The deadline of one operation, in seconds."""
        return self.transport.timeout_s

    def budget(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Every operation inside ends within `seconds` from now (see `Transport.budget`)."""
        return self.transport.budget(seconds)

    def _fail(self, what: str) -> RegistryError:
        return RegistryError(f"registry {self.registry}: {what}")

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        return self.transport.send(method, url, **kwargs)

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
        try:
            if creds is not None and creds.identity_token:
                form = {
                    "grant_type": "refresh_token",
                    "refresh_token": creds.password,
                    "client_id": "sglstack",
                    "scope": scope,
                    **query,
                }
                resp = self._send("POST", realm, data=form)
            else:
                if scope:
                    query["scope"] = scope
                auth = (creds.username, creds.password) if creds is not None else None
                resp = self._send("GET", realm, params=query, auth=auth)
        except RegistryError as exc:
            raise self._fail(f"token service {realm.split('?')[0]}: {str(exc).split(': ', 1)[-1]}") from None
        if resp.status_code in (401, 403):
            raise self._auth_failed("the token service")
        if resp.status_code != 200:
            raise self._fail(f"token service answered HTTP {resp.status_code}")
        try:
            body = loads(resp.content)
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError, TypeError):
            raise self._fail("token service answered without a token") from None

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

    def _send_authorized(self, method: str, url: str, scope: str, headers: Mapping[str, str], data: Any,
                         allow_redirects: bool, stream: bool = False) -> requests.Response:
        # Credentials are read at send time, not captured once: answering a challenge in `request`
        # changes them (a new bearer token for `scope`, or Basic switched on), and the retry must carry them.
        return self._send(method, url, headers={**headers, **self._auth_header(scope)}, data=data,
                          auth=self._basic_auth(), allow_redirects=allow_redirects, stream=stream)

    def request(self, method: str, path: str, *, scope: str, what: str | None = None,
                headers: Mapping[str, str] | None = None, data: Any = None, allow_redirects: bool = True,
                stream: bool = False, extra_s: float = 0.0) -> requests.Response:
        """A /v2 request as one operation, answering one auth challenge.

        Returns any non-transient, non-auth response; `what` names it in waits and errors. `data` is bytes, or
        a file-like body streamed from where it stands (rewound there to answer the challenge); `extra_s` gives
        its operation that much more time (a large body).
        """
        url = f"{self.scheme}://{self.api_host}/v2/{path}"
        base_headers = dict(headers or {})
        start = data.tell() if hasattr(data, "seek") and hasattr(data, "tell") else None
        with self.transport.operation(what or f"{method} /v2/{path.split('?')[0]}", extra_s):
            resp = self._send_authorized(method, url, scope, base_headers, data, allow_redirects, stream)
            if resp.status_code == 401:
                challenge = resp.headers.get("WWW-Authenticate", "")
                kind, params = _parse_challenge(challenge)
                if kind == "bearer":
                    self._tokens[scope] = self._fetch_token(params, scope)
                elif kind == "basic" and self.credentials is not None and not self._basic:
                    self._basic = True
                else:
                    raise self._auth_failed("the registry")
                if start is not None:
                    data.seek(start)
                resp = self._send_authorized(method, url, scope, base_headers, data, allow_redirects, stream)
                if resp.status_code == 401:
                    raise self._auth_failed("the registry")
        if resp.status_code == 403:
            raise RegistryAuthError(
                f"registry {self.registry}: access denied to {path.split('/manifests')[0]} ({error_detail(resp)})"
            )
        return resp

    def _json(self, resp: requests.Response, what: str, body: bytes | None = None) -> Any:
        """The body (`body`: as already read) as JSON, or one line saying which request answered something else."""
        content = resp.content if body is None else body
        try:
            return loads(content)
        except ValueError:
            kind = (resp.headers.get("Content-Type") or "no content type").split(";")[0]
            raise self._fail(
                f"{what} answered HTTP {resp.status_code} with a body that is not JSON "
                f"({kind}, {len(content)} bytes)"
            ) from None
