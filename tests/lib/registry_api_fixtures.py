"""The registry client API tests' answers and registries (tests/unit/test_registry_client_api*.py): an image, its
config and an index as a registry serves them, scripted registries (tests/lib/registry_double) made per test and
closed after it, and the answers the tests script (JSON, a Bearer challenge)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

from registry_double import RegistryDouble

from sglstack.registry.client import MANIFEST_MEDIA_TYPES, OCI_INDEX, OCI_MANIFEST, compute_digest

ACCEPT = ", ".join(MANIFEST_MEDIA_TYPES)
CONFIG = json.dumps({"config": {"Labels": {"a": "b"}}}).encode()
CONFIG_DIGEST = compute_digest(CONFIG)
IMAGE = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST,
                               "size": len(CONFIG)},
                    "layers": [{"digest": "sha256:" + "1" * 64}, {"digest": "sha256:" + "2" * 64}]}).encode()
IMAGE_DIGEST = compute_digest(IMAGE)
INDEX = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                    "manifests": [{"digest": IMAGE_DIGEST}, {"digest": "sha256:" + "3" * 64}]}).encode()
INDEX_DIGEST = compute_digest(INDEX)
ERROR = json.dumps({"errors": [{"code": "DENIED", "message": "no"}]}).encode()


@contextlib.contextmanager
def scripted_registries() -> Iterator[Callable[[dict], RegistryDouble]]:
    """Scripted registries (tests/lib/registry_double): "METHOD /path?query" -> its answers, 404 to the rest; each
    closed at the end (the tests' `registry` fixture)."""
    made: list[RegistryDouble] = []

    def make(answers):
        made.append(RegistryDouble(answers))
        return made[-1]

    try:
        yield make
    finally:
        for r in made:
            r.close()


def _asked(reg: RegistryDouble) -> list[str]:
    """Each request as "METHOD /path?query"."""
    return [f"{m} {p}" for m, p, *_ in reg.seen]


def _json(status, data, **headers):
    return (status, {"Content-Type": "application/json", **headers}, json.dumps(data).encode())


def _bearer(reg_host: str, extra: str = ',service="reg",scope="repository:a:pull"', path: str = "/token"
            ) -> dict[str, str]:
    return {"WWW-Authenticate": f'Bearer realm="http://{reg_host}{path}"{extra}'}
