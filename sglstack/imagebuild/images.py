"""The engine side of a build: the image held under a tag of its own while it is read and stamped, the
labels stamped on without a layer, and a verified image of the same config found again."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import requests

from ..adapters.buildkit import (
    Builder,
    BuildRequest,
    run_build,
)
from ..adapters.docker import engine_image
from ..config.imageref import parse_image_reference
from ..core.errors import BuildError, first_line
from ..core.labels import CONFIG_HASH_LABEL, VERIFIED_LABEL
from ..core.safefiles import write_text

UNTAG_ATTEMPTS = 5


class ImageVanished(BuildError):
    """The image a build produced was removed before the build could hold it."""


def _untag(client: docker.DockerClient, ref: str) -> None:
    """Remove exactly the tag `ref` (never another name of the image); retried, never silenced.

    Each build holds its image under a tag of its own, so removing ours leaves a concurrent build's
    intact. If a container we did not start uses the image under this one name, the daemon refuses a
    plain removal (409); removing the name with force then drops the name, and the daemon keeps an image
    that a running container uses (one only a stopped container uses goes, as with `docker rmi -f`; that
    container keeps its layers and still starts).
    """
    last: Exception | None = None
    for attempt in range(UNTAG_ATTEMPTS):
        try:
            client.api.remove_image(ref, noprune=True)
            return
        except docker.errors.ImageNotFound:
            return
        except docker.errors.APIError as exc:
            last = exc
            if exc.status_code == 409:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.api.remove_image(ref, force=True, noprune=True)
                return
        except requests.RequestException as exc:
            last = exc
        time.sleep(0.2 * 2 ** attempt)
    reason = first_line(str(last)) if last else "unknown"
    raise BuildError(f"could not remove the temporary tag {ref} ({reason}); remove it with: docker rmi {ref}")


@contextlib.contextmanager
def held_image(client: docker.DockerClient, image_id: str, ref: str) -> Iterator[str]:
    """`image_id` under the temporary tag `ref` while the block runs; the tag goes on every exit.

    The hold keeps the image alive while this build reads and stamps it: a concurrent build of the same
    config, which produced the same image and removes its own tag, cannot make it vanish in between.
    """
    held = parse_image_reference(ref)
    repo, tag = held.name, held.tag
    try:
        try:
            client.api.tag(image_id, repo, tag)
        except docker.errors.ImageNotFound:
            raise ImageVanished(f"the image {image_id[:19]} that BuildKit produced is gone (removed by another "
                                f"process before it could be held): run the build again") from None
        yield ref
    finally:
        # Also when the tag call itself was interrupted: the daemon may have set it anyway.
        _untag(client, ref)


def stamp_labels(builder: Builder, base_ref: str, labels: dict[str, str], docker_host: str | None,
                 platform: str | None = None) -> str:
    """The image `base_ref` names, with `labels` added and no layer added (a FROM-only build).

    BuildKit cannot build FROM an image id, so the caller holds the image under a temporary tag. That
    tag exists only in the local engine, which a buildx builder of its own (docker-container, remote,
    kubernetes: `--builder NAME`) cannot see: the stamp runs on the engine's own builder, `default`.
    The image's `platform` too: BuildKit looks FROM up for the build machine's platform by default, and an
    arm64 image held here is not that (it would go and pull `base_ref` from Docker Hub).
    """
    if builder.instance is not None:
        builder = dataclasses.replace(builder, instance="default")
    with tempfile.TemporaryDirectory(prefix="sglstack-stamp-") as tmp:
        work = Path(tmp)
        dockerfile = work / "Dockerfile"
        write_text(work, dockerfile, f"FROM {base_ref}\n")
        empty = work / "context"
        empty.mkdir()
        req = BuildRequest(dockerfile=dockerfile, context=empty, labels=labels, platform=platform)
        return run_build(builder, req, log_path=work / "stamp.log", docker_host=docker_host, show_progress=False)


def existing_verified_image(client: docker.DockerClient, tag: str, config_hash: str) -> str | None:
    try:
        image = engine_image(client, tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.labels or {}
    if labels.get(CONFIG_HASH_LABEL) == config_hash and labels.get(VERIFIED_LABEL) == "true":
        return str(image.id)
    return None
