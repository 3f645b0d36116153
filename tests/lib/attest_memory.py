"""An in-memory registry with deletes and faults, and images with their SBOM, provenance and signature, for the
attest-store tests (issue 35, mutation of `attest-store`): the in-memory registry (`memory_registry`) with the calls
removal needs (`delete_manifest`, `budget`), one repository (a call naming another is refused), a PUT that fails
for one layer, a manifest or blob that cannot be read."""

from __future__ import annotations

import contextlib
import datetime as dt
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memory_registry import MemoryRegistry

from sglstack.attest.errors import NotVerified
from sglstack.attest.provenance import BuildIdentity, provenance_statement
from sglstack.attest.signing import Attached, key_id, sign_envelope, signed_payload
from sglstack.attest.store import KINDS, fallback_tag
from sglstack.attest.verify import Verification, verify_image
from sglstack.config.imageref import parse_image_reference
from sglstack.core.errors import RegistryError
from sglstack.inventory.model import Inventory
from sglstack.inventory.sbom import sbom_document
from sglstack.registry.client import DOCKER_MANIFEST, OCI_MANIFEST, ManifestNotFound, compute_digest

REGISTRY = "127.0.0.1:5000/team/store"
PATH = "team/store"
KEY = Ed25519PrivateKey.generate()
KID = key_id(KEY.public_key())[:16]
IDENTITY = BuildIdentity("cu130", "c" * 64)


class Registry(MemoryRegistry):
    """The in-memory registry with deletes (and what `remove_manifests` asks of a client), and a fault: the
    PUT of an artifact whose layer is `fail_layer` raises, as a registry refusing it half-way would."""

    timeout_s = 60.0

    def __init__(self, *, referrers_api: bool = False) -> None:
        super().__init__(referrers_api=referrers_api)
        self.fail_layer: str | None = None
        self.unreadable: set[str] = set()
        self.deleted: list[str] = []

    @staticmethod
    def _one_repository(repo: str) -> None:
        """The registry holds one repository: a call naming another is refused, as a registry's NAME_UNKNOWN."""
        if repo != PATH:
            raise RegistryError(f"registry memory: repository {repo!r}: HTTP 404 NAME_UNKNOWN")

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self._one_repository(repo)
        return super().manifest_digest(repo, reference)

    def put_blob(self, repo: str, data: bytes) -> str:
        self._one_repository(repo)
        return super().put_blob(repo, data)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        self._one_repository(repo)
        return super().put_manifest(repo, reference, body, media_type)

    def budget(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        assert seconds == self.timeout_s
        return contextlib.nullcontext()

    def put_artifact(self, repo: str, reference: str, body: bytes, media_type: str) -> tuple[str, bool]:
        if self.fail_layer and json.loads(body)["layers"][0]["digest"] == self.fail_layer:
            raise RegistryError("registry memory: PUT manifest: HTTP 500")
        return super().put_artifact(repo, reference, body, media_type)

    def get_manifest(self, repo: str, reference: str):
        self._one_repository(repo)
        if reference in self.unreadable:
            raise RegistryError(f"registry memory: GET manifest {reference[:19]}: HTTP 500")
        return super().get_manifest(repo, reference)

    def referrers(self, repo: str, digest: str) -> list[dict[str, object]] | None:
        """As the parent's, passing over a manifest that is no JSON object (as a registry indexes none)."""
        self._one_repository(repo)
        kept = {d: m for d, m in self.manifests.items() if m[1].startswith(b"{")}
        every, self.manifests = self.manifests, kept
        try:
            return super().referrers(repo, digest)
        finally:
            self.manifests = every

    def get_blob(self, repo: str, digest: str, *, max_bytes: int | None = None) -> bytes:
        self._one_repository(repo)
        if digest not in self.blobs:  # as the real client: a missing blob is a RegistryError
            raise RegistryError(f"registry memory: GET blob {repo}@{digest}: HTTP 404")
        return super().get_blob(repo, digest, max_bytes=max_bytes)

    def delete_manifest(self, repo: str, digest: str) -> None:
        self._one_repository(repo)
        if digest not in self.manifests:
            raise ManifestNotFound(digest)
        del self.manifests[digest]
        self.tags = {t: d for t, d in self.tags.items() if d != digest}
        self.deleted.append(digest)


def image(registry: Registry, marker: str = "x") -> tuple[str, str]:
    """An image manifest (its config differs by `marker`): (digest, config digest)."""
    config = registry.put_blob(PATH, json.dumps({"os": "linux", "marker": marker}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "layers": [],
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config,
                                  "size": 1}}).encode()
    return registry.put_manifest(PATH, compute_digest(body), body, DOCKER_MANIFEST), config


def docs(digest: str, config: str, *, sbom_image: str | None = None, subject: str | None = None
          ) -> list[tuple[str, bytes]]:
    record = {"stack": "cu130", "target": "runtime", "image_id": config, "config_hash": "c" * 64,
              "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "debian", "digest": None}, "sglang": {"version": "0.5.9", "git": None},
              "provenance": {"patches": {}, "sglstack": {}}}
    sbom = sbom_document(Inventory(python={"wheel": "0.45"}, debian=()), image_name="x",
                         image_id=sbom_image or config, created=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    return [("sbom", sbom), ("provenance", provenance_statement(record, repository=REGISTRY,
                                                                digest=subject or digest))]


def signature(digest: str, named: list[tuple[str, bytes]], *, signed_digest: str | None = None) -> bytes:
    """A signature by KEY over `signed_digest` (`digest` unless told) naming the (kind, document)s `named`."""
    attached = [Attached(kind, KINDS[kind], compute_digest(body), len(body)) for kind, body in named]
    return sign_envelope(KEY, signed_payload(signed_digest or digest, attached))


def verify(registry: Registry, digest: str, expect: BuildIdentity | None = None) -> Verification:
    return verify_image(registry, parse_image_reference(f"{REGISTRY}@{digest}"), KEY.public_key(), expect)


def refusal(registry: Registry, digest: str) -> str:
    with pytest.raises(NotVerified) as err:
        verify(registry, digest)
    return str(err.value)


def plant(registry: Registry, digest: str, kind: str, changes: dict[str, object]) -> str:
    """An artifact of `kind` for `digest` with some of its fields changed, under its tag-scheme tag."""
    layer = {"mediaType": KINDS[kind], "digest": registry.put_blob(PATH, b"doc"), "size": 3}
    data = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": KINDS[kind], "layers": [layer],
            "subject": {"mediaType": DOCKER_MANIFEST, "digest": digest, "size": 1}}
    data.update({k: v for k, v in changes.items() if k in data})
    layer.update({k: v for k, v in changes.items() if k in ("size", "digest")})
    body = json.dumps(data).encode()
    return registry.put_manifest(PATH, fallback_tag(digest, kind), body, OCI_MANIFEST)


def write_record(tmp_path, config: str, **changes: object) -> dict:
    """A build record of image `config` in `tmp_path/record.json`, as a build writes it (with `changes`)."""
    record = {"stack": "cu130", "target": "runtime", "image_id": config, "config_hash": "c" * 64,
              "built_at": "2026-12-03T19:00:00Z", "builder": {"kind": "classic"}, "pins": {},
              "base_image": {"name": "debian", "digest": None}, "sglang": {"version": "0.5.9", "git": None},
              "provenance": {"patches": {}, "sglstack": {}}, **changes}
    (tmp_path / "record.json").write_text(json.dumps(record))
    return record
