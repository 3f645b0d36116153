"""A registry double that speaks the OCI distribution spec 1.1 HTTP interface, referrers API included.

No registry with the referrers API can be run here (distribution 2.8 has none; zot, distribution 3 and
Harbor are on neither Debian's nor PyPI's indexes), so this double answers the exact 1.1 requests the
client sends: blob upload (POST, then PUT ?digest=), blob HEAD/GET, manifest PUT/HEAD/GET/DELETE by tag
or digest (a PUT of a manifest with a `subject` answers the `OCI-Subject` header), tag listing, and
`GET /v2/<name>/referrers/<digest>` answering an image index of the referring manifests' descriptors
(`artifactType`, `annotations`), with `OCI-Filters-Applied` for an `artifactType` filter.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from engine_refs import free_port
from httpserve import ThreadedServer

INDEX = "application/vnd.oci.image.index.v1+json"
ROUTE = re.compile(r"^/v2/(?P<name>.+?)/(?P<kind>blobs/uploads|blobs|manifests|referrers|tags)/?(?P<ref>[^/]*)$")


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class ReferrersRegistry:
    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[bytes, str]] = {}  # (name, digest) -> (body, media type)
        self.tags: dict[tuple[str, str], str] = {}
        self.requests: list[str] = []
        # What a registry without the API answers to `referrers` (400, 404, 405, 501), None: it has the API;
        # and whether a PUT of a manifest with a `subject` says it indexed it (`OCI-Subject`).
        self.referrers_status: int | None = None
        # A 200 answer to `referrers` as a test gives it (body, content type): a proxy's HTML, odd JSON.
        self.referrers_answer: tuple[bytes, str] | None = None
        self.subject_header = True
        self.port = free_port()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _error(self, code: int, err: str) -> None:
                self._send(code, json.dumps({"errors": [{"code": err, "message": err.lower()}]}).encode(),
                           {"Content-Type": "application/json"})

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _route(self) -> None:
                url = urlparse(self.path)
                registry.requests.append(f"{self.command} {url.path}")
                if url.path == "/v2/":
                    return self._send(200, b"{}", {"Content-Type": "application/json"})
                match = ROUTE.match(url.path)
                if not match:
                    return self._error(404, "NOT_FOUND")
                name, kind, ref = match["name"], match["kind"], match["ref"]
                query = parse_qs(url.query)
                handler = getattr(self, f"_{kind.replace('/', '_')}_{self.command.lower()}", None)
                if handler is None:
                    return self._error(405, "UNSUPPORTED")
                return handler(name, ref, query)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _route

            def _blobs_uploads_post(self, name, ref, query):
                self._body()
                self._send(202, headers={"Location": f"/v2/{name}/blobs/uploads/{uuid.uuid4()}",
                                         "Docker-Upload-UUID": "x"})

            def _blobs_uploads_put(self, name, ref, query):
                body, want = self._body(), query.get("digest", [""])[0]
                if _digest(body) != want:
                    return self._error(400, "DIGEST_INVALID")
                registry.blobs[(name, want)] = body
                self._send(201, headers={"Location": f"/v2/{name}/blobs/{want}", "Docker-Content-Digest": want})

            def _blobs_get(self, name, ref, query):
                body = registry.blobs.get((name, ref))
                if body is None:
                    return self._error(404, "BLOB_UNKNOWN")
                self._send(200, body, {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref})

            _blobs_head = _blobs_get

            def _resolve(self, name, ref):
                return ref if ref.startswith("sha256:") else registry.tags.get((name, ref))

            def _manifests_put(self, name, ref, query):
                body = self._body()
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
                self._send(201, headers=headers)

            def _manifests_get(self, name, ref, query):
                digest = self._resolve(name, ref)
                found = registry.manifests.get((name, digest or ""))
                if found is None:
                    return self._error(404, "MANIFEST_UNKNOWN")
                self._send(200, found[0], {"Content-Type": found[1], "Docker-Content-Digest": digest})

            _manifests_head = _manifests_get

            def _manifests_delete(self, name, ref, query):
                if not ref.startswith("sha256:"):
                    if registry.tags.pop((name, ref), None) is None:
                        return self._error(404, "MANIFEST_UNKNOWN")
                    return self._send(202)
                if registry.manifests.pop((name, ref), None) is None:
                    return self._error(404, "MANIFEST_UNKNOWN")
                for key in [k for k, v in registry.tags.items() if k[0] == name and v == ref]:
                    del registry.tags[key]
                self._send(202)

            def _tags_get(self, name, ref, query):
                tags = sorted(t for (n, t) in registry.tags if n == name)
                self._send(200, json.dumps({"name": name, "tags": tags}).encode(), {"Content-Type": "application/json"})

            def _referrers_get(self, name, ref, query):
                if registry.referrers_status is not None:
                    return self._error(registry.referrers_status, "UNSUPPORTED")
                if registry.referrers_answer is not None:
                    body, content_type = registry.referrers_answer
                    return self._send(200, body, {"Content-Type": content_type})
                wanted = query.get("artifactType", [None])[0]
                found = []
                for (n, digest), (body, media) in sorted(registry.manifests.items()):
                    try:  # a manifest stored as bytes by a test (not JSON, no dict subject) is no referrer
                        subject = json.loads(body).get("subject")
                    except (ValueError, AttributeError, RecursionError):
                        continue
                    data = json.loads(body)
                    if n != name or not isinstance(subject, dict) or subject.get("digest") != ref:
                        continue
                    artifact_type = data.get("artifactType") or data.get("config", {}).get("mediaType")
                    if wanted and artifact_type != wanted:
                        continue
                    found.append({"mediaType": media, "digest": digest, "size": len(body),
                                  "artifactType": artifact_type, "annotations": data.get("annotations") or {}})
                headers = {"Content-Type": INDEX, **({"OCI-Filters-Applied": "artifactType"} if wanted else {})}
                self._send(200, json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": found}).encode(),
                           headers)

        self._http = ThreadedServer(Handler, port=self.port)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._http.close()

    def store(self, name: str, body: bytes, media_type: str, tag: str | None = None) -> str:
        """Keep manifest bytes as they are (no check, as no real registry would take them), under `tag` too."""
        digest = _digest(body)
        self.manifests[(name, digest)] = (body, media_type)
        if tag:
            self.tags[(name, tag)] = digest
        return digest
