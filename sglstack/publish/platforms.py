"""Which platforms an image serves, and whether a node can run it: the check deploy makes before it pulls.

A reference that names its registry is asked there (an index lists one image per platform; an image manifest
has one, in its config); a local image (`--image` of a local build) says its own. An x86-only tag sent to
Grace nodes (arm64) then fails as one line before anything is pulled or changed, instead of as `exec format
error` in a crash loop on the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import docker
import docker.errors

from ..adapters.docker import engine_image, engine_machine
from ..config.imageref import names_its_registry, parse_image_reference
from ..config.platforms import platform_of_image, platform_of_machine
from ..core.errors import DeployError, SglstackError
from ..registry.client import ManifestNotFound, RegistryClient


class IndexNotItsPlatforms(SglstackError):
    """An index that lists a child the registry lacks, or a child of another platform than it says: bad input
    (the digest given), exit 2."""

    exit_code = 2


def _listed(entry: object) -> str | None:
    """The platform an index entry claims (None: an attestation manifest, unknown/unknown, or none)."""
    plat = entry.get("platform") if isinstance(entry, dict) else None
    if not isinstance(plat, dict) or plat.get("os") in (None, "unknown") or not plat.get("architecture"):
        return None
    return platform_of_image(str(plat["os"]), str(plat["architecture"]), str(plat.get("variant") or ""))


def _config_platform(config: dict[str, Any]) -> str:
    return platform_of_image(str(config.get("os") or ""), str(config.get("architecture") or "unknown"),
                             str(config.get("variant") or ""))


def checked_platforms(client: RegistryClient, repo: str, reference: str) -> tuple[str, ...]:
    """The platforms `reference` serves, each child of an index read (one GET of its manifest and config): a child
    the registry lacks, or whose config is another platform than the index lists it for, is refused (that
    platform's nodes would fail at their pull, or be sent another CPU's image)."""
    manifest = client.get_manifest(repo, reference)
    if not manifest.is_index:
        return (_config_platform(client.image_config(repo, manifest.digest)),)
    out = []
    for entry in manifest.json().get("manifests", []):
        if (listed := _listed(entry)) is None:
            continue
        child = str(entry.get("digest"))  # an entry _listed names a platform of is a dict
        where = f"{client.registry}/{repo}@{manifest.digest} lists {child} for {listed}"
        try:
            config = client.image_config(repo, child)
        except ManifestNotFound:
            raise IndexNotItsPlatforms(f"{where}, which the registry does not have: a node of {listed} would fail "
                                       "at its pull") from None
        if (own := _config_platform(config)) != listed:
            raise IndexNotItsPlatforms(f"{where}, but it is a {own} image: a node of {listed} would run another "
                                       "CPU's image")
        out.append(listed)
    return tuple(dict.fromkeys(out))


def reference_platforms(ref: str, client: docker.DockerClient | None = None) -> tuple[str, ...] | None:
    """The platforms `ref` serves: the engine's image when it holds `ref` (nothing to ask), else its registry's
    answer; None when neither knows it."""
    if client is not None:
        try:
            attrs = engine_image(client, ref).attrs
        except docker.errors.ImageNotFound:
            attrs = None
        if attrs is not None:
            return (platform_of_image(str(attrs.get("Os") or ""), str(attrs.get("Architecture") or "")),)
    if not names_its_registry(ref):
        return None
    parsed = parse_image_reference(ref)
    registry = RegistryClient.from_environment(parsed.repository.registry)
    return checked_platforms(registry, parsed.repository.path, parsed.digest or parsed.tag or "latest")


def engine_platform(client: docker.DockerClient) -> str:
    """The platform of the machine a Docker engine runs on (`docker info`'s OSType and Architecture)."""
    return platform_of_machine(*engine_machine(client))


def platform_problem(ref: str, image_platforms: tuple[str, ...], node: str, node_platforms: tuple[str, ...]
                     ) -> str | None:
    """Why no node can run `ref` (one line), or None when one of `node_platforms` is among the image's."""
    if set(node_platforms) & set(image_platforms):
        return None
    return (f"{ref} is for {' '.join(image_platforms) or 'no platform'}, {node} is {' '.join(node_platforms)}: "
            f"the image cannot run there (nothing was pulled or changed)")


def check_node_platform(stack_name: str, ref: str, node: str, node_platforms: tuple[str, ...],
                        say: Callable[[str], None], client: docker.DockerClient | None = None) -> None:
    """Refuse (DeployError) a node no platform of the image runs on. An image whose platforms cannot be read
    from here (a registry only the nodes reach) is said, and left to the node's pull."""
    try:
        found = reference_platforms(ref, client)
    except IndexNotItsPlatforms as exc:
        raise DeployError(f"stack '{stack_name}': {exc} (nothing was pulled or changed)") from None
    except SglstackError as exc:
        say(f"platform: {ref}'s platforms cannot be read from here ({exc}): not checked against {node}")
        return
    if found is None:
        say(f"platform: {ref} is neither on the engine nor in a registry named by it: not checked against {node}")
    elif problem := platform_problem(ref, found, node, node_platforms):
        raise DeployError(f"stack '{stack_name}': {problem}")
