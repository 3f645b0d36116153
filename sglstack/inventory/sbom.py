"""The SBOM: a CycloneDX 1.6 JSON document from an image's inventory, and the same document read back (pure).

The document is deterministic (bom-refs are purls, the serial number is derived from the image id, the
timestamp is the build's), so the same image and build give the same bytes. The build writes it beside its
record (`SBOM_FILE`); attest signs and attaches that file, and `verify-image` reads it back (`read_sbom`).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
import warnings
from dataclasses import dataclass

from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from ..core.inputs import loads
from ..lockfile.model import VENV_BOOTSTRAP, Lock
from .model import Inventory, InventoryError

SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"
SBOM_FILE = "sbom.cdx.json"  # beside the build record
SBOM_NAMESPACE = uuid.UUID("6f2b1c1e-8a4e-4d55-9c1e-5b1f0c2a7d31")  # serial numbers: uuid5(this, image id)


def _purl_pypi(name: str, version: str) -> PackageURL:
    return PackageURL(type="pypi", name=name, version=version)


def _purl_deb(name: str, version: str, arch: str) -> PackageURL:
    return PackageURL(type="deb", namespace="debian", name=name, version=version,
                      qualifiers={"arch": arch} if arch else None)


def _python_role(name: str, lock: Lock | None) -> str:
    """What the SBOM says of a Python distribution: in the lock, the venv's own bootstrap, or (no lock) neither."""
    if name in VENV_BOOTSTRAP and (lock is None or lock.get(name) is None):
        return "python package (the venv's bootstrap: not compared with the lock)"
    if lock is None:
        return "python package"
    return "python package (in the lock)" if lock.get(name) else "python package (not in the lock)"


def sbom_document(inventory: Inventory, *, image_name: str, image_id: str, created: dt.datetime,
                  lock: Lock | None = None) -> bytes:
    """The CycloneDX 1.6 JSON bytes naming the image by its image id (the config digest, which its
    manifest names: a verifier can check the two agree)."""
    bom = Bom(serial_number=uuid.uuid5(SBOM_NAMESPACE, image_id))
    bom.metadata.timestamp = created.astimezone(dt.UTC).replace(microsecond=0)
    root = Component(name=image_name, version=image_id, type=ComponentType.CONTAINER, bom_ref=f"image:{image_id}")
    bom.metadata.component = root
    components = []
    for name, version in inventory.python.items():
        purl = _purl_pypi(name, version)
        components.append(Component(name=name, version=version, type=ComponentType.LIBRARY, purl=purl,
                                    bom_ref=purl.to_string(), description=_python_role(name, lock)))
    for name, version, arch in inventory.debian:
        purl = _purl_deb(name, version, arch)
        components.append(Component(name=name, version=version, type=ComponentType.LIBRARY, purl=purl,
                                    bom_ref=purl.to_string(), description="debian package"))
    for component in components:
        bom.components.add(component)
    bom.register_dependency(root, components)
    with warnings.catch_warnings():  # cyclonedx warns about an incomplete graph; ours is flat on purpose
        warnings.simplefilter("ignore")
        text = JsonV1Dot6(bom).output_as_string(indent=None)
    return json.dumps(loads(text), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SbomSummary:
    """What an SBOM says, read back: the image it names and its packages by kind."""

    image_id: str | None
    python: dict[str, str]
    debian: int

    @property
    def components(self) -> int:
        return len(self.python) + self.debian


def read_sbom(body: bytes) -> SbomSummary:
    """Parse our CycloneDX JSON back (what `verify-image` checks and `sbom` summarizes)."""
    try:
        doc = loads(body)
        if doc.get("bomFormat") != "CycloneDX":
            raise ValueError("not CycloneDX")
        python, debian = {}, 0
        for comp in doc.get("components") or []:
            purl = str(comp.get("purl") or "")
            if purl.startswith("pkg:pypi/"):
                python[str(comp["name"])] = str(comp.get("version") or "")
            elif purl.startswith("pkg:deb/"):
                debian += 1
        image_id = ((doc.get("metadata") or {}).get("component") or {}).get("version")
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise InventoryError(f"the SBOM is not a CycloneDX JSON document this tool wrote ({exc})") from None
    return SbomSummary(image_id=image_id if isinstance(image_id, str) else None, python=python, debian=debian)
