"""After a failed compose deploy: the attempt recorded, then the previous deployment brought back from the
compose file it ran with (its image by digest, or by image id when its tag moved), confirmed healthy and
recorded; with no previous one, the failed one taken down.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import docker
import docker.errors

from ..adapters.compose import ComposeCLI, error_line
from ..adapters.docker import engine_image, image_exists, is_local_docker_host
from ..config.imageref import image_label, parse_image_reference, pinned_digest
from ..core.clock import utc_timestamp
from ..core.errors import ConfigError, DeployError, SglstackError
from ..render import compose as cmp
from ..serving import ServingSpec
from .deployment import LOG_TAIL_LINES, Deployment, Say, describe, health_failure, wait_limit
from .files import Saved, discard_saved, restore_files, write_files
from .health import container_log_tail
from .store import (
    DeploymentRecord,
    not_recorded,
    record_or_why,
)


def recover(
    dep: Deployment,
    client: docker.DockerClient,
    compose: ComposeCLI,
    attempt: DeploymentRecord,
    previous: DeploymentRecord | None,
    saved: Saved,
    reason: str,
    say: Say,
    *,
    extra: str = "",
) -> tuple[str, str]:
    """Record the failed attempt, then restore the previous deployment (or take the failed one down).

    Returns (what was done, as the end of the error line; the failed service's last log lines).
    """
    try:
        tail = container_log_tail(client, dep.project_name, cmp.SERVICE, LOG_TAIL_LINES)
    except docker.errors.DockerException:
        tail = ""
    tail = "\n".join(filter(None, [tail, extra.strip()]))
    # The failure's record first, but the restore happens whether or not it could be written.
    unrecorded = record_or_why(dep.build_root, replace(attempt, time=utc_timestamp(), note=reason))
    if previous is None:
        compose.run(dep.project_name, [dep.out_dir / attempt.compose_file], ["down", "-v", "--remove-orphans"],
                    docker_host=dep.docker_host)
        discard_saved(saved)
        earlier = any(r.result == "healthy" for r in _readable_records(dep))
        hint = f"; `invoke rollback --stack {dep.stack.name}` restores the last healthy one" if earlier else ""
        return f"took it down (its last log lines are above){hint}{not_recorded(unrecorded)}", tail
    outcome, unrecorded_restore = _restore(dep, client, compose, attempt, previous, saved, say)
    return outcome + not_recorded(unrecorded or unrecorded_restore), tail


def _readable_records(dep: Deployment) -> list[DeploymentRecord]:
    try:
        return dep.records()
    except DeployError:
        return []


def _restore(dep: Deployment, client: docker.DockerClient, compose: ComposeCLI, attempt: DeploymentRecord,
             previous: DeploymentRecord, saved: Saved, say: Say) -> tuple[str, str | None]:
    """Bring `previous` back from the compose file it ran with, wait until healthy, record the restore.
    Returns (what was done; why its record was not written, or None)."""
    # The image that ran, not where its tag points now: a local build has an image id and no registry digest.
    shown = image_label(previous.registry_digest, previous.image_id[:19], previous.image) or previous.image
    say(f"restoring the previous deployment of stack '{dep.stack.name}': {shown}")
    options = cmp.ComposeOptions.from_record(previous.options)
    prev_file = dep.out_dir / previous.compose_file
    spec: ServingSpec | None = None
    detail: str | None = None
    started = False  # whether the previous deployment's service was brought up again
    ref = previous.image
    try:
        restore_files(saved)
        spec = cmp.deploy_spec(dep.stack, options)
        ref = pinned_image(client, previous)
        if ref != previous.image or not prev_file.is_file():
            # Its tag moved, or its file is gone (a cleaned build folder): render it again from its record,
            # serving the very image that ran.
            discard_saved(write_files(dep.out_dir, cmp.deployment_files(dep.stack, ref, options=options,
                                                                        smoke_report=previous.smoke_report)))
        up = compose.run(dep.project_name, [prev_file], ["up", "-d", "--remove-orphans", "--no-build"],
                         docker_host=dep.docker_host)
        if up.returncode != 0:
            detail = f"`up` failed: {error_line(up.stderr)}"
        else:
            started = True
            detail = health_failure(client, dep, spec, wait_limit(spec, None),
                                     is_local_docker_host(dep.docker_host), say)
    except (SglstackError, docker.errors.DockerException, OSError) as exc:
        detail = describe(exc)
    record = replace(
        previous,
        image=ref,
        action="restore",
        result="failed" if detail else "healthy",
        time=utc_timestamp(),
        compose_tool=compose.label,
        note=f"after the failed {attempt.action} of {attempt.image}" + (f": {detail}" if detail else ""),
    )
    unrecorded = record_or_why(dep.build_root, record)
    if detail is None:
        port = (spec.host_port or spec.port) if spec else "?"
        return f"restored {shown} on port {port} (healthy)", unrecorded
    if started:
        # The previous server runs again but is not healthy (yet): leave it, it may still be loading.
        left = "its container is left running, not healthy"
    else:
        # The failed new server must not keep crash-looping (and holding GPUs) in its place.
        compose.run(dep.project_name, [dep.out_dir / attempt.compose_file], ["down", "-v", "--remove-orphans"],
                    docker_host=dep.docker_host)
        left = "the failed one was taken down"
    return (f"restoring the previous deployment ({shown}) failed too: {detail}; nothing healthy is serving, "
            f"{left} (`invoke logs --stack {dep.stack.name}`)"), unrecorded


def pinned_image(client: docker.DockerClient, record: DeploymentRecord) -> str:
    """A reference to exactly the image `record` ran: a tag only while it still points to that image."""
    if pinned_digest(record.image):
        return record.image
    try:
        current: str | None = engine_image(client, record.image).id
    except docker.errors.ImageNotFound:
        current = None
    if current is not None and (not record.image_id or current == record.image_id):
        return record.image
    if record.image_id and image_exists(client, record.image_id):
        return record.image_id
    # An older record may hold the image id as its digest: only a registry digest can be pulled.
    if record.digest and record.digest != record.image_id:
        with contextlib.suppress(ConfigError):
            return f"{parse_image_reference(record.image).name}@{record.digest}"
    raise DeployError(f"{record.image} no longer points to the image that ran ({record.image_id[:19]}), "
                      "and that image is gone from the engine")
