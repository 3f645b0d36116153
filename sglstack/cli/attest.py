"""`invoke sbom` and `invoke verify-image`: find or list the SBOM, verify a signature, print or write JSON.
The check itself (and the one `deploy --verify-key` and `render --verify-key` run) is `attest.verify`'s."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

import docker.errors

from ..adapters.docker import docker_client
from ..attest.errors import AttestationError, BadInput, NotVerified
from ..attest.image import image_inventory
from ..attest.provenance import BuildIdentity
from ..attest.sbom import read_sbom, sbom_document
from ..attest.store import MAX_DOCUMENT_BYTES, find_attestations
from ..attest.verify import parse_ref, resolve_digest, verified_line, verified_reference
from ..config.imageref import ImageReference, names_its_registry
from ..core.console import console
from ..core.errors import RegistryError, one_line
from ..core.inputs import loads
from ..core.jsonreport import NO_JSON, JsonReport, dumps
from ..core.network import explained
from ..core.records import parse_utc, utc_now
from ..registry.client import RegistryClient


def expected_identity(stacks_file: str | None, stack_name: str) -> BuildIdentity:
    """What a signature must name to be this stack's release now: its name, config hash and SGLang release."""
    # at call time: the matrix and the renderer are slow to import, and only `--stack` needs them
    from ..config.defaults import default_stacks_file
    from ..config.matrix import load_matrix
    from ..lock.trust import lock_for_build
    from ..render.dockerfile import released_config_hash

    path = stacks_file or default_stacks_file()
    stack = load_matrix(path).get(stack_name)
    return BuildIdentity.of_stack(stack, released_config_hash(stack, lock_for_build(path, stack)))


def verify_image_command(ref: str, *, key: str | None, as_json: JsonReport = NO_JSON, stack: str | None = None,
                         stacks_file: str | None = None) -> int:
    """Exit 0 when verified; NotVerified (exit 1) or BadInput (exit 2) otherwise; the JSON report either way.
    With `--stack`, the signed provenance must name that stack, its config hash and its SGLang release."""
    expect = expected_identity(stacks_file, stack) if stack else None  # the matrix's one line first
    if not key:
        raise BadInput("verify-image: --verify-key PUB (the signer's ed25519 public key, PEM) is required")
    try:
        _, result = verified_reference(ref, key, what="--verify-key", expect=expect)
    except NotVerified as exc:
        as_json.emit({"image": ref, "verified": False, "reason": str(exc),
                      "bound_to": expect.as_dict() if expect else None})
        raise NotVerified(f"{ref}: NOT verified: {exc}") from None
    as_json.emit(result.as_dict())
    out = console()
    for line in result.checked:
        out.print(f"  ok: {one_line(line)}", markup=False, highlight=False)
    for line in result.skipped:
        console(stderr=True).print(f"skipped: {one_line(line)}", markup=False, highlight=False)
    out.print(verified_line(ref, result), markup=False, highlight=False)
    return 0


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


def sbom_command(ref: str, *, as_json: JsonReport = NO_JSON, docker_host: str | None = None,
                 generate: bool = False, key: str | None = None) -> int:
    """The SBOM of REF. With `--verify-key`: only the one a signature by that key covers (exit 1 when none does).
    Without: the one attached to its digest in the registry, else (or with `--generate`) one listed from
    the image itself; either way marked (a `sglstack:signature` property) and said on stderr as unsigned."""
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
    summary = read_sbom(body)
    # The SBOM is the report: printed unless it goes only to --json-out's file.
    document = _marked(body, signature)
    if as_json:
        as_json.emit(document)
    else:
        sys.stdout.write(dumps(document))
    console(stderr=True).print(f"sbom: {one_line(ref)}: {summary.components} components ({len(summary.python)} Python, "
                               f"{summary.debian} Debian), {source}; {signature}"
                               + (f"; written to {as_json.path}" if as_json.path else ""),
                               markup=False, highlight=False)
    return 0


def _listed_sbom(ref: str, docker_host: str | None) -> tuple[bytes, str]:
    client = docker_client(docker_host)
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            image = client.images.pull(ref)
        except docker.errors.APIError as exc:
            reason = str(exc.explanation or exc).splitlines()[0][:200]
            raise AttestationError(f"image '{ref}' is neither attached to a registry SBOM nor pullable: "
                                   f"{explained(reason) or reason}") from None
    created = _created(image.attrs.get("Created"))
    return sbom_document(image_inventory(client, str(image.id)), image_name=ref, image_id=str(image.id),
                         created=created), str(image.id)


def _created(value: Any) -> dt.datetime:
    """The engine's `Created` (RFC 3339 with nanoseconds) to the second, UTC."""
    created = parse_utc(value)
    return created.replace(microsecond=0) if created is not None else utc_now()
