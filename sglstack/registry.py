"""A registry HTTP API v2 client (requests): manifests, tags, deletes, with auth, retries and deadlines.

Both the Basic and the Bearer-token challenge are answered, with credentials from `registry_auth`.
Transient failures (5xx, 429, connection errors, resets) are retried by one policy mounted on the HTTP
session (urllib3 `Retry`, bounded exponential backoff); 401/403/404 fail at once. Every operation (one API
call: its auth round trips, its retries and their waits) has one total deadline, and while it waits longer
than a few seconds the user is told what for: a registry that accepts the connection and never answers
costs at most the deadline, never silent minutes. Every error is one line naming the registry and the
request, never a secret.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from .errors import RegistryError
from .registry_auth import ENV_PASSWORD, ENV_USER, Credentials, resolve_credentials
from .tags import DOCKER_HUB, is_digest
from .ui import console

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_MEDIA_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_MEDIA_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
ENV_TIMEOUT = "SGLSTACK_REGISTRY_TIMEOUT"  # seconds one registry operation may take, retries included
DEFAULT_TIMEOUT_S = 60.0


class RegistryAuthError(RegistryError):
    """The registry refused our credentials (401) or our access (403)."""


class ManifestNotFound(RegistryError):
    """The repository has no manifest under that tag or digest."""


def compute_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


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


# ---- one operation: its deadline, its retries, what it waits for ---------------------------------------


@dataclass
class _Operation:
    """One API call in flight: what it is (for the user), when it must end, why its attempts failed."""

    what: str
    deadline: float  # time.monotonic()
    total_s: float
    sleep: Callable[[float], None]
    failures: list[str] = field(default_factory=list)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


# The operation of this thread. The retry policy lives on the (shared) adapter; it finds the deadline
# and the injectable sleep of the call it is retrying here, without the adapter holding per-call state.
_CURRENT: contextvars.ContextVar[_Operation | None] = contextvars.ContextVar("sglstack_registry_op", default=None)


class _DeadlineTimeout(Timeout):
    """Connect and read timeouts never reach past the operation's deadline, whichever attempt this is.

    urllib3 clones the timeout for each attempt and asks it for the values when it connects and reads,
    so the values shrink as the deadline nears.
    """

    def __init__(self, deadline: float, connect: float, read: float) -> None:
        super().__init__(connect=connect, read=read)
        self.deadline, self.connect_cap, self.read_cap = deadline, connect, read

    def clone(self) -> _DeadlineTimeout:
        return _DeadlineTimeout(self.deadline, self.connect_cap, self.read_cap)

    def _left(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    @property
    def connect_timeout(self) -> float:
        return min(self.connect_cap, self._left())

    @property
    def read_timeout(self) -> float:
        return min(self.read_cap, self._left())


class _RetryPolicy(Retry):
    """urllib3's Retry, with the backoff `backoff * 2**(n-1)` (capped) from the first retry on, each
    failure noted on the operation, the sleep injectable, and no retry once the deadline has passed."""

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> _RetryPolicy:
        op = _CURRENT.get()
        response, error = kwargs.get("response"), kwargs.get("error")
        if op is not None:
            op.failures.append(_failure_reason(response, error))
        new = super().increment(method, url, *args, **kwargs)
        if op is not None and op.remaining() <= 0:
            raise MaxRetryError(kwargs.get("_pool"), url or "", error or ValueError("deadline"))  # type: ignore[arg-type]
        return new

    def get_backoff_time(self) -> float:
        failed = len(self.history)
        if failed == 0:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (failed - 1)))

    def sleep(self, response: Any = None) -> None:
        delay = self.get_backoff_time()
        retry_after = self.get_retry_after(response) if response is not None else None
        if retry_after:
            delay = min(max(delay, retry_after), self.backoff_max)
        op = _CURRENT.get()
        if op is None:
            time.sleep(delay)
            return
        delay = min(delay, max(0.0, op.remaining()))
        if delay > 0:
            op.sleep(delay)


def _failure_reason(response: Any, error: BaseException | None) -> str:
    if response is not None and getattr(response, "status", None):
        return f"HTTP {response.status}"
    text = f"{type(error).__name__}: {error}" if error else "no answer"
    if "refused" in text.lower():
        return "connection refused"
    if "reset" in text.lower() or "aborted" in text.lower():
        return "connection reset"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return "no answer (timed out)"
    if "RemoteDisconnected" in text or "closed connection" in text.lower():
        return "connection closed without an answer"
    return type(error).__name__ if error else "no answer"


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


def default_timeout_s() -> float:
    """SGLSTACK_REGISTRY_TIMEOUT (seconds per operation), or 60."""
    value = os.environ.get(ENV_TIMEOUT, "")
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise RegistryError(f"{ENV_TIMEOUT}={value!r} is not a positive number of seconds")
    return seconds


# ---- the client ------------------------------------------------------------------------------------


class RegistryClient:
    """One registry (host[:port]). Loopback registries are spoken to over HTTP, others over HTTPS.

    `timeout_s` bounds each operation as a whole (connect, read, retries and backoff), default
    $SGLSTACK_REGISTRY_TIMEOUT or 60 s; one attempt may use at most `attempt_timeout_s` of it (default half),
    so that a connection that hangs once still leaves time for a retry.
    """

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
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
        connect_timeout_s: float = 10.0,
        notice_every_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.api_host = "registry-1.docker.io" if registry == DOCKER_HUB else registry
        self.scheme = (
            scheme or os.environ.get("SGLSTACK_REGISTRY_SCHEME") or ("http" if _is_loopback(self.api_host) else "https")
        )
        self.credentials = credentials
        self.attempts = max(1, attempts)
        self.timeout_s = timeout_s if timeout_s is not None else default_timeout_s()
        self.attempt_timeout_s = attempt_timeout_s or max(self.timeout_s / 2, min(self.timeout_s, 1.0))
        self.connect_timeout_s = connect_timeout_s
        self.notice_every_s = notice_every_s or min(10.0, max(1.0, self.timeout_s / 6))
        self._sleep = sleep
        self._notify = notify or (lambda line: console(stderr=True).print(line, markup=False, highlight=False))
        self._budget: float | None = None
        self.session = session or requests.Session()
        policy = _RetryPolicy(
            total=self.attempts - 1,
            connect=None,
            read=None,
            status=None,
            other=None,
            redirect=False,  # requests follows redirects itself
            allowed_methods=frozenset({"GET", "HEAD", "PUT", "DELETE", "POST"}),  # all idempotent here
            status_forcelist=TRANSIENT_STATUS,
            backoff_factor=backoff_s,
            backoff_max=max_backoff_s,
            raise_on_status=False,  # the last answer comes back, and is reported with the attempts
            respect_retry_after_header=True,
        )
        adapter = HTTPAdapter(max_retries=policy)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self._basic = False
        self._tokens: dict[str, str] = {}

    @classmethod
    def from_environment(cls, registry: str, **kwargs: Any) -> RegistryClient:
        return cls(registry, credentials=resolve_credentials(registry), **kwargs)

    def __repr__(self) -> str:
        return f"RegistryClient({self.registry!r})"

    # -- deadlines ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def budget(self, seconds: float) -> Iterator[None]:
        """Every operation inside ends within `seconds` from now, whatever its own deadline says.

        For work that must finish in bounded time as a whole, e.g. putting tags back after a signal.
        """
        outer, self._budget = self._budget, time.monotonic() + seconds
        if outer is not None:
            self._budget = min(self._budget, outer)
        try:
            yield
        finally:
            self._budget = outer

    @contextlib.contextmanager
    def _operation(self, what: str) -> Iterator[_Operation]:
        current = _CURRENT.get()
        if current is not None:  # a token fetch inside a request: the request's deadline covers it
            yield current
            return
        deadline = time.monotonic() + self.timeout_s
        if self._budget is not None:
            deadline = min(deadline, self._budget)
        op = _Operation(what=what, deadline=deadline, total_s=max(0.0, deadline - time.monotonic()), sleep=self._sleep)
        done = threading.Event()
        started = time.monotonic()

        def tell() -> None:
            while not done.wait(self.notice_every_s):
                self._notify(
                    f"waiting for registry {self.registry} ({what}), "
                    f"{time.monotonic() - started:.0f} s of {op.total_s:.0f} s"
                )

        watcher = threading.Thread(target=tell, name="sglstack-registry-wait", daemon=True)
        token = _CURRENT.set(op)
        watcher.start()
        try:
            yield op
        finally:
            done.set()
            _CURRENT.reset(token)

    # -- transport ---------------------------------------------------------------------------------

    def _fail(self, what: str) -> RegistryError:
        return RegistryError(f"registry {self.registry}: {what}")

    def _gave_up(self, op: _Operation, last: str) -> RegistryError:
        attempts = max(1, len(op.failures))
        if op.remaining() <= 0.05:
            return self._fail(
                f"{op.what}: no answer within {op.total_s:.0f} s ({attempts} attempt(s), last: {last})"
            )
        return self._fail(f"{op.what} failed after {attempts} attempts: {last}")

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One request through the retry policy; transient failures left after it become one error."""
        op = _CURRENT.get()
        assert op is not None, "registry requests run inside an operation"
        # requests hands a urllib3 Timeout object through to urllib3 as it is (HTTPAdapter.send).
        timeout = cast(Any, _DeadlineTimeout(op.deadline, self.connect_timeout_s, self.attempt_timeout_s))
        try:
            resp = self.session.request(method, url, timeout=timeout, **kwargs)
        except requests.RequestException as exc:
            last = op.failures[-1] if op.failures else _failure_reason(None, exc)
            raise self._gave_up(op, last) from None
        if resp.status_code in TRANSIENT_STATUS:
            raise self._gave_up(op, f"HTTP {resp.status_code} {_error_detail(resp)}".strip())
        return resp

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
            body = resp.json()
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError):
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
        what: str | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        allow_redirects: bool = True,
    ) -> requests.Response:
        """A /v2 request as one operation, answering one auth challenge.

        Returns any non-transient, non-auth response; `what` names it in waits and errors.
        """
        url = f"{self.scheme}://{self.api_host}/v2/{path}"
        base_headers = dict(headers or {})
        with self._operation(what or f"{method} /v2/{path.split('?')[0]}"):
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

    def _json(self, resp: requests.Response, what: str) -> Any:
        """The body as JSON, or one line saying which request answered something else."""
        try:
            return json.loads(resp.content)
        except ValueError:
            kind = (resp.headers.get("Content-Type") or "no content type").split(";")[0]
            raise self._fail(
                f"{what} answered HTTP {resp.status_code} with a body that is not JSON "
                f"({kind}, {len(resp.content)} bytes)"
            ) from None

    # -- API ---------------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/: the registry is up and our credentials (if it wants any) are accepted."""
        resp = self.request("GET", "", scope="", what="GET /v2/")
        if resp.status_code != 200:
            raise self._fail(f"GET /v2/ answered HTTP {resp.status_code}")

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        """The manifest (image manifest or index) under a tag or digest, with its exact bytes."""
        what = f"GET manifest {repo}{_sep(reference)}{reference}"
        resp = self.request(
            "GET",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull",
            what=what,
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}{_sep(reference)}{reference} not found")
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code} {_error_detail(resp)}")
        body = resp.content
        digest = compute_digest(body)
        claimed = resp.headers.get("Docker-Content-Digest")
        if is_digest(reference) and digest != reference:
            raise self._fail(f"manifest {repo}@{reference} has content with digest {digest}")
        if claimed and claimed != digest:
            raise self._fail(f"manifest {repo}:{reference} digest header {claimed} != content {digest}")
        if not isinstance(self._json(resp, what), dict):
            raise self._fail(f"{what} answered a manifest that is not a JSON object")
        return Manifest(media_type=_media_type(resp, body), body=body, digest=digest)

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag points to, or None when there is no such tag (HEAD, no body)."""
        what = f"HEAD manifest {repo}{_sep(reference)}{reference}"
        resp = self.request(
            "HEAD",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull",
            what=what,
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code}")
        digest = resp.headers.get("Docker-Content-Digest")
        return digest if digest and is_digest(digest) else self.get_manifest(repo, reference).digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        """Store manifest bytes under a tag (or their digest); return the digest the registry reports."""
        what = f"PUT manifest {repo}{_sep(reference)}{reference}"
        resp = self.request(
            "PUT",
            f"{repo}/manifests/{reference}",
            scope=f"repository:{repo}:pull,push",
            what=what,
            headers={"Content-Type": media_type},
            data=body,
        )
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {what}: {_error_detail(resp)}")
        if resp.status_code not in (200, 201, 202):
            raise self._fail(f"{what}: HTTP {resp.status_code} {_error_detail(resp)}")
        digest = compute_digest(body)
        reported = resp.headers.get("Docker-Content-Digest")
        if reported and reported != digest:
            raise self._fail(f"{what}: registry stored {reported}, expected {digest}")
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
            what = f"GET /v2/{path.split('?')[0]}"
            resp = self.request("GET", path, scope=f"repository:{repo}:pull", what=what)
            if resp.status_code == 404:
                return tags
            if resp.status_code != 200:
                raise self._fail(f"{what}: HTTP {resp.status_code} {_error_detail(resp)}")
            data = self._json(resp, what)
            page = data.get("tags") if isinstance(data, dict) else None
            if page is not None and not (isinstance(page, list) and all(isinstance(t, str) for t in page)):
                raise self._fail(f"{what} answered JSON without a list of tags")
            tags += page or []
            match = re.search(r"<([^>]+)>;\s*rel=\"?next\"?", resp.headers.get("Link", ""))
            path = match.group(1).split("/v2/", 1)[-1] if match else ""
        return tags

    def get_blob(self, repo: str, digest: str) -> bytes:
        what = f"GET blob {repo}@{digest}"
        resp = self.request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", what=what)
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: blob {repo}@{digest} not found")
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code}")
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
        blob = manifest.blobs()[0]
        try:
            config = json.loads(self.get_blob(repo, blob))
        except ValueError:
            raise self._fail(f"the image config {repo}@{blob} is not JSON") from None
        if not isinstance(config, dict):
            raise self._fail(f"the image config {repo}@{blob} is not a JSON object")
        return config

    def untag(self, repo: str, tag: str) -> None:
        """Remove one tag, keeping its manifest and every other tag of it.

        Registries of the OCI distribution spec 1.1 delete a tag by name. Older ones (distribution 2.x)
        answer 400 to that: then move the tag onto a throwaway manifest (the image's own config and no
        layers, so nothing is uploaded) and delete that manifest, which only this tag points to.
        A registry with deletes disabled answers 405 and keeps the tag (nothing is changed then).
        """
        what = f"DELETE manifest {repo}:{tag}"
        resp = self.request("DELETE", f"{repo}/manifests/{tag}", scope=f"repository:{repo}:delete", what=what)
        if resp.status_code in (200, 202):
            return
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}:{tag} not found")
        if resp.status_code == 405:
            raise self._fail(f"{what}: deleting is disabled on this registry (enable storage.delete)")
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
        what = f"DELETE manifest {repo}@{digest}"
        resp = self.request("DELETE", f"{repo}/manifests/{digest}", scope=f"repository:{repo}:delete", what=what)
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}@{digest} not found")
        if resp.status_code == 405:
            raise self._fail(f"{what}: deleting manifests is disabled (enable storage.delete in its config)")
        if resp.status_code not in (200, 202):
            raise self._fail(f"{what}: HTTP {resp.status_code} {_error_detail(resp)}")


def _sep(reference: str) -> str:
    return "@" if is_digest(reference) else ":"
