"""An image's inventory: what one image contains, as listed inside it, and its check against the lock (pure).

The inventory is what `incontainer/inventory.py` listed inside the image (`listing.image_inventory`): its
Python distributions and its Debian packages. The build's verify produces it and records it (the SBOM beside
the build record, `sbom`); attest reads what the build recorded.

What is compared with the lock: every Python distribution. What is listed and not compared: the Debian
packages (the base image's and the apt layer's; the lock pins Python only) and the interpreter's own
bootstrap (`pip`, `setuptools`, `wheel` of the venv, `lockfile.VENV_BOOTSTRAP`). The comparison is the
build's own rule (`lockfile.compare_installed`): one rule, one home.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from ..core.errors import SglstackError
from ..lockfile.current import compare_installed
from ..lockfile.model import Lock


class InventoryError(SglstackError):
    """An image's inventory could not be listed or read, or an SBOM is not one this tool wrote."""


@dataclass(frozen=True)
class Inventory:
    """What one image contains, as listed inside it."""

    python: dict[str, str]  # canonical name -> version
    debian: tuple[tuple[str, str, str], ...]  # (package, version, architecture)
    python_version: str | None = None
    # canonical name -> the canonical names its Requires-Dist names (any marker, any extra); empty from a
    # listing made before the field existed
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_listing(cls, listing: Mapping[str, Any]) -> Inventory:
        """From `incontainer/inventory.py`'s JSON; a malformed listing is one line."""
        try:
            python = {str(canonicalize_name(d["name"])): str(d["version"])
                      for d in listing["python_distributions"]}
            requires = {str(canonicalize_name(d["name"])): _required_names(d.get("requires", ()))
                        for d in listing["python_distributions"]}
            debian = tuple(sorted((str(p["name"]), str(p["version"]), str(p.get("arch") or ""))
                                  for p in listing["debian_packages"]))
        except (KeyError, TypeError) as exc:
            raise InventoryError(f"the image's inventory is malformed (missing {exc})") from None
        return cls(python=dict(sorted(python.items())), debian=debian, python_version=listing.get("python"),
                   requires=requires)


def _required_names(names: Any) -> tuple[str, ...]:
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise InventoryError("the image's inventory is malformed (a distribution's 'requires' is not a list "
                               "of names)")
    return tuple(sorted({str(canonicalize_name(n)) for n in names}))


def lock_problems(inventory: Inventory, lock: Lock) -> list[str]:
    """Every Python distribution in the image and not in the lock, in the lock and not in the image, or at
    another version; empty when they agree. Debian packages and the venv's bootstrap are not compared."""
    return list(compare_installed(lock, inventory.python).problems)
