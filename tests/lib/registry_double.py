"""The one registry stand-in of the tests: the HTTP API v2 a registry speaks (OCI distribution spec 1.1, referrers
API included), its state in dicts, every request recorded, and what a test needs a registry to do wrong.

No registry with the referrers API can be run here (distribution 2.8 has none; zot, distribution 3 and Harbor are
on neither Debian's nor PyPI's indexes), so this double answers the exact 1.1 requests clients send: blob uploads
(POST, chunks by PATCH as distribution keeps them, then PUT ?digest=), blob HEAD/GET, manifest PUT/HEAD/GET/DELETE
by tag or digest (a PUT of a manifest with a `subject` answers the `OCI-Subject` header), tag listing, and
`GET /v2/<name>/referrers/<digest>` answering an image index of the referring manifests' descriptors
(`artifactType`, `annotations`), with `OCI-Filters-Applied` for an `artifactType` filter. The real distribution
registry's cases are tests/e2e's.

- `answers`: "METHOD /path?query" -> answers `(status, headers, body)` or a callable given the request handler
  (a server that hangs, an endless body); each answer once, the last one from then on. With `answers`, anything
  not scripted gets `fallback` (404, no body; a test may set another): a scripted registry; without, the
  registry's own state answers.
- `auth`: None (open), "bearer" (a token from `GET /token`, as Docker Hub asks) or `(user, password)` (Basic);
  `redirect_blobs`: an authorized blob GET is redirected to a blob store (`/store/`, as distribution on S3 does),
  which records the Authorization that reached it in `store_auth`.
- `faults`: "no-patch" (no chunked uploads), "expire-token-once" (a 401 Bearer challenge in an upload),
  "take-half-then-drop" (a chunk half kept, no answer), "slow-answer" (a chunk answered after 1 s),
  "short-range" (a Range one byte short); downloads: "flip", "longer", "shorter", "trickle", "no-length".
- What was asked: `requests` ("METHOD /path", no query), `log` (each `Request` whole), `seen` (method, path with
  query, Authorization, Accept, Content-Type, body).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from httpserve import ThreadedServer

from sglstack.registry.client import RegistryClient

INDEX = "application/vnd.oci.image.index.v1+json"
ROUTE = re.compile(r"^/v2/(?P<name>.+?)/(?P<kind>blobs/uploads|blobs|manifests|referrers|tags)/?(?P<ref>[^/]*)$")
Answer = tuple[int, dict[str, str], bytes] | Callable[[BaseHTTPRequestHandler], None]


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query
    headers: dict[str, str]
    body: bytes


class RegistryDouble:
    def __init__(self, answers: dict[str, list[Answer]] | None = None, *, auth: str | tuple[str, str] | None = None,
                 token: str = "t2", redirect_blobs: bool = False) -> None:
        self.answers = {k: list(v) for k, v in (answers or {}).items()}
        self.fallback: Answer | None = (404, {}, b"") if answers is not None else None
        self.auth, self.token, self.redirect_blobs = auth, token, redirect_blobs
        self.blobs: dict[tuple[str, str], bytes] = {}  # (name, digest) -> bytes
        self.manifests: dict[tuple[str, str], tuple[bytes, str]] = {}  # (name, digest) -> (body, media type)
        self.tags: dict[tuple[str, str], str] = {}
        self.uploads: dict[str, bytearray] = {}
        self.faults: set[str] = set()
        self.requests: list[str] = []
        self.log: list[Request] = []
        self.store_auth: list[str | None] = []
        # What a registry without the API answers to `referrers` (400, 404, 405, 501), None: it has the API;
        # and whether a PUT of a manifest with a `subject` says it indexed it (`OCI-Subject`).
        self.referrers_status: int | None = None
        # A 200 answer to `referrers` as a test gives it (body, content type): a proxy's HTML, odd JSON.
        self.referrers_answer: tuple[bytes, str] | None = None
        self.subject_header = True
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self.served = ThreadedServer(_handler(self), poll_interval=0.02)
        self.port = self.served.port

    @property
    def host(self) -> str:
        return self.served.host

    @property
    def seen(self) -> list[tuple[str, str, str | None, str | None, str | None, bytes]]:
        return [(r.method, r.path, r.headers.get("Authorization"), r.headers.get("Accept"),
                 r.headers.get("Content-Type"), r.body) for r in self.log]

    def client(self, **kw: Any) -> RegistryClient:
        return RegistryClient(self.host, **{"sleep": lambda _s: None, "attempts": 1, **kw})

    def close(self) -> None:
        self.served.close()

    def __enter__(self) -> RegistryDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def store(self, name: str, body: bytes, media_type: str, tag: str | None = None) -> str:
        """Keep manifest bytes as they are (no check, as no real registry would take them), under `tag` too."""
        digest = _digest(body)
        self.manifests[(name, digest)] = (body, media_type)
        if tag:
            self.tags[(name, tag)] = digest
        return digest

    def scripted(self, key: str) -> Answer | None:
        script = self.answers.get(key)
        if not script:
            return self.fallback
        return script.pop(0) if len(script) > 1 else script[0]

    def authorized(self, header: str | None) -> bool:
        if self.auth is None:
            return True
        if self.auth == "bearer":
            return header == f"Bearer {self.token}"
        user, password = self.auth
        return header == "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# long: the request handler, one method per route, all closing over the one registry
def _handler(registry: RegistryDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK wait per answer

        def log_message(self, *args: Any) -> None:
            pass

        def handle(self) -> None:  # a client that stops reading at the first byte over closes on us: as it should
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                super().handle()

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  length: bool = True) -> None:
            self.send_response(code)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if not length:
                self.send_header("Connection", "close")
            elif "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, code: int, err: str, message: str | None = None) -> None:
            self._send(code, json.dumps({"errors": [{"code": err, "message": message or err.lower()}]}).encode(),
                       {"Content-Type": "application/json"})

        def _route(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = urlparse(self.path)
            with registry.lock:
                registry.requests.append(f"{self.command} {url.path}")
                registry.log.append(Request(self.command, self.path, dict(self.headers.items()), body))
            answer = registry.scripted(f"{self.command} {self.path}")
            if callable(answer):
                return answer(self)
            if answer is not None:
                return self._send(answer[0], answer[2], answer[1])
            if url.path == "/token":
                return self._send(200, json.dumps({"token": registry.token}).encode(),
                                  {"Content-Type": "application/json"})
            if url.path.startswith("/store/"):
                registry.store_auth.append(self.headers.get("Authorization"))
                found = [b for (_n, d), b in registry.blobs.items() if d == url.path.rsplit("/", 1)[-1]]
                return self._send(200, found[0]) if found else self._error(404, "BLOB_UNKNOWN")
            if not registry.authorized(self.headers.get("Authorization")):
                return self._challenge()
            if url.path == "/v2/":
                return self._send(200, b"{}", {"Content-Type": "application/json"})
            match = ROUTE.match(url.path)
            if not match:
                return self._error(404, "NOT_FOUND")
            handler = getattr(self, f"_{match['kind'].replace('/', '_')}_{self.command.lower()}", None)
            if handler is None:
                return self._error(405, "UNSUPPORTED")
            return handler(match["name"], match["ref"], parse_qs(url.query), body)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _route

        def _challenge(self) -> None:
            realm = f'Bearer realm="http://{registry.host}/token",service="r"' if registry.auth == "bearer" \
                else 'Basic realm="private"'
            self._send(401, headers={"WWW-Authenticate": realm})

        def _blobs_uploads_post(self, name: str, ref: str, query: dict, body: bytes) -> None:
            uid = str(next(registry._ids))
            registry.uploads[uid] = bytearray()
            self._send(202, headers={"Location": f"/v2/{name}/blobs/uploads/{uid}?_state=s0",
                                     "Docker-Upload-UUID": uid})

        def _blobs_uploads_patch(self, name: str, uid: str, query: dict, body: bytes) -> None:
            if "no-patch" in registry.faults:
                return self._error(405, "UNSUPPORTED", "chunked uploads")
            if "expire-token-once" in registry.faults and self.headers.get("Authorization") != \
                    f"Bearer {registry.token}":
                registry.faults.discard("expire-token-once")
                return self._send(401, headers={"WWW-Authenticate": f'Bearer realm="http://{registry.host}/token"'})
            held = registry.uploads[uid]  # Content-Range is not checked: distribution 2.8 appends what comes
            if "take-half-then-drop" in registry.faults and len(held) > 0:
                registry.faults.discard("take-half-then-drop")
                held += body[:len(body) // 2]
                self.close_connection = True  # no answer: the client's retry sends the chunk again
                return None
            if "slow-answer" in registry.faults:
                time.sleep(1.0)  # as a registry writing a chunk to slow storage, or a slow link's last bytes
            held += body
            end = len(held) - 1 - (1 if "short-range" in registry.faults else 0)
            return self._send(202, headers={"Range": f"0-{end}",
                                            "Location": f"/v2/{name}/blobs/uploads/{uid}?_state=s{len(held)}"})

        def _blobs_uploads_put(self, name: str, uid: str, query: dict, body: bytes) -> None:
            held, want = bytes(registry.uploads.pop(uid, bytearray()) + body), query.get("digest", [""])[0]
            if _digest(held) != want:
                return self._error(400, "DIGEST_INVALID", "digest did not match")
            registry.blobs[(name, want)] = held
            return self._send(201, headers={"Location": f"/v2/{name}/blobs/{want}", "Docker-Content-Digest": want})

        def _blobs_uploads_delete(self, name: str, uid: str, query: dict, body: bytes) -> None:
            registry.uploads.pop(uid, None)
            self._send(204)

        def _blobs_head(self, name: str, ref: str, query: dict, body: bytes) -> None:
            blob = registry.blobs.get((name, ref))
            if blob is None:
                return self._error(404, "BLOB_UNKNOWN")
            return self._send(200, blob, {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref})

        def _blobs_get(self, name: str, ref: str, query: dict, body: bytes) -> None:
            blob = registry.blobs.get((name, ref))
            if blob is None:
                return self._error(404, "BLOB_UNKNOWN")
            if registry.redirect_blobs:
                return self._send(307, headers={"Location": f"http://{registry.host}/store/{ref}"})
            faults = registry.faults
            blob = blob[:-1] + bytes([blob[-1] ^ 1]) if "flip" in faults else blob
            blob = blob + b"x" * 5000 if "longer" in faults else blob
            blob = blob[:-10] if "shorter" in faults else blob
            if "trickle" in faults:  # headers at once, then 512 bytes every 50 ms
                self.send_response(200)
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                for at in range(0, len(blob), 512):
                    self.wfile.write(blob[at:at + 512])
                    time.sleep(0.05)
                return None
            return self._send(200, blob, {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref},
                              length="no-length" not in faults)

        def _resolve(self, name: str, ref: str) -> str | None:
            return ref if ref.startswith("sha256:") else registry.tags.get((name, ref))

        def _manifests_put(self, name: str, ref: str, query: dict, body: bytes) -> None:
            digest = _digest(body)
            if ref.startswith("sha256:") and ref != digest:
                return self._error(400, "DIGEST_INVALID")
            data = json.loads(body)
            registry.manifests[(name, digest)] = (body, self.headers.get("Content-Type") or data["mediaType"])
            if not ref.startswith("sha256:"):
                registry.tags[(name, ref)] = digest
            headers = {"Location": f"/v2/{name}/manifests/{digest}", "Docker-Content-Digest": digest}
            if registry.subject_header and (data.get("subject") or {}).get("digest"):
                headers["OCI-Subject"] = data["subject"]["digest"]
            return self._send(201, headers=headers)

        def _manifests_get(self, name: str, ref: str, query: dict, body: bytes) -> None:
            digest = self._resolve(name, ref)
            found = registry.manifests.get((name, digest or ""))
            if found is None:
                return self._error(404, "MANIFEST_UNKNOWN")
            return self._send(200, found[0], {"Content-Type": found[1], "Docker-Content-Digest": digest or ""})

        _manifests_head = _manifests_get

        def _manifests_delete(self, name: str, ref: str, query: dict, body: bytes) -> None:
            if not ref.startswith("sha256:"):
                if registry.tags.pop((name, ref), None) is None:
                    return self._error(404, "MANIFEST_UNKNOWN")
                return self._send(202)
            if registry.manifests.pop((name, ref), None) is None:
                return self._error(404, "MANIFEST_UNKNOWN")
            for key in [k for k, v in registry.tags.items() if k[0] == name and v == ref]:
                del registry.tags[key]
            return self._send(202)

        def _tags_get(self, name: str, ref: str, query: dict, body: bytes) -> None:
            tags = sorted(t for (n, t) in registry.tags if n == name)
            self._send(200, json.dumps({"name": name, "tags": tags}).encode(), {"Content-Type": "application/json"})

        def _referrers_get(self, name: str, ref: str, query: dict, body: bytes) -> None:
            if registry.referrers_status is not None:
                return self._error(registry.referrers_status, "UNSUPPORTED")
            if registry.referrers_answer is not None:
                answer, content_type = registry.referrers_answer
                return self._send(200, answer, {"Content-Type": content_type})
            wanted = query.get("artifactType", [None])[0]
            found = [d for d in (_referrer(n, digest, b, media) for (n, digest), (b, media)
                                 in sorted(registry.manifests.items()) if n == name)
                     if d and d.pop("subject") == ref and (not wanted or d["artifactType"] == wanted)]
            headers = {"Content-Type": INDEX, **({"OCI-Filters-Applied": "artifactType"} if wanted else {})}
            return self._send(200, json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": found}).encode(),
                              headers)

    return Handler


def _referrer(name: str, digest: str, body: bytes, media: str) -> dict[str, Any] | None:
    """The descriptor of a manifest that names a subject (its digest under "subject"); None for any other."""
    try:  # a manifest stored as bytes by a test (not JSON, no dict subject) is no referrer
        data = json.loads(body)
        subject = data.get("subject")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(subject, dict):
        return None
    artifact_type = data.get("artifactType") or data.get("config", {}).get("mediaType")
    return {"mediaType": media, "digest": digest, "size": len(body), "artifactType": artifact_type,
            "annotations": data.get("annotations") or {}, "subject": subject.get("digest")}
