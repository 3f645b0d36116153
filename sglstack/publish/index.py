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
from ..config.platforms import ARCH_OF_PLATFORM, meant_platform, platform_of_image
from ..config.schema import Stack
from ..core.errors import ConfigError, shown
from ..core.labels import (
    CONFIG_HASH_LABEL,
    CUDA_LABEL,
    OVERRIDE_LABEL_PREFIX,
    PATCHES_LABEL,
    PIN_LABEL_PREFIX,
    PYTHON_LABEL,
    SGLANG_LABEL,
    STACK_LABEL,
    VERIFIED_LABEL,
)
from ..registry.client import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    ManifestNotFound,
    RegistryClient,
    compute_digest,
)
from .history import PublishError
from .promotion import target_repository
from .tags import release_tag_pattern


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
            meant = meant_platform(platform)
            raise ConfigError(f"--platform-digest {shown(item, 80)}: {shown(platform, 40) or '(none)'} is not one of "
                              f"the stack's platforms ({' '.join(stack.platforms)})"
                              + (f"; did you mean {meant}?" if meant in stack.platforms else ""), stack=stack.name)
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
    if release_tag_pattern(stack).fullmatch(tag):
        raise ConfigError(f"--tag {tag}: a release tag of the stack (publish.immutable_tag, publish.moving_tags), "
                          "which only invoke publish --digest moves (all together, recorded; an immutable one never): "
                          "give a candidate tag", stack=stack.name)
    return out


class IndexEntryRefused(PublishError):
    """An entry given for the index is not that platform's image (bad input, exit 2: nothing was written)."""

    exit_code = 2


def _labels(config: Mapping[str, object]) -> dict[str, str]:
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _not_this_build(stack: str, entry: str, labels: Mapping[str, str]) -> str | None:
    """Why the image `entry` is not a verified build of `stack` (the labels the build stamps), or None."""
    if labels.get(STACK_LABEL) != stack:
        found = f"'{shown(labels[STACK_LABEL], 40)}'" if STACK_LABEL in labels else "none"
        return f"{entry} is not a build of stack '{stack}' (its {STACK_LABEL} label: {found})"
    if not labels.get(CONFIG_HASH_LABEL):
        return f"{entry} has no {CONFIG_HASH_LABEL} label: not an image `invoke build` made"
    if labels.get(VERIFIED_LABEL) != "true":
        return f"{entry} is not a verified build (no {VERIFIED_LABEL}=true label)"
    return None


def _entry(client: RegistryClient, repo: str, platform: str, digest: str, stack: str | None
           ) -> tuple[dict[str, object], str, dict[str, str]]:
    """One checked entry of the index: (its descriptor, its manifest's media type, its labels)."""
    entry = f"{repo}@{digest} ({platform})"
    try:
        manifest = client.get_manifest(repo, digest)
    except ManifestNotFound:
        raise IndexEntryRefused(f"{entry}: no such manifest in {client.registry}: nothing was written") from None
    if manifest.is_index:
        raise IndexEntryRefused(f"{entry} is an index, not one platform's image: nothing was written")
    config = client.image_config(repo, digest)
    found = platform_of_image(str(config.get("os") or ""), str(config.get("architecture") or ""),
                              str(config.get("variant") or ""))
    if found != platform:
        raise IndexEntryRefused(f"{repo}@{digest} is a {found} image, listed for {platform}: nothing was written")
    labels = _labels(config)
    if stack is not None and (problem := _not_this_build(stack, entry, labels)):
        raise IndexEntryRefused(f"{problem}: nothing was written")
    descriptor = {"mediaType": manifest.media_type, "digest": digest, "size": len(manifest.body),
                  "platform": {"architecture": ARCH_OF_PLATFORM[platform], "os": "linux",
                               **({"variant": config["variant"]} if config.get("variant") else {})}}
    return descriptor, manifest.media_type, labels


def _entry_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a build stamps from the stack entry alone, the same for every platform: its pins, overrides,
    Python, CUDA and patches (not its base, lock or config hash, which are each platform's own)."""
    prefixes = (PIN_LABEL_PREFIX, OVERRIDE_LABEL_PREFIX)
    return {k: v for k, v in labels.items() if k in (PYTHON_LABEL, CUDA_LABEL, PATCHES_LABEL) or k.startswith(prefixes)}


def _configs_differ(entry_labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """'io.sglstack.pin.requests: 2.32.4 on linux/amd64, 2.32.3 on linux/arm64' for the first label the entries
    do not agree on (a platform built from an older stack entry), or None."""
    for key in sorted({k for labels in entry_labels.values() for k in labels}):
        values = {p: labels.get(key) for p, labels in entry_labels.items()}
        if len(set(values.values())) > 1:
            return f"{key}: " + ", ".join(f"{shown(v, 40) if v is not None else 'none'} on {p}"
                                          for p, v in values.items())
    return None


def index_body(client: RegistryClient, repo: str, children: Mapping[str, str], stack: str | None = None
               ) -> tuple[bytes, str]:
    """The index of `children` (platform -> manifest digest, each checked to be that platform's image and, given
    `stack`, a verified build of that stack, all of one SGLang release): (its bytes, its media type). Nothing
    is written."""
    entries, types, releases, entry_labels = [], set(), {}, {}
    for platform, digest in children.items():
        descriptor, media_type, labels = _entry(client, repo, platform, digest, stack)
        entries.append(descriptor)
        types.add(media_type)
        if SGLANG_LABEL in labels:
            releases[platform] = labels[SGLANG_LABEL]
        entry_labels[platform] = _entry_labels(labels)
    if stack is not None and len(set(releases.values())) > 1:
        said = ", ".join(f"{shown(v, 40)} on {p}" for p, v in releases.items())
        raise IndexEntryRefused(f"the entries are builds of different SGLang releases ({said}): one index is one "
                                "release: nothing was written")
    if stack is not None and (differ := _configs_differ(entry_labels)):
        raise IndexEntryRefused(f"the entries are builds of different versions of stack '{stack}' ({differ}): one "
                                "index is one stack entry; rebuild the platform built from the older one: nothing "
                                "was written")
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
    body, media_type = index_body(client, repo.path, children, stack.name)
    digest = client.put_manifest(repo.path, compute_digest(body), body, media_type)
    signed: list[str] = []
    if key is not None:
        signed = ensure_index_signed(client, repo, digest, children, key, BuildIdentity(stack.name))
    client.put_manifest(repo.path, tag, body, media_type)
    return PlatformIndex(str(repo), tag, digest, tuple(children), tuple(signed))
