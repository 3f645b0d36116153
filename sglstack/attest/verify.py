"""`invoke verify-image`: does a signature by this key cover exactly this digest and the attestations it
names? The registry is read through `store`; every judgement here is on bytes already fetched.

Refusals (exit 1, one line): no signature; no signature by this key; a signature over another digest
(a tag moved to another image, or a signature copied onto one); an attestation the signature names that
is missing, or whose bytes changed; an SBOM naming another image config; a provenance naming another
subject; bound to a stack, a provenance naming another stack, config hash or SGLang release (a signed
image of another stack, or an old release, under a moved tag). An artifact in a shape this tool does
not write is skipped with its reason: it verifies nothing, and a valid one beside it still counts.
The SBOM and the provenance must both be named: a signature without them vouches for less than a
release attaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..config.imageref import ImageReference, Repository, parse_image_reference
from ..core.console import console
from ..core.errors import ConfigError, RegistryError, one_line
from ..inventory.model import InventoryError
from ..inventory.sbom import read_sbom
from ..registry.client import ManifestNotFound, RegistryClient
from .errors import AttestationError, BadInput, NotVerified
from .provenance import BuildIdentity, identity_differences, statement_identity, statement_subjects
from .signing import Attached, key_id, load_public_key, open_envelope, signed_attestations
from .store import MAX_DOCUMENT_BYTES, Artifact, find_attestations

REQUIRED = ("provenance", "sbom")


@dataclass
class Verification:
    """What was checked, for the report (`--json`) and the summary line."""

    image: str
    digest: str
    key_id: str
    checked: list[str] = field(default_factory=list)
    attestations: dict[str, dict[str, Any]] = field(default_factory=dict)
    signed: BuildIdentity | None = None  # what the signed provenance names
    expected: BuildIdentity | None = None  # what it was bound to (None: the digest only)
    skipped: list[str] = field(default_factory=list)  # artifacts that could verify nothing, and why
    platforms: list[dict[str, Any]] = field(default_factory=list)  # an index: each platform's verdict

    @property
    def verified(self) -> bool:
        return all(p["verified"] for p in self.platforms)

    def as_dict(self) -> dict[str, Any]:
        if self.platforms:  # an index: its own signature's checks, and each platform's verdict
            return {"image": self.image, "digest": self.digest, "index": True, "verified": self.verified,
                    "key_id": self.key_id, "checked": self.checked, "platforms": self.platforms,
                    "bound_to": self.expected.as_dict() if self.expected else None, "skipped": self.skipped}
        return {"image": self.image, "digest": self.digest, "verified": True, "key_id": self.key_id,
                "checked": self.checked, "attestations": self.attestations,
                "signed_for": self.signed.as_dict() if self.signed else None,
                "bound_to": self.expected.as_dict() if self.expected else None, "skipped": self.skipped}


def resolve_digest(client: RegistryClient, ref: ImageReference) -> str:
    """The manifest digest REF names now (a digest is checked to exist; a tag is read)."""
    repo = ref.repository.path
    if ref.digest:
        try:
            return client.get_manifest(repo, ref.digest).digest
        except ManifestNotFound:
            raise NotVerified(f"{ref}: no such manifest in the registry") from None
    digest = client.manifest_digest(repo, ref.tag or "latest")
    if digest is None:
        raise NotVerified(f"{ref}: no such tag in the registry")
    return digest


def _open_signature(client: RegistryClient, repo: str, signatures: list[Artifact], public: Ed25519PublicKey,
                    skipped: list[str]) -> dict[str, Any]:
    """The payload of the first signature `public` verifies; each one that does not is a line in `skipped`."""
    last: NotVerified | None = None
    for art in signatures:
        try:
            return open_envelope(client.get_blob(repo, art.document_digest, max_bytes=MAX_DOCUMENT_BYTES), public)
        except NotVerified as exc:
            last = exc
        except RegistryError as exc:  # gone, too big, or changed bytes: it verifies nothing
            last = NotVerified(f"the signature {art.document_digest[:19]} cannot be read: {exc}")
        skipped.append(f"signature {art.manifest_digest[:19]}: {last}")
    assert last is not None
    raise last


def _document(client: RegistryClient, repo: str, want: Attached, found: list[Artifact], digest: str) -> bytes:
    mine = [a for a in found if a.kind == want.kind and a.subject == digest]
    if not any(a.document_digest == want.digest for a in mine):
        if mine:
            raise NotVerified(f"the {want.kind} attached is {mine[0].document_digest[:19]}, the signature names "
                              f"{want.digest[:19]}: it was changed after signing")
        raise NotVerified(f"the {want.kind} the signature names ({want.digest[:19]}) is not attached: "
                          f"deleted or never pushed")
    try:  # checks the bytes hash to the signed digest, and reads no more than a document may weigh
        body = client.get_blob(repo, want.digest, max_bytes=min(want.size, MAX_DOCUMENT_BYTES))
    except ManifestNotFound:
        raise NotVerified(f"the {want.kind} document {want.digest[:19]} is gone from the registry") from None
    except RegistryError as exc:
        raise NotVerified(f"the {want.kind} document {want.digest[:19]}: {exc}") from None
    if len(body) != want.size:
        raise NotVerified(f"the {want.kind} is {len(body)} bytes, the signature names {want.size}")
    return body


def verify_image(client: RegistryClient, ref: ImageReference, public: Ed25519PublicKey,
                 expect: BuildIdentity | None = None) -> Verification:
    """Verification of REF against `public`, bound to `expect` (the stack, config hash and SGLang release the
    signed provenance must name; None: the digest only); NotVerified (one line) for every refusal."""
    repo = ref.repository.path
    digest = resolve_digest(client, ref)
    result = Verification(image=str(ref), digest=digest, key_id=key_id(public), expected=expect)
    if client.get_manifest(repo, digest).is_index:
        return _verify_index(client, ref, digest, public, result)
    found = find_attestations(client, repo, digest, result.skipped)
    signatures = [a for a in found if a.kind == "signature" and a.subject == digest]
    if not signatures:
        why = f" ({len(result.skipped)} unreadable: {result.skipped[0]})" if result.skipped else ""
        raise NotVerified(f"{ref.repository.ref(digest)}: no signature attached (unsigned, or its signature "
                          f"was deleted){why}")
    payload = _open_signature(client, repo, signatures, public, result.skipped)
    signed_digest, attached = signed_attestations(payload)
    if signed_digest != digest:
        raise NotVerified(f"{ref}: resolves to {digest[:19]}, but the signature covers {signed_digest[:19]}")
    result.checked.append(f"signature by key {result.key_id[:16]} covers {digest}")
    kinds = {a.kind for a in attached}
    missing = [k for k in REQUIRED if k not in kinds]
    if missing:
        raise NotVerified(f"{ref.repository.ref(digest)}: the signature names no {' and no '.join(missing)}")
    manifest = client.get_manifest(repo, digest)
    try:
        config = None if manifest.is_index else manifest.blobs()[0]
    except (KeyError, TypeError, IndexError, ValueError):
        raise NotVerified(f"{ref.repository.ref(digest)}: not an image manifest (no config descriptor)") from None
    for want in sorted(attached, key=lambda a: a.kind):
        body = _document(client, repo, want, found, digest)
        try:
            _check_document(result, want, body, digest, config)
        except (AttestationError, InventoryError) as exc:  # a signed document we cannot read vouches for nothing
            raise NotVerified(str(exc)) from None
        result.checked.append(f"{want.kind} {want.digest} ({want.size} bytes) attached and unchanged")
    if expect is not None and result.signed is not None:
        differences = identity_differences(expect, result.signed)
        if differences:
            raise NotVerified(f"{ref.repository.ref(digest)}: signed for another build: {'; '.join(differences)}")
        result.checked.append(f"the signed provenance names {expect.describe()}")
    return result


def verify_index_signature(client: RegistryClient, repository: Repository, digest: str, public: Ed25519PublicKey,
                           skipped: list[str] | None = None) -> str:
    """The line saying a signature by `public` covers the index `digest` (its bytes name each platform's
    manifest by digest); NotVerified otherwise."""
    skipped = [] if skipped is None else skipped
    found = find_attestations(client, repository.path, digest, skipped)
    signatures = [a for a in found if a.kind == "signature" and a.subject == digest]
    if not signatures:
        raise NotVerified(f"{repository.ref(digest)}: the index has no signature attached")
    signed_digest, _ = signed_attestations(_open_signature(client, repository.path, signatures, public, skipped))
    if signed_digest != digest:
        raise NotVerified(f"{repository.ref(digest)}: the signature covers {signed_digest[:19]}, not this index")
    return f"signature by key {key_id(public)[:16]} covers the index {digest}"


def _verify_index(client: RegistryClient, ref: ImageReference, digest: str, public: Ed25519PublicKey,
                  result: Verification) -> Verification:
    """An index: its own signature, then each platform's manifest as an image of its own (bound to the stack and
    SGLang release `result.expected` names, not its config hash: each platform has its own). Every verdict is
    in `result.platforms` (the index's own as platform "index"); NotVerified naming each that failed, with
    the whole report in its `verification`."""
    repository = ref.repository
    # each platform bound to the stack and SGLang release: a config hash is one platform's, not the index's
    expect = replace(result.expected, config_hash=None) if result.expected else None
    try:
        result.checked.append(verify_index_signature(client, repository, digest, public, result.skipped))
        result.platforms.append({"platform": "index", "digest": digest, "verified": True})
    except NotVerified as exc:
        result.platforms.append({"platform": "index", "digest": digest, "verified": False, "reason": str(exc)})
    for entry in client.get_manifest(repository.path, digest).json().get("manifests", []):
        plat = entry.get("platform") or {}
        name = f"{plat.get('os')}/{plat.get('architecture')}"
        child = str(entry.get("digest"))
        try:
            done = verify_image(client, parse_image_reference(repository.ref(child)), public, expect)
            result.platforms.append({"platform": name, "digest": child, "verified": True,
                                     "signed_for": done.signed.as_dict() if done.signed else None})
            result.checked.extend(f"{name}: {line}" for line in done.checked)
        except NotVerified as exc:
            result.platforms.append({"platform": name, "digest": child, "verified": False, "reason": str(exc)})
    if not result.verified:
        failed = [p for p in result.platforms if not p["verified"]]
        raise IndexNotVerified("; ".join(f"{p['platform']} {p['digest'][:19]}: {p['reason']}" for p in failed),
                               result)
    return result


class IndexNotVerified(NotVerified):
    """An index one of whose signatures does not verify; `verification` holds every platform's verdict."""

    def __init__(self, message: str, verification: Verification) -> None:
        super().__init__(message)
        self.verification = verification


def _check_document(result: Verification, want: Attached, body: bytes, digest: str, config: str | None) -> None:
    if want.kind == "sbom":
        sbom = read_sbom(body)
        if config is not None and sbom.image_id != config:
            raise NotVerified(f"the SBOM describes image {str(sbom.image_id)[:19]}, this manifest's config "
                              f"is {config[:19]}")
        result.attestations["sbom"] = {"digest": want.digest, "components": sbom.components,
                                       "python": len(sbom.python), "debian": sbom.debian}
    elif want.kind == "provenance":
        subjects = statement_subjects(body)
        if digest not in subjects:
            raise NotVerified(f"the provenance names {', '.join(s[:19] for s in subjects)}, not {digest[:19]}")
        result.signed = statement_identity(body)
        result.attestations["provenance"] = {"digest": want.digest, "subjects": subjects}
    else:
        result.attestations[want.kind] = {"digest": want.digest}


def parse_ref(ref: str, *, what: str = "REF") -> ImageReference:
    try:
        return parse_image_reference(ref, key=what)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None


def verified_reference(ref: str, key_path: str, *, what: str = "--verify-key",
                       expect: BuildIdentity | None = None) -> tuple[str, Verification]:
    """`repo@digest` of REF when it verifies against the public key (and names `expect`), else NotVerified."""
    public = load_public_key(key_path, what=what)  # bad input first, before the registry is asked
    parsed = parse_ref(ref, what="image")
    result = verify_image(RegistryClient.from_environment(parsed.repository.registry), parsed, public, expect)
    return parsed.repository.ref(result.digest), result


def verified_line(image: str, result: Verification) -> str:
    """The one line that says what verified: the digest, the key, and what the signature names."""
    named = result.signed.describe() if result.signed else "nothing"
    return (f"verified: {one_line(image)} is {result.digest}, signed by key {result.key_id[:16]} for {named}"
            + ("" if result.expected else " (not bound to a stack: give --stack to check it names yours)"))


def verified_for_render(image: str | None, key_path: str, expect: BuildIdentity) -> str:
    """`render --verify-key`: the image by its verified digest, or one line and nothing written."""
    if not image:
        raise BadInput("--verify-key needs --image REPO@sha256:... (or REPO:TAG) of a published image")
    ref, result = verified_reference(image, key_path, expect=expect)
    console(stderr=True).print(verified_line(image, result), markup=False, highlight=False)
    return ref
