"""One release of several platforms: each platform's image pushed by digest, then one index that lists them.

Each entry is checked against what it claims before the index is written: the manifest must be an image (not
an index) in the same repository, and its config's os/architecture must be the platform it is listed for (an
amd64 build listed as arm64 would be pulled on Grace nodes and fail there). The index's media type follows its
children: Docker's manifest list for Docker manifests (what `docker push` of a 20.10 engine writes), the OCI
index for OCI ones, as `docker buildx imagetools create` does. The index is then a digest like any other:
smoked where the node matches, promoted with `invoke publish --digest` (every tag or none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..attest.provenance import BuildIdentity
from ..attest.release import ensure_index_signed
from ..config.imageref import is_digest, tag_problem
from ..config.platforms import ARCH_OF_PLATFORM
from ..config.schema import Stack
from ..core.errors import ConfigError, shown
from ..registry.client import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    RegistryClient,
    compute_digest,
)
from .history import PublishError
from .promotion import target_repository


@dataclass(frozen=True)
class PlatformIndex:
    repository: str
    tag: str
    digest: str
    platforms: tuple[str, ...]
    signed: tuple[str, ...] = ()  # what signing did, one line each (none: --unsigned)

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"


def parse_platform_digests(stack: Stack, given: list[str], tag: str) -> dict[str, str]:
    """`PLATFORM=sha256:...` options: each of the stack's platforms exactly once, nothing else."""
    out: dict[str, str] = {}
    for item in given:
        platform, _, digest = item.partition("=")
        if platform not in stack.platforms:
            raise ConfigError(f"--platform-digest {shown(item, 80)}: {shown(platform, 40) or '(none)'} is not one of "
                              f"the stack's platforms ({' '.join(stack.platforms)})", stack=stack.name)
        if not is_digest(digest):
            raise ConfigError(f"--platform-digest {shown(item, 80)}: give PLATFORM=sha256:<64 hex>", stack=stack.name)
        if platform in out:
            raise ConfigError(f"--platform-digest {platform} given twice", stack=stack.name)
        out[platform] = digest
    if missing := [p for p in stack.platforms if p not in out]:
        raise ConfigError(f"no --platform-digest for {' '.join(missing)}: an index of the stack lists every "
                          f"platform it builds", stack=stack.name)
    if problem := tag_problem(tag):
        raise ConfigError(f"--tag {shown(tag, 80)}: {problem}", stack=stack.name)
    return out


class IndexEntryRefused(PublishError):
    """An entry given for the index is not that platform's image (bad input, exit 2: nothing was written)."""

    exit_code = 2


def index_body(client: RegistryClient, repo: str, children: Mapping[str, str]) -> tuple[bytes, str]:
    """The index of `children` (platform -> manifest digest, each checked to be that platform's image):
    (its bytes, its media type). Nothing is written."""
    entries, types = [], set()
    for platform, digest in children.items():
        manifest = client.get_manifest(repo, digest)
        if manifest.is_index:
            raise IndexEntryRefused(f"{repo}@{digest} ({platform}) is an index, not one platform's image")
        config = client.image_config(repo, digest)
        found = f"{config.get('os')}/{config.get('architecture')}"
        if found != platform:
            raise IndexEntryRefused(f"{repo}@{digest} is a {found} image, listed for {platform}: nothing was written")
        arch = ARCH_OF_PLATFORM[platform]
        entries.append({"mediaType": manifest.media_type, "digest": digest, "size": len(manifest.body),
                        "platform": {"architecture": arch, "os": "linux",
                                     **({"variant": config["variant"]} if config.get("variant") else {})}})
        types.add(manifest.media_type)
    media_type = DOCKER_MANIFEST_LIST if types == {DOCKER_MANIFEST} else OCI_INDEX
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries}, indent=2).encode()
    return body, media_type


def make_index(client: RegistryClient, repo: str, children: Mapping[str, str], tag: str) -> tuple[str, str]:
    """Write the index of `children` (platform -> manifest digest, each checked) under `tag`: (digest, type)."""
    body, media_type = index_body(client, repo, children)
    return client.put_manifest(repo, tag, body, media_type), media_type


def publish_index(stack: Stack, given: list[str], *, tag: str, registry: str | None = None,
                  key: Ed25519PrivateKey | None = None) -> PlatformIndex:
    """The index written by digest, then (with `key`) every platform's manifest and the index signed and
    verified (`ensure_index_signed`), and only then its tag: a signature that fails moves no tag."""
    children = parse_platform_digests(stack, given, tag)
    repo = target_repository(stack, registry)
    client = RegistryClient.from_environment(repo.registry)
    body, media_type = index_body(client, repo.path, children)
    digest = client.put_manifest(repo.path, compute_digest(body), body, media_type)
    signed: list[str] = []
    if key is not None:
        signed = ensure_index_signed(client, repo, digest, children, key, BuildIdentity(stack.name))
    client.put_manifest(repo.path, tag, body, media_type)
    return PlatformIndex(str(repo), tag, digest, tuple(children), tuple(signed))
