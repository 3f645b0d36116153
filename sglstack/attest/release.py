"""What a release attaches to the digest it publishes: the SBOM, the provenance and (with a key) the
signature over both, made from the build record and pushed before any release tag moves.

`invoke build` lists the image and writes `sbom.cdx.json` beside its record; a build that reused an
image (no SBOM beside the record) gets it listed here, from the local image, at release time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..adapters.docker import docker_client
from ..config.imageref import Repository
from ..core import labels as lb
from ..core.inputs import loads
from ..registry.client import RegistryClient, compute_digest
from .errors import AttestationError
from .image import image_inventory
from .provenance import PROVENANCE_MEDIA_TYPE, provenance_statement
from .sbom import SBOM_FILE, SBOM_MEDIA_TYPE, sbom_document
from .signing import Attached, key_id, sign_envelope, signed_payload
from .store import attach

# (registry client, repository, image digest) -> a one-line summary of what was attached
Attester = Callable[[RegistryClient, Repository, str], str]


def read_record(path: Path) -> dict[str, Any]:
    try:
        record = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AttestationError(f"build record {path}: cannot be read ({exc})") from None
    if not isinstance(record, dict) or "image_id" not in record:
        raise AttestationError(f"build record {path}: not a build record")
    return record


def sbom_bytes(record_path: Path, record: dict[str, Any], *, docker_host: str | None) -> bytes:
    """The SBOM the build wrote beside its record, or (a reused image) one listed from the local image."""
    path = record_path.parent / SBOM_FILE
    sbom = record.get("sbom") or {}
    if path.is_file() and sbom.get("sha256") and compute_digest(path.read_bytes()) == f"sha256:{sbom['sha256']}":
        return path.read_bytes()
    inventory = image_inventory(docker_client(docker_host), record["image_id"])
    created = dt.datetime.fromisoformat(str(record.get("built_at") or "1970-01-01T00:00:00Z").replace("Z", "+00:00"))
    return sbom_document(inventory, image_name=str(record.get("tag") or record["stack"]), image_id=record["image_id"],
                         created=created)


@dataclass(frozen=True)
class AttestPlan:
    """What `build --push` attaches: from this record, signed with this key (None: `--unsigned`)."""

    record_path: Path
    key: Ed25519PrivateKey | None
    docker_host: str | None = None

    def documents(self, repository: str, digest: str) -> list[tuple[str, bytes]]:
        record = read_record(self.record_path)
        if "provenance" not in record:  # a reused image's record: the facts its labels keep
            record["provenance"] = reused_facts(record)
        sbom = sbom_bytes(self.record_path, record, docker_host=self.docker_host)
        provenance = provenance_statement(record, repository=repository, digest=digest)
        docs = [("sbom", sbom), ("provenance", provenance)]
        if self.key is not None:
            attached = [Attached("sbom", SBOM_MEDIA_TYPE, compute_digest(sbom), len(sbom)),
                        Attached("provenance", PROVENANCE_MEDIA_TYPE, compute_digest(provenance), len(provenance))]
            docs.append(("signature", sign_envelope(self.key, signed_payload(digest, attached))))
        return docs

    def __call__(self, client: RegistryClient, repo: Repository, digest: str) -> str:
        docs = self.documents(str(repo), digest)
        pushed = attach(client, repo.path, digest, docs)
        how = "referrers API" if pushed.referrers_api else "tag scheme sha256-<hex>.<kind>"
        signed = f"signed by key {key_id(self.key.public_key())[:16]}" if self.key else "UNSIGNED (--unsigned)"
        size = sum(len(body) for _, body in docs)
        return f"attached {', '.join(k for k, _ in docs)} to {repo.ref(digest)} ({size} bytes, {how}); {signed}"


def reused_facts(record: dict[str, Any]) -> dict[str, Any]:
    """Provenance facts of an image this build reused rather than built: what its labels recorded."""
    labels = record.get("labels") or {}
    record.setdefault("base_image", {"name": "unknown", "digest": labels.get(lb.BASE_DIGEST_LABEL)})
    record.setdefault("built_at", record.get("built_at") or "1970-01-01T00:00:00Z")
    record.setdefault("builder", {"kind": labels.get(lb.BUILDER_LABEL, "unknown")})
    if labels.get(lb.LOCK_LABEL):
        record.setdefault("lock", {"content_sha256": labels[lb.LOCK_LABEL]})
    return {"patches": {}, "sglstack": {}, "reused": record.get("reused")}
