"""One in-memory stand-in for `RegistryClient`: the calls that attach, sign and read artifacts by digest
(publishing and verifying an index, a kernel-cache artifact), with blobs, manifests and tags kept in dicts.

It speaks the client's interface (the same names, arguments and answers: `ManifestNotFound` for an unknown
reference, `(digest, indexed)` from `put_artifact`); `referrers_api` is whether the registry has the referrers
API (without it, `referrers` answers None and an artifact's PUT says it was not indexed). `manifests` maps
each digest to `(media type, body)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from sglstack.core.errors import RegistryError
from sglstack.registry.client import Manifest, ManifestNotFound, compute_digest
from sglstack.registry.transport import TooLarge


class MemoryRegistry:
    registry = "memory.invalid"  # the host a client names in its messages

    def __init__(self, *, referrers_api: bool = False) -> None:
        self.referrers_api = referrers_api
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.tags: dict[str, str] = {}

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        digest = self.tags.get(reference, reference)
        if digest not in self.manifests:
            raise ManifestNotFound(reference)
        media, body = self.manifests[digest]
        return Manifest(media, body, digest)

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        return self.tags.get(reference) or (reference if reference in self.manifests else None)

    def put_blob(self, repo: str, data: bytes) -> str:
        self.blobs[compute_digest(data)] = data
        return compute_digest(data)

    def get_blob(self, repo: str, digest: str, *, max_bytes: int | None = None) -> bytes:
        return self.blobs[digest]

    def blob_size(self, repo: str, digest: str) -> int | None:
        return len(self.blobs[digest]) if digest in self.blobs else None

    def push_blob_file(self, repo: str, path: Path, digest: str, size: int, **_: Any) -> bool:
        """As the real one: the registry takes only bytes that hash to `digest` (the double reads the file
        whole: its blobs are small)."""
        if self.blob_size(repo, digest) == size:
            return False
        data = path.read_bytes()
        if compute_digest(data) != digest or len(data) != size:
            raise RegistryError(f"registry memory: PUT blob {repo}@{digest}: HTTP 400 DIGEST_INVALID")
        self.blobs[digest] = data
        return True

    def fetch_blob_to(self, repo: str, digest: str, size: int, out: BinaryIO, *, limit: int, **_: Any) -> None:
        """As the real one: refused over `limit` before reading, and a body of another size or digest is one
        line (the double writes it before saying so, as a download cut short would have)."""
        if size > limit:
            raise TooLarge(f"registry memory: GET blob {repo}@{digest}: declared {size} bytes, over the limit")
        if digest not in self.blobs:
            raise RegistryError(f"registry memory: GET blob {repo}@{digest}: HTTP 404")
        data = self.blobs[digest]
        out.write(data[:size + 1])
        if len(data) != size or compute_digest(data) != digest:
            raise RegistryError(f"registry memory: blob {repo}@{digest} content does not match its digest")

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        digest = compute_digest(body)
        self.manifests[digest] = (media_type, body)
        if not reference.startswith("sha256:"):
            self.tags[reference] = digest
        return digest

    def put_artifact(self, repo: str, reference: str, body: bytes, media_type: str) -> tuple[str, bool]:
        return self.put_manifest(repo, reference, body, media_type), self.referrers_api

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]] | None:
        if not self.referrers_api:
            return None
        out = []
        for found, (_, body) in self.manifests.items():
            data = json.loads(body)
            if (data.get("subject") or {}).get("digest") == digest:
                out.append({"digest": found, "artifactType": data.get("artifactType")})
        return out

    def image_config(self, repo: str, reference: str) -> Any:
        manifest = self.get_manifest(repo, reference)
        if manifest.is_index:  # as the real client: the index's first child's
            manifest = self.get_manifest(repo, manifest.children()[0])
        return json.loads(self.blobs[manifest.blobs()[0]])

    def list_tags(self, repo: str) -> list[str]:
        return sorted(self.tags)
