"""Attestations in a registry: OCI artifacts whose `subject` is the image manifest (the registry adapter).

Each document (SBOM, provenance, signature envelope) is one blob under an OCI 1.1 artifact manifest:
`artifactType` says what it is, its one layer is the document, its config is the empty descriptor and
its `subject` is the image manifest. Pushed by digest, a registry with the referrers API indexes it
(and says so with an `OCI-Subject` header); one without it (distribution 2.x, the embedded registry)
gets the tag scheme instead: `sha256-<hex>.<kind>` points at the artifact. Discovery reads both.
Everything is by digest inside one repository, so promotion (new tags on the same manifest) carries
the attestations along without copying anything.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.imageref import is_digest
from ..core import labels as lb
from ..core.errors import RegistryError
from ..core.signals import deferred
from ..inventory.sbom import SBOM_MEDIA_TYPE
from ..registry.client import OCI_MANIFEST, ManifestNotFound, RegistryClient, compute_digest
from ..registry.transport import ReferrersUnreadable
from .errors import AttestationError
from .provenance import PROVENANCE_MEDIA_TYPE
from .signing import SIGNATURE_MEDIA_TYPE, Attached

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
KIND_ANNOTATION = lb.ATTESTATION_ANNOTATION
# kind -> the artifact type (and document media type) it is stored as
KINDS = {"sbom": SBOM_MEDIA_TYPE, "provenance": PROVENANCE_MEDIA_TYPE, "signature": SIGNATURE_MEDIA_TYPE}
KIND_OF = {media: kind for kind, media in KINDS.items()}


def fallback_tag(image_digest: str, kind: str) -> str:
    """The tag-scheme name of an image's `kind` artifact: `sha256-<hex>.<kind>`."""
    algorithm, _, hexpart = image_digest.partition(":")
    return f"{algorithm}-{hexpart}.{kind}"


def artifact_manifest(kind: str, document: Attached, subject_media_type: str, subject_digest: str,
                      subject_size: int) -> bytes:
    """The OCI 1.1 artifact manifest of one document (pure, deterministic: no timestamps)."""
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": KINDS[kind],
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
        "layers": [{"mediaType": document.media_type, "digest": document.digest, "size": document.size}],
        "subject": {"mediaType": subject_media_type, "digest": subject_digest, "size": subject_size},
        "annotations": {KIND_ANNOTATION: kind},
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Artifact:
    """One attestation artifact found for an image."""

    kind: str
    manifest_digest: str
    document_digest: str
    document_size: int
    subject: str | None
    via: str  # "referrers" or "tag"


@dataclass
class PushedAttestations:
    """What one `attach` put into the registry: the artifact manifests and the tags naming them."""

    manifests: list[str]
    tags: list[str]
    referrers_api: bool


def attach(client: RegistryClient, repo: str, image_digest: str, documents: Iterable[tuple[str, bytes]]
           ) -> PushedAttestations:
    """Push each (kind, document) as an artifact of `image_digest`; on any failure (a signal too), remove
    what this call pushed and re-raise: an image never keeps half of its attestations from one call."""
    image = client.get_manifest(repo, image_digest)
    pushed = PushedAttestations([], [], referrers_api=True)
    try:
        client.put_blob(repo, EMPTY_BLOB)
        for kind, body in documents:
            doc = Attached(kind, KINDS[kind], client.put_blob(repo, body), len(body))
            manifest = artifact_manifest(kind, doc, image.media_type, image.digest, len(image.body))
            existed = client.manifest_digest(repo, compute_digest(manifest)) is not None
            digest, indexed = client.put_artifact(repo, compute_digest(manifest), manifest, OCI_MANIFEST)
            if not existed:  # an earlier release's identical artifact is not ours to remove on failure
                pushed.manifests.append(digest)
            if not indexed:  # no referrers API: the tag scheme is how it is found
                pushed.referrers_api = False
                tag = fallback_tag(image_digest, kind)
                client.put_artifact(repo, tag, manifest, OCI_MANIFEST)
                pushed.tags.append(tag)
    except BaseException:
        with deferred():
            remove_manifests(client, repo, pushed.manifests)
        raise
    return pushed


def remove_manifests(client: RegistryClient, repo: str, digests: Iterable[str]) -> list[str]:
    """Delete artifact manifests (and so every tag naming them), within one deadline; what went."""
    removed = []
    with client.budget(client.timeout_s):
        for digest in dict.fromkeys(digests):
            with contextlib.suppress(ManifestNotFound):
                client.delete_manifest(repo, digest)
                removed.append(digest)
    return removed


# The most a document (SBOM, provenance, signature) may weigh: it is read into memory and parsed, and anyone
# who can push may attach one. A real SBOM of a CUDA serving image is a few hundred kilobytes.
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024


