"""A registry HTTP API v2 client: the manifest model and the endpoints (manifests, referrers, blobs, tags, deletes).

The requests themselves, with auth, retries and deadlines, are the session's (`registry/session.py`); split as
docker-py splits its client into endpoint groups over one connection. A 404 fails at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import requests

from ..config.imageref import is_digest
from ..config.platforms import platform_of_image
from ..core import labels as lb
from ..core.errors import RegistryError
from ..core.inputs import loads
from .blobs import BlobStreams
from .transport import error_detail, read_capped, read_index

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_MEDIA_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_MEDIA_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
NO_REFERRERS_API = (400, 404, 405, 501)  # what registries without the OCI 1.1 referrers API answer



# A registry (distribution's own limit) keeps manifests under 4 MiB; a bigger answer is not one.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # an image config (labels, history) is kilobytes
MAX_TAG_PAGES = 10_000  # 10 million tags at 1000 a page: no real repository is near it


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
        data = loads(self.body)
        if not isinstance(data, dict):
            raise ValueError("the manifest is not a JSON object")
        return data

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
        declared = loads(body).get("mediaType")
    except (ValueError, AttributeError):
        declared = None
    return declared if isinstance(declared, str) and declared else header


# ---- the client: the endpoints --------------------------------------------------------------------


class RegistryClient(BlobStreams):
    """The registry's endpoints: manifests, referrers, blobs, tags, deletes (the session is `RegistrySession`;
    large blobs streamed to and from files are `BlobStreams`')."""


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
            stream=True,
        )
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: {repo}{_sep(reference)}{reference} not found")
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        body = read_capped(resp, f"registry {self.registry}: {what}", MAX_MANIFEST_BYTES)
        digest = compute_digest(body)
        claimed = resp.headers.get("Docker-Content-Digest")
        if is_digest(reference) and digest != reference:
            raise self._fail(f"manifest {repo}@{reference} has content with digest {digest}")
        if claimed and claimed != digest:
            raise self._fail(f"manifest {repo}:{reference} digest header {claimed} != content {digest}")
        if not isinstance(self._json(resp, what, body), dict):
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
        return self._put_manifest(repo, reference, body, media_type)[0]

    def put_artifact(self, repo: str, reference: str, body: bytes, media_type: str) -> tuple[str, bool]:
        """`put_manifest` for a manifest with a `subject`: (digest, whether the registry indexed the subject
        for the referrers API). OCI 1.1: a registry that did answers with an `OCI-Subject` header."""
        digest, resp = self._put_manifest(repo, reference, body, media_type)
        subject = (loads(body).get("subject") or {}).get("digest")
        return digest, bool(subject) and resp.headers.get("OCI-Subject") == subject

    def _put_manifest(self, repo: str, reference: str, body: bytes,
                      media_type: str) -> tuple[str, requests.Response]:
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
            raise ManifestNotFound(f"registry {self.registry}: {what}: {error_detail(resp)}")
        if resp.status_code not in (200, 201, 202):
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        digest = compute_digest(body)
        reported = resp.headers.get("Docker-Content-Digest")
        if reported and reported != digest:
            raise self._fail(f"{what}: registry stored {reported}, expected {digest}")
        return digest, resp

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]] | None:
        """The descriptors of the manifests whose `subject` is `digest` (OCI 1.1 referrers API), or None
        when the registry has no such API: it answers 404 (distribution 2.x), or 400, 405 or 501 (registries
        that take `referrers` for a bad reference or an unknown route); the tag scheme is read instead."""
        what = f"GET referrers {repo}@{digest}"
        resp = self.request("GET", f"{repo}/referrers/{digest}", scope=f"repository:{repo}:pull", what=what,
                            headers={"Accept": OCI_INDEX}, stream=True)
        if resp.status_code in NO_REFERRERS_API:
            resp.close()
            return None
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        # An index is a manifest: the same cap (an answer of gigabytes was read whole).
        return read_index(resp, f"registry {self.registry}: {what}", MAX_MANIFEST_BYTES)

    def blob_exists(self, repo: str, digest: str) -> bool:
        what = f"HEAD blob {repo}@{digest}"
        resp = self.request("HEAD", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", what=what)
        if resp.status_code not in (200, 404):
            raise self._fail(f"{what}: HTTP {resp.status_code}")
        return resp.status_code == 200

    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload a small blob in one piece (POST an upload, PUT its bytes); return its digest.
        A blob the repository already has is not sent again."""
        digest = compute_digest(data)
        if self.blob_exists(repo, digest):
            return digest
        scope = f"repository:{repo}:pull,push"
        what = f"POST blob upload {repo}"
        resp = self.request("POST", f"{repo}/blobs/uploads/", scope=scope, what=what, allow_redirects=False)
        location = resp.headers.get("Location", "")
        if resp.status_code != 202 or not location:
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        path = location.split("/v2/", 1)[1] if "/v2/" in location else location.lstrip("/")
        path += ("&" if "?" in path else "?") + f"digest={digest}"
        what = f"PUT blob {repo}@{digest}"
        resp = self.request("PUT", path, scope=scope, what=what, data=data,
                            headers={"Content-Type": "application/octet-stream"})
        if resp.status_code not in (201, 204):
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
        return digest

    def list_tags(self, repo: str) -> list[str]:
        """Every tag of `repo` (following pagination); empty when the repository does not exist yet."""
        tags: list[str] = []
        path = f"{repo}/tags/list?n=1000"
        pages_seen: set[str] = set()
        while path:  # a next link back to a page already served would keep it going forever
            if path in pages_seen or len(pages_seen) == MAX_TAG_PAGES:
                raise self._fail(f"GET /v2/{repo}/tags/list: page {len(pages_seen) + 1} " + (
                    "links back to a page it already served" if path in pages_seen else "is one too many"))
            pages_seen.add(path)
            what = f"GET /v2/{path.split('?')[0]}"
            resp = self.request("GET", path, scope=f"repository:{repo}:pull", what=what)
            if resp.status_code == 404:
                return tags
            if resp.status_code != 200:
                raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")
            data = self._json(resp, what)
            page = data.get("tags") if isinstance(data, dict) else None  # "tags": null is a repository without any
            if not isinstance(data, dict) or (
                    page is not None and not (isinstance(page, list) and all(isinstance(t, str) for t in page))):
                raise self._fail(f"{what} answered JSON without a list of tags")
            tags += page or []
            match = re.search(r"<([^>]+)>;\s*rel=\"?next\"?", resp.headers.get("Link", ""))
            path = match.group(1).split("/v2/", 1)[-1] if match else ""
        return tags

    def get_blob(self, repo: str, digest: str, *, max_bytes: int | None = None) -> bytes:
        """The blob's bytes, checked against its digest; `max_bytes`: a bigger one is `TooLarge`, read no
        further than that (a document someone attached is not trusted to be small)."""
        what = f"GET blob {repo}@{digest}"
        resp = self.request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", what=what,
                            stream=max_bytes is not None)
        if resp.status_code == 404:
            raise ManifestNotFound(f"registry {self.registry}: blob {repo}@{digest} not found")
        if resp.status_code != 200:
            raise self._fail(f"{what}: HTTP {resp.status_code}")
        body = resp.content if max_bytes is None else read_capped(resp, f"registry {self.registry}: {what}", max_bytes)
        if compute_digest(body) != digest:
            raise self._fail(f"blob {repo}@{digest} content does not match its digest")
        return body

    def image_config(self, repo: str, reference: str) -> dict[str, Any]:
        """The image config JSON (labels, created) of an image manifest, or of an index's first child."""
        manifest = self.get_manifest(repo, reference)
        if manifest.is_index:
            children = manifest.children()
            if not children:
                raise self._fail(f"index {repo}@{manifest.digest} lists no manifests")
            manifest = self.get_manifest(repo, children[0])
        return self._config_of(repo, manifest)

    def image_platforms(self, repo: str, reference: str) -> tuple[str, ...]:
        """The platforms (`os/arch`) a reference serves: each image of an index (its attestation manifests,
        `unknown/unknown`, are not platforms), or the one of an image manifest's config."""
        manifest = self.get_manifest(repo, reference)
        if not manifest.is_index:
            config = self._config_of(repo, manifest)
            return (platform_of_image(str(config.get("os") or ""), str(config.get("architecture") or "unknown"),
                                      str(config.get("variant") or "")),)
        out = []
        for entry in manifest.json().get("manifests", []):
            found = entry.get("platform") if isinstance(entry, dict) else None
            if isinstance(found, dict) and found.get("os") not in (None, "unknown") and found.get("architecture"):
                out.append(platform_of_image(str(found["os"]), str(found["architecture"]),
                                             str(found.get("variant") or "")))
        return tuple(dict.fromkeys(out))

    def _config_of(self, repo: str, manifest: Manifest) -> dict[str, Any]:
        blob = manifest.blobs()[0]
        try:
            config = loads(self.get_blob(repo, blob, max_bytes=MAX_CONFIG_BYTES))
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
        marker = {lb.UNTAG_LABEL: tag}
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
            raise self._fail(f"{what}: HTTP {resp.status_code} {error_detail(resp)}")


def _sep(reference: str) -> str:
    return "@" if is_digest(reference) else ":"
