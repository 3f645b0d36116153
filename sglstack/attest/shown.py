"""The SBOM `invoke sbom` shows: the one a signature covers, the one attached to the image's digest in its
registry, or one listed from the image itself; marked with whether a verified signature covers it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..adapters.docker import PullFailed, docker_client, present_or_pulled
from ..config.imageref import ImageReference, names_its_registry
from ..core.clock import parse_utc, utc_now
from ..core.console import console
from ..core.errors import RegistryError
from ..core.inputs import loads
from ..inventory.listing import image_inventory
from ..inventory.sbom import SbomSummary, read_sbom, sbom_document
from ..registry.client import RegistryClient
from .errors import AttestationError, BadInput, NotVerified
from .store import MAX_DOCUMENT_BYTES, find_attestations
from .verify import parse_ref, resolve_digest, verified_reference


@dataclass(frozen=True)
class ShownSbom:
    document: dict[str, Any]  # marked with `SIGNATURE_PROPERTY`
    summary: SbomSummary
    source: str  # where it came from, in words
    signature: str  # whether a verified signature covers it, in words


def sbom_to_show(ref: str, *, docker_host: str | None = None, generate: bool = False,
                 key: str | None = None) -> ShownSbom:
    """The SBOM of REF. With `key`: only the one a signature by that key covers (NotVerified when none does).
    Without: the one attached to its digest in the registry, else (or with `generate`) one listed from the
    image itself, marked unsigned."""
    if key and generate:
        raise BadInput("sbom: give --verify-key (the signed SBOM) or --generate (listed from the image), not both")
    parsed = parse_ref(ref) if names_its_registry(ref) else None
    if key and parsed is None:
        raise BadInput(f"sbom: --verify-key needs REF in a registry (REPO:TAG or REPO@sha256:...), not '{ref}'")
    body: bytes | None = None
    source, signature = "", UNSIGNED_LISTED
    if parsed is not None and key:
        try:
            body, signature = _signed_sbom(parsed, key)
        except NotVerified as exc:
            raise NotVerified(f"{ref}: no SBOM shown: {exc}") from None
        source = "attached"
    elif parsed is not None and not generate:
        try:
            found = _attached_sbom(parsed)
        except NotVerified:
            found = None  # not in the registry under that name: list the image itself instead
        if found:
            body, source, signature = found[1], f"attached to {parsed.repository.ref(found[0])}", UNSIGNED_ATTACHED
    if body is None:
        body, image_id = _listed_sbom(ref, docker_host)
        source = f"listed from image {image_id[:19]}"
    return ShownSbom(_marked(body, signature), read_sbom(body), source, signature)


def index_platforms(ref: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(index digest, [(platform, REPO@child digest)]) when REF names an index in a registry; None for anything
    else (an image manifest, a local image, a reference no registry has). A buildx attestation manifest
    (platform unknown/unknown) is no platform."""
    if not names_its_registry(ref):
        return None
    parsed = parse_ref(ref)
    client = RegistryClient.from_environment(parsed.repository.registry)
    try:
        digest = resolve_digest(client, parsed)
    except NotVerified:
        return None
    manifest = client.get_manifest(parsed.repository.path, digest)
    if not manifest.is_index:
        return None
    out = []
    for entry in manifest.json().get("manifests", []):
        plat = entry.get("platform") if isinstance(entry, dict) else None
        name = f"{plat.get('os')}/{plat.get('architecture')}" if isinstance(plat, dict) else "unknown/unknown"
        if name != "unknown/unknown" and isinstance(entry.get("digest"), str):
            out.append((name, parsed.repository.ref(entry["digest"])))
    return digest, out


SIGNATURE_PROPERTY = "sglstack:signature"  # what `invoke sbom` adds: whether a verified signature covers it


def _attached_sbom(parsed: ImageReference) -> tuple[str, bytes] | None:
    client = RegistryClient.from_environment(parsed.repository.registry)
    repo = parsed.repository.path
    digest = resolve_digest(client, parsed)
    for art in find_attestations(client, repo, digest):
        if art.kind == "sbom" and art.subject == digest:
            try:
                return digest, client.get_blob(repo, art.document_digest, max_bytes=MAX_DOCUMENT_BYTES)
            except RegistryError as exc:
                console(stderr=True).print(f"skipped: sbom {art.manifest_digest[:19]}: {exc}", markup=False,
                                           highlight=False)
    return None


def _signed_sbom(parsed: ImageReference, key: str) -> tuple[bytes, str]:
    """The SBOM a signature by `key` covers (its bytes checked by `verify_image`), and what says so."""
    _, result = verified_reference(str(parsed), key, what="--verify-key")
    sbom_digest = result.attestations["sbom"]["digest"]
    client = RegistryClient.from_environment(parsed.repository.registry)
    body = client.get_blob(parsed.repository.path, sbom_digest, max_bytes=MAX_DOCUMENT_BYTES)
    return body, (f"signed: covered by the signature of key {result.key_id[:16]} on "
                  f"{parsed.repository.ref(result.digest)}")


def _marked(body: bytes, signature: str) -> dict[str, Any]:
    """The document with one CycloneDX property saying whether a verified signature covers it."""
    doc = loads(body)
    metadata = doc.setdefault("metadata", {})
    props = [p for p in metadata.get("properties") or []
             if not (isinstance(p, dict) and p.get("name") == SIGNATURE_PROPERTY)]
    metadata["properties"] = [*props, {"name": SIGNATURE_PROPERTY, "value": signature}]
    return doc


UNSIGNED_ATTACHED = ("unsigned: not checked against any signature (anyone who can push may attach an SBOM; give "
                     "--verify-key PUB to show only a signed one)")
UNSIGNED_LISTED = "unsigned: listed here, covered by no signature"


def _listed_sbom(ref: str, docker_host: str | None) -> tuple[bytes, str]:
    client = docker_client(docker_host)
    try:
        image = present_or_pulled(client, ref)
    except PullFailed as exc:
        raise AttestationError(f"image '{ref}' is neither attached to a registry SBOM nor pullable: {exc}") from None
    return sbom_document(image_inventory(client, image.id), image_name=ref, image_id=image.id,
                         created=_created(image.created)), image.id


def _created(value: Any) -> dt.datetime:
    """The engine's `Created` (RFC 3339 with nanoseconds) to the second, UTC."""
    created = parse_utc(value)
    return created.replace(microsecond=0) if created is not None else utc_now()
