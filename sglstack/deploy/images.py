"""Which image a deployment serves: the reference (the published digest by default), its identity on
the engine, and the smoke report that passed it, read from Publish's records through `published_release`
only (Publish owns them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors

from ..adapters.docker import PullFailed, local_image, present_or_pulled
from ..config.imageref import is_digest, parse_image_reference, registry_digest
from ..config.schema import Stack
from ..core.errors import ConfigError, DeployError, first_line
from ..core.records import build_root as default_build_root
from ..publish import PublishedRelease, published_release
from .store import display_path


def published_image_ref(stack: Stack, build_root: Path | None = None) -> str | None:
    """The stack's current published `repo@sha256:...`, as Publish's records say."""
    release = published_release(stack.name, build_root)
    return release.ref if release else None


def resolve_image_ref(
    stack: Stack, *, digest: str | None = None, image: str | None = None, build_root: Path | None = None
) -> str:
    """--image as given; --digest D as `<publish.repository>@D`; else the stack's last published digest."""
    if image and digest:
        raise DeployError(f"stack '{stack.name}': give --digest or --image, not both")
    if image:
        return image
    if digest:
        if "@" in digest:
            try:
                parse_image_reference(digest)
            except ConfigError as exc:
                raise DeployError(f"stack '{stack.name}': --digest {exc}") from None
            return digest
        if not is_digest(digest):
            raise DeployError(f"stack '{stack.name}': --digest '{digest}' is not sha256:<64 hex>")
        return f"{stack.publish.repository}@{digest}"
    ref = published_image_ref(stack, build_root)
    if ref is None:
        raise DeployError(
            f"stack '{stack.name}': no published digest in "
            f"{display_path((build_root or default_build_root()) / 'publish')}; "
            "publish it first, or pass --digest/--image"
        )
    return ref


def ensure_image(client: docker.DockerClient, ref: str, stack_name: str, say: Callable[[str], None]) -> None:
    """Pull `ref` unless the engine has it: an image that cannot be fetched changes nothing."""
    try:
        present_or_pulled(client, ref, before_pull=lambda: say(f"pulling {ref}"))
    except PullFailed as exc:
        raise DeployError(f"stack '{stack_name}': cannot pull {ref}: {exc} (nothing was changed)") from None
    except docker.errors.APIError as exc:
        raise DeployError(f"image {ref}: {first_line(str(exc))}") from None


def image_identity(client: docker.DockerClient, ref: str) -> tuple[str, str]:
    """(registry digest, image id) of a reference: the digest it pins, else the one the engine knows for its
    repository ("" when it was never pushed or pulled); the image id "" when the engine does not hold it."""
    try:
        found = local_image(client, ref)
    except docker.errors.APIError as exc:
        raise DeployError(f"image {ref}: {first_line(str(exc))}") from None
    repo_digests = found.repo_digests if found is not None else ()
    return registry_digest(ref, repo_digests) or "", found.id if found is not None else ""


def passing_smoke_report(release: PublishedRelease | None, digest: str) -> str | None:
    """`sha256:` of the smoke report that passed `digest` (pure): known only for the stack's current
    release, whose record keeps the report's hash. None: no passing report is known for it."""
    if release is None or release.digest != digest or not release.smoke_report_sha256:
        return None
    return release.smoke_report_sha256


def smoke_report_for(stack_name: str, digest: str, build_root: Path | None = None) -> str | None:
    return passing_smoke_report(published_release(stack_name, build_root), digest)
