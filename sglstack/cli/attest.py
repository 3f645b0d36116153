"""`invoke sbom` and `invoke verify-image`: find or list the SBOM, verify a signature, print or write JSON.
The check itself (and the one `deploy --verify-key` and `render --verify-key` run) is `attest.verify`'s."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import docker.errors

from ..adapters.docker import docker_client
from ..attest.errors import AttestationError, BadInput, NotVerified
from ..attest.image import image_inventory
from ..attest.sbom import read_sbom, sbom_document
from ..attest.store import find_attestations
from ..attest.verify import parse_ref, resolve_digest, verified_reference
from ..config.imageref import ImageReference, names_its_registry
from ..core.console import console
from ..core.errors import one_line
from ..core.inputs import loads
from ..core.records import utc_now, write_output
from ..core.safefiles import OutputNotWritable
from ..registry.client import RegistryClient


def _write_json(path: str, data: dict[str, Any]) -> None:
    try:
        write_output(Path(path), json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OutputNotWritable as exc:
        raise BadInput(f"--json {path}: cannot write ({exc.reason or exc})") from None


def verify_image_command(ref: str, *, key: str | None, json_path: str | None = None) -> int:
    """Exit 0 when verified; NotVerified (exit 1) or BadInput (exit 2) otherwise; `--json` either way."""
    if not key:
        raise BadInput("verify-image: --key PUB (the signer's ed25519 public key, PEM) is required")
    try:
        _, result = verified_reference(ref, key, what="--key")
    except NotVerified as exc:
        if json_path:
            _write_json(json_path, {"image": ref, "verified": False, "reason": str(exc)})
        raise NotVerified(f"{ref}: NOT verified: {exc}") from None
    if json_path:
        _write_json(json_path, result.as_dict())
    out = console()
    for line in result.checked:
        out.print(f"  ok: {one_line(line)}", markup=False, highlight=False)
    out.print(f"verified: {one_line(ref)} is {result.digest}, signed by key {result.key_id[:16]} with its SBOM and "
              f"provenance", markup=False, highlight=False)
    return 0


def _attached_sbom(parsed: ImageReference) -> tuple[str, bytes] | None:
    client = RegistryClient.from_environment(parsed.repository.registry)
    repo = parsed.repository.path
    digest = resolve_digest(client, parsed)
    for art in find_attestations(client, repo, digest):
        if art.kind == "sbom" and art.subject == digest:
            return digest, client.get_blob(repo, art.document_digest)
    return None


def sbom_command(ref: str, *, json_path: str | None = None, docker_host: str | None = None,
                 generate: bool = False) -> int:
    """The SBOM of REF: the one attached to its digest in the registry, else (or with `--generate`) one
    listed from the image itself (pulled into the engine when it is not there)."""
    body: bytes | None = None
    source = ""
    parsed = parse_ref(ref) if names_its_registry(ref) else None
    if parsed is not None and not generate:
        try:
            found = _attached_sbom(parsed)
        except NotVerified:
            found = None  # not in the registry under that name: list the image itself instead
        if found:
            body, source = found[1], f"attached to {parsed.repository.ref(found[0])}"
    if body is None:
        client = docker_client(docker_host)
        try:
            image = client.images.get(ref)
        except docker.errors.ImageNotFound:
            try:
                image = client.images.pull(ref)
            except docker.errors.APIError as exc:
                raise AttestationError(f"image '{ref}' is neither attached to a registry SBOM nor pullable: "
                                       f"{str(exc.explanation or exc).splitlines()[0][:200]}") from None
        created = _created(image.attrs.get("Created"))
        body = sbom_document(image_inventory(client, str(image.id)), image_name=ref, image_id=str(image.id),
                             created=created)
        source = f"listed from image {str(image.id)[:19]}"
    summary = read_sbom(body)
    if json_path:
        try:
            write_output(Path(json_path), body)
        except OutputNotWritable as exc:
            raise BadInput(f"--json {json_path}: cannot write ({exc.reason or exc})") from None
    else:
        sys.stdout.write(json.dumps(loads(body), indent=2, sort_keys=True) + "\n")
    console(stderr=True).print(f"sbom: {one_line(ref)}: {summary.components} components ({len(summary.python)} Python, "
                               f"{summary.debian} Debian), {source}"
                               + (f"; written to {json_path}" if json_path else ""), markup=False, highlight=False)
    return 0


def _created(value: Any) -> dt.datetime:
    """The engine's `Created` (RFC 3339 with nanoseconds) to the second, UTC."""
    try:
        return dt.datetime.strptime(str(value)[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return utc_now()