def _artifact(client: RegistryClient, repo: str, manifest_digest: str, via: str) -> Artifact | str | None:
    """The artifact under `manifest_digest`; None when it is gone; a one-line reason when it is not one of
    ours in a shape we read (so it verifies nothing, and the search goes on)."""
    try:
        manifest = client.get_manifest(repo, manifest_digest)
    except ManifestNotFound:
        return None
    except RegistryError as exc:  # too large, not JSON, or unreadable: it can vouch for nothing
        return f"artifact {manifest_digest[:19]} ({via}): {exc}"
    where = f"artifact {manifest_digest[:19]} ({via})"
    try:
        data = manifest.json()
    except ValueError as exc:
        return f"{where}: not JSON ({exc})"
    artifact_type = data.get("artifactType")
    kind = KIND_OF.get(artifact_type) if isinstance(artifact_type, str) else None
    if kind is None:
        return f"{where}: artifactType {str(artifact_type)[:80]!r} is not an sglstack attestation"
    layers = data.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        return f"{where}: its layers are not one descriptor: {_shown(layers)}"
    layer = layers[0]
    digest, size, media = layer.get("digest"), layer.get("size"), layer.get("mediaType")
    if media != KINDS[kind]:
        return f"{where}: its layer's media type {str(media)[:80]!r} is not {KINDS[kind]}"
    if not (isinstance(digest, str) and is_digest(digest)):
        return f"{where}: its layer's digest {str(digest)[:80]!r} is not sha256:<64 hex>"
    if not (isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_DOCUMENT_BYTES):
        return f"{where}: its layer's size {_shown(size)} is not a number of bytes up to {MAX_DOCUMENT_BYTES}"
    subject = data.get("subject")
    subject_digest = subject.get("digest") if isinstance(subject, dict) else None
    if not isinstance(subject_digest, str):
        return f"{where}: its subject is not a descriptor with a digest"
    return Artifact(kind, manifest.digest, digest, size, subject_digest, via)


def _shown(value: object) -> str:
    """A value someone attached, shown short (its first 80 characters of JSON)."""
    try:
        return json.dumps(value)[:80]
    except (RecursionError, ValueError):
        return "(nested too deeply)"


def find_attestations(client: RegistryClient, repo: str, image_digest: str, skipped: list[str] | None = None
                      ) -> list[Artifact]:
    """Every sglstack attestation artifact of `image_digest`: through the referrers API where the
    registry has one, and through the tag scheme always (an image copied by tag keeps them that way).

    An artifact that is not in a shape this tool writes (someone with push access may attach anything)
    is left out, its one-line reason appended to `skipped`: it can verify nothing, and a valid one may
    still be found beside it."""
    found: dict[str, Artifact] = {}
    reasons = skipped if skipped is not None else []
    try:
        descriptors = client.referrers(repo, image_digest)
    except ReferrersUnreadable as exc:  # a proxy's HTML page, say: what the tag scheme holds still counts
        reasons.append(f"{exc}; read the tag scheme only")
        descriptors = None
    for desc in descriptors or []:
        artifact_type, digest = desc.get("artifactType"), desc.get("digest")
        if not (isinstance(artifact_type, str) and artifact_type in KIND_OF and isinstance(digest, str)):
            continue  # not an attestation of ours by what the index says: other tools' referrers
        art = _artifact(client, repo, digest, "referrers")
        if isinstance(art, Artifact):
            found[art.manifest_digest] = art
        elif art is not None:
            reasons.append(art)
    for kind in KINDS:
        digest = client.manifest_digest(repo, fallback_tag(image_digest, kind))
        if digest and digest not in found:
            art = _artifact(client, repo, digest, "tag")
            if isinstance(art, Artifact) and art.kind == kind:
                found[digest] = art
            elif isinstance(art, Artifact):
                reasons.append(f"artifact {digest[:19]} (tag): a {art.kind} under the .{kind} tag")
            elif art is not None:
                reasons.append(art)
    return sorted(found.values(), key=lambda a: (a.kind, a.via, a.manifest_digest))


def remove_attestations(client: RegistryClient, repo: str, image_digest: str, skipped: list[str] | None = None
                        ) -> list[str]:
    """Delete every attestation artifact of an image (cleanup removes them with it); one that is not in our
    shape is left, its reason in `skipped` (the registry's garbage collection takes it with its subject)."""
    try:
        artifacts = find_attestations(client, repo, image_digest, skipped)
    except RegistryError as exc:
        raise AttestationError(f"attestations of {repo}@{image_digest} could not be listed: {exc}") from None
    return remove_manifests(client, repo, [a.manifest_digest for a in artifacts])
