"""What a release attaches to the digest it publishes: the SBOM, the provenance and (with a key) the
signature over both, made from the build record and pushed before any release tag moves.

`invoke build` lists the image and writes `sbom.cdx.json` beside its record; a build that reused an
image (no SBOM beside the record) gets it listed here, from the local image, at release time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..adapters.docker import docker_client
from ..config.imageref import Repository, parse_image_reference
from ..core import labels as lb
from ..core.clock import parse_utc
from ..core.errors import ConfigError, RegistryError
from ..core.inputs import loads, read_bytes
from ..inventory.listing import image_inventory
from ..inventory.model import InventoryError
from ..inventory.sbom import SBOM_FILE, SBOM_MEDIA_TYPE, read_sbom, sbom_document
from ..registry.client import RegistryClient, compute_digest
from .errors import AttestationError, NotVerified
from .provenance import (
    PROVENANCE_MEDIA_TYPE,
    BuildIdentity,
    identity_differences,
    provenance_statement,
    statement_identity,
    statement_subjects,
)
from .signing import Attached, cosigned, key_id, sign_envelope, signed_payload
from .store import MAX_DOCUMENT_BYTES, Artifact, attach, find_attestations
from .verify import verify_image, verify_index_signature

# (registry client, repository, image digest) -> a one-line summary of what was attached
Attester = Callable[[RegistryClient, Repository, str], str]


def read_record(path: Path) -> dict[str, Any]:
    try:  # bounded, never from a FIFO put in its place
        record = loads(read_bytes(path, what="build record"))
    except ConfigError as exc:
        raise AttestationError(f"build record {path}: cannot be read ({exc.reason})") from None
    except ValueError as exc:
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
    created = parse_utc(record.get("built_at")) or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
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

    def sign_published(self, client: RegistryClient, repo: Repository, digest: str) -> str:
        """`build --push --signing-key` of a config already published: sign that digest unless this key already did."""
        assert self.key is not None, "only a signing release signs what is published"
        record = read_record(self.record_path)
        expect = BuildIdentity(str(record.get("stack")), str(record.get("config_hash")))
        return ensure_signed(client, repo, digest, self.key, expect,
                             documents=lambda: self.documents(str(repo), digest)[:2])

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
    record["built_at"] = record.get("built_at") or "1970-01-01T00:00:00Z"  # none, or null: no time kept
    record.setdefault("builder", {"kind": labels.get(lb.BUILDER_LABEL, "unknown")})
    if labels.get(lb.LOCK_LABEL):
        record.setdefault("lock", {"content_sha256": labels[lb.LOCK_LABEL]})
    return {"patches": {}, "sglstack": {}, "reused": record.get("reused")}


Documents = Callable[[], list[tuple[str, bytes]]]


def ensure_signed(client: RegistryClient, repo: Repository, digest: str, key: Ed25519PrivateKey,
                  expect: BuildIdentity, *, documents: Documents | None = None) -> str:
    """Make `digest` verify against `key` as the build `expect` names, before any tag moves to it.

    Already verified: nothing to do. Else the SBOM and provenance attached to it (an `--unsigned` release)
    are signed, once checked to be about it: the provenance names this digest and `expect`, the SBOM its
    manifest's config. With none that fits, `documents()` makes them (a build record), or it is refused.
    The result is verified again, so a signature that would not verify is never the reason tags moved."""
    ref = parse_image_reference(repo.ref(digest))
    public = key.public_key()
    kid = key_id(public)[:16]
    try:
        verify_image(client, ref, public, expect)
        return f"{repo.ref(digest)} is already signed by key {kid}"
    except NotVerified as exc:
        why = str(exc)
    found = find_attestations(client, repo.path, digest)
    manifest = client.get_manifest(repo.path, digest)
    try:
        config = None if manifest.is_index else manifest.blobs()[0]
    except (KeyError, TypeError, IndexError, ValueError):
        raise AttestationError(f"{repo.ref(digest)}: not an image manifest (no config descriptor)") from None
    sbom = _fitting(client, repo, found, "sbom", digest,
                    lambda body: config is None or read_sbom(body).image_id == config)
    provenance = _fitting(client, repo, found, "provenance", digest,
                          lambda body: digest in statement_subjects(body)
                          and not identity_differences(expect, statement_identity(body)))
    if sbom is not None and provenance is not None:
        docs = [sbom, provenance]
        pushed = [("signature", _cosigned(client, repo, digest, found, _envelope(key, digest, docs)))]
        how = "signed the SBOM and provenance attached to it"
    elif documents is not None:
        made = documents()
        pushed = [*made, ("signature", _cosigned(client, repo, digest, found, _envelope(key, digest, made)))]
        how = "attached and signed an SBOM and provenance from the build record"
    else:
        raise AttestationError(f"{repo.ref(digest)}: not signed by key {kid} ({why}), and no SBOM and provenance "
                               f"of {expect.describe()} are attached to sign: release it with `invoke build "
                               f"--push --signing-key`, or promote it with --unsigned")
    attach(client, repo.path, digest, pushed)
    try:
        verify_image(client, ref, public, expect)
    except NotVerified as exc:
        raise AttestationError(f"{repo.ref(digest)}: signed, but it does not verify: {exc}") from None
    return f"{how}: {repo.ref(digest)}, signed by key {kid}"


def _envelope(key: Ed25519PrivateKey, digest: str, docs: list[tuple[str, bytes]]) -> bytes:
    media = {"sbom": SBOM_MEDIA_TYPE, "provenance": PROVENANCE_MEDIA_TYPE}
    return sign_envelope(key, signed_payload(digest, [Attached(kind, media[kind], compute_digest(body), len(body))
                                                      for kind, body in docs]))


def _cosigned(client: RegistryClient, repo: Repository, digest: str, found: list[Artifact], envelope: bytes) -> bytes:
    """`envelope` with the other keys' signatures already attached to `digest` over the same payload (`cosigned`):
    where the registry keeps one signature artifact per image, signing with this key keeps theirs."""
    others = []
    for art in found:
        if art.kind == "signature" and art.subject == digest:
            with contextlib.suppress(RegistryError):  # unreadable: nothing of it to carry along
                others.append(client.get_blob(repo.path, art.document_digest, max_bytes=MAX_DOCUMENT_BYTES))
    return cosigned(envelope, others)


def _fitting(client: RegistryClient, repo: Repository, found: list[Artifact], kind: str, digest: str,
             fits: Callable[[bytes], bool]) -> tuple[str, bytes] | None:
    """The first `kind` document attached to `digest` that reads back and fits; None when none does."""
    for art in found:
        if art.kind != kind or art.subject != digest:
            continue
        try:
            body = client.get_blob(repo.path, art.document_digest, max_bytes=MAX_DOCUMENT_BYTES)
            if fits(body):
                return kind, body
        except (RegistryError, AttestationError, InventoryError):
            continue  # unreadable, or not ours: it is not what gets signed
    return None


def index_payload_signature(key: Ed25519PrivateKey, index_digest: str) -> bytes:
    """The signature of an index: over its digest alone. The index's bytes name each platform's manifest by
    digest, so this pins the set; each platform's SBOM and provenance are its own manifest's, signed there."""
    return sign_envelope(key, signed_payload(index_digest, []))


def ensure_index_signed(client: RegistryClient, repo: Repository, index_digest: str, children: dict[str, str],
                        key: Ed25519PrivateKey, expect: BuildIdentity) -> list[str]:
    """Every platform's manifest, then the index, verified against `key` before the index's tag is written.

    A platform already signed by this key (its own `build --push --signing-key`) is verified, not signed again;
    one released `--unsigned` gets its attached SBOM and provenance signed (`ensure_signed`); one with neither
    is refused, and so is the index. The index gets one signature over its digest (again: none when this key
    already made one). What was signed before a refusal stays: it verifies, and a retry finds it done."""
    said = [f"{platform}: {ensure_signed(client, repo, digest, key, expect)}" for platform, digest in children.items()]
    public = key.public_key()
    try:
        verify_index_signature(client, repo, index_digest, public)
        said.append(f"index {repo.ref(index_digest)} is already signed by key {key_id(public)[:16]}")
        return said
    except NotVerified:
        pass
    found = find_attestations(client, repo.path, index_digest)
    signature = _cosigned(client, repo, index_digest, found, index_payload_signature(key, index_digest))
    attach(client, repo.path, index_digest, [("signature", signature)])
    try:
        verify_index_signature(client, repo, index_digest, public)
    except NotVerified as exc:
        raise AttestationError(f"{repo.ref(index_digest)}: signed, but it does not verify: {exc}") from None
    said.append(f"index {repo.ref(index_digest)} signed by key {key_id(public)[:16]}")
    return said
