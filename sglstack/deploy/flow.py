"""Deploy of one stack's compose project, and the restore after a failed one (rollback, undeploy, logs:
`lifecycle`).

A deploy checks every option and the target host first, pulls the image, renders and validates the
compose file, and only then runs `up`. When the new deployment does not start or get healthy, or a
signal (SIGINT, SIGTERM, SIGHUP) arrives while it comes up, the previous deployment is brought back
with its own compose file (same image by digest, same options) and confirmed healthy; the failed
attempt and the restore are both recorded.

Records and what runs agree whatever fails. The record store is probed (a real write, no link on the
way) before the running deployment is touched, so a store that cannot be written refuses the deploy with
nothing changed. When the store fails later anyway (the disk filled meanwhile), the deploy is undone
rather than retried: a retry on a full disk fails again, and the records then name an image that no
longer serves. Undoing brings back what the records already end with (the previous deployment, or
nothing); a failed deploy is undone the same way even when its failure cannot be recorded, and the
error line says what could not be written.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import docker
import docker.errors

from ..adapters.compose import ComposeCLI, detect_compose, error_line
from ..adapters.docker import docker_client, image_exists, is_local_docker_host
from ..config.imageref import image_name, parse_image_reference, pinned_digest
from ..config.schema import Stack
from ..core import signals
from ..core.console import printable_lines
from ..core.errors import ConfigError, DeployError, SglstackError, first_line
from ..core.records import build_root as default_build_root
from ..core.records import stack_dir, utc_timestamp
from ..core.safefiles import (
    OutputNotWritable,
    containing_root,
    create_empty,
)
from ..core.signals import Interrupted
from ..publish import check_node_platform, engine_platform
from ..render import compose as cmp
from ..serving import ServingSpec
from ..serving.phases import MILESTONES, phases_line
from .checks import check_host, check_options
from .files import Saved, discard_saved, restore_files, write_files
from .health import answers_200, container_log_tail, wait_healthy
from .images import ensure_image, image_identity, smoke_report_for
from .kernelcache import deployed_phases, restore_for_compose
from .store import (
    DeploymentRecord,
    append_record,
    display_path,
    not_recorded,
    read_records,
    record_or_why,
    records_path,
    require_recordable,
    serving_now,
)

LOG_TAIL_LINES = 40
Say = Callable[[str], None]


def say_stderr(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)  # it quotes health replies and logs


class DeployFailed(DeployError):
    """The service crashed or never became healthy; `log_tail` holds its last log lines."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass
class Deployment:
    """Where a stack's deployment lives: its build folder, compose project and Docker host."""

    stack: Stack
    build_root: Path = field(default_factory=default_build_root)
    project: str | None = None
    docker_host: str | None = None

    @property
    def out_dir(self) -> Path:
        return stack_dir(self.stack.name, self.build_root)

    @property
    def project_name(self) -> str:
        return self.project or cmp.project_name(self.stack.name)

    def records(self) -> list[DeploymentRecord]:
        return [r for r in read_records(self.build_root, self.stack.name) if r.project == self.project_name]


def wait_limit(spec: ServingSpec, wait_timeout_s: float | None) -> float:
    """How long to wait for health: the option, else the start period plus every healthcheck retry."""
    if wait_timeout_s is not None:
        return wait_timeout_s
    h = spec.healthcheck
    return h.start_period_s + h.interval_s * (h.retries + 1) + h.timeout_s + 30


# ---- deploy ----------------------------------------------------------------------------------------


def deploy(
    dep: Deployment,
    image_ref: str,
    options: cmp.ComposeOptions,
    *,
    compose: ComposeCLI | None = None,
    wait_timeout_s: float | None = None,
    action: str = "deploy",
    smoke_report: str | None = None,
    say: Say = say_stderr,
    verify_key: str | None = None,
) -> DeploymentRecord:
    """Check, render, `up -d`, wait until healthy, record. On failure the previous deployment comes back
    (or, when there was none, the failed one is taken down) and `DeployFailed` says which."""
    stack, project = dep.stack, dep.project_name
    spec = check_options(stack, options, wait_timeout_s)
    require_recordable(dep.build_root, stack.name)
    compose = compose or detect_compose()
    say(f"compose: {compose.label}")
    client = docker_client(dep.docker_host)
    local = is_local_docker_host(dep.docker_host)
    for notice in check_host(client, spec, options, project=project, local=local, docker_host=dep.docker_host):
        say(notice)
    previous = serving_now(dep.records())
    # Before the pull: an image for another platform is one line, not `exec format error` in a restart loop.
    check_node_platform(stack.name, image_ref, f"the node ({_engine_name(client) or 'local engine'})",
                        (engine_platform(client),), say, client)
    ensure_image(client, image_ref, stack.name, say)
    digest, image_id = image_identity(client, image_ref)
    report = smoke_report or smoke_report_for(stack.name, digest, dep.build_root)
    if report is None or report == cmp.UNKNOWN:
        say(f"no passing smoke report is known for {digest or image_ref}: labelled {cmp.LABEL_SMOKE_REPORT}="
            f"{cmp.UNKNOWN} (a published digest carries the report that let it through)")
    files = cmp.deployment_files(stack, image_ref, options=options, smoke_report=report)
    compose_file = dep.out_dir / cmp.compose_filename(options)
    saved = _write_checked_files(dep, compose, options, files, compose_file, say)
    try:
        try:  # a registry fetch may take minutes: a signal or a folder in the way puts the running files back
            cache_line = restore_for_compose(dep.build_root, stack.name, dep.out_dir, spec, image_ref,
                                             image_name(digest, image_id) or "", local=local, verify_key=verify_key,
                                             say=say) if options.kernel_cache else ""
        except BaseException:
            restore_files(saved)
            raise
        return _switch(dep, client, compose, image_ref, options, spec, saved, compose_file, digest, image_id, report,
                       action, local, previous, wait_timeout_s, say, cache_line)
    finally:
        discard_saved(saved)


def _switch(dep: Deployment, client: docker.DockerClient, compose: ComposeCLI, image_ref: str,
            options: cmp.ComposeOptions, spec: ServingSpec, saved: Saved, compose_file: Path, digest: str,
            image_id: str, report: str | None, action: str, local: bool, previous: DeploymentRecord | None,
            wait_timeout_s: float | None, say: Say, cache_line: str = "") -> DeploymentRecord:
    """`up` the written files, wait, record; undo on any failure (see the module's doc)."""
    stack, project = dep.stack, dep.project_name
    attempt = DeploymentRecord(stack=stack.name, action=action, result="failed", image=image_ref, digest=digest,
                               image_id=image_id, time=utc_timestamp(), host=_engine_name(client),
                               docker_host=dep.docker_host or os.environ.get("DOCKER_HOST", ""), project=project,
                               compose_tool=compose.label, compose_file=compose_file.name,
                               options=options.to_record(), smoke_report=report or cmp.UNKNOWN,
                               kernel_cache=cache_line)
    say(f"deploying stack '{stack.name}' as project {project}: {image_ref}")
    try:
        failure, extra = _come_up(dep, client, compose, compose_file, spec, wait_limit(spec, wait_timeout_s),
                                  local, say)
    except BaseException as exc:
        # A signal or an engine error while the new deployment comes up: bring the previous one back first.
        _recover_from(exc, dep, client, compose, attempt, previous, saved, say)
        raise
    if failure is not None:
        outcome = "the restore did not finish"
        try:
            with signals.deferred():
                outcome, tail = _recover(dep, client, compose, attempt, previous, saved, failure, say, extra=extra)
        except Interrupted:  # a signal waited for the restore: say what it left, then exit 128+signal
            say(f"stack '{stack.name}': {failure}; {outcome}")
            raise
        raise DeployFailed(f"stack '{stack.name}' (project {project}): {failure}; {outcome}", tail)

    phases = deployed_phases(client, project)
    if phases and len(phases["unknown"]) < len(MILESTONES):
        say(phases_line(cmp.SERVICE, phases).removeprefix("smoke: "))
    record = replace(attempt, result="healthy", time=utc_timestamp(), phases=phases)
    try:
        append_record(dep.build_root, record)
    except OutputNotWritable as exc:
        # Healthy but unrecorded: undone, so that what serves is what the records end with.
        why = f"healthy, but its record was not written ({exc})"
        outcome, tail = "the undo did not finish", ""
        try:
            with signals.deferred():
                outcome, tail = _recover(dep, client, compose, attempt, previous, saved, why, say)
        except Interrupted:
            say(f"stack '{stack.name}': {why}; {outcome}")
            raise
        raise DeployFailed(f"stack '{stack.name}' (project {project}): {why}; undone: {outcome}", tail) from None
    say(f"stack '{stack.name}' is healthy ({digest or image_ref}); recorded in "
        f"{display_path(records_path(dep.build_root, stack.name))}")
    return record


def _recover_from(exc: BaseException, dep: Deployment, client: docker.DockerClient, compose: ComposeCLI,
                  attempt: DeploymentRecord, previous: DeploymentRecord | None, saved: Saved,
                  say: Say) -> None:
    """Put the previous deployment back after `exc` (the caller raises it again), signals deferred meanwhile."""
    if isinstance(exc, KeyboardInterrupt):
        why = f"interrupted ({exc.name})" if isinstance(exc, Interrupted) else "interrupted"
    else:
        why = _describe(exc)
    outcome = "the restore did not finish"
    try:
        with signals.deferred():
            outcome, _ = _recover(dep, client, compose, attempt, previous, saved, why, say)
    finally:
        say(f"stack '{dep.stack.name}': {why}; {outcome}")


def _write_checked_files(dep: Deployment, compose: ComposeCLI, options: cmp.ComposeOptions, files: dict[str, str],
                         compose_file: Path, say: Say) -> Saved:
    """Write the deployment's files and have compose check them; the saved files of the running deployment.

    Until `up`, the running deployment is untouched: any failure (or signal) puts the files back."""
    saved = write_files(dep.out_dir, files)
    try:
        _ensure_env_file(dep.out_dir, options, say)
        say(f"rendered {display_path(compose_file)} (+ {', '.join(n for n in files if n != compose_file.name)})")
        checked = compose.run(dep.project_name, [compose_file], ["config", "-q"], docker_host=dep.docker_host)
        if checked.returncode != 0:
            raise DeployError(f"{display_path(compose_file)}: compose rejected it: {error_line(checked.stderr)}")
    except BaseException:
        restore_files(saved)
        raise
    return saved


def _come_up(dep: Deployment, client: docker.DockerClient, compose: ComposeCLI, compose_file: Path, spec: ServingSpec,
             wait_s: float, local: bool, say: Say) -> tuple[str | None, str]:
    """`up -d`, then wait for health: (why it failed, compose's stderr), or (None, "") when healthy."""
    up = compose.run(dep.project_name, [compose_file], ["up", "-d", "--remove-orphans", "--no-build"],
                     docker_host=dep.docker_host)
    if up.returncode != 0:
        hint = (
            " (no NVIDIA runtime on this host: deploy with --gpus 0 for a CPU host)"
            if ("device driver" in up.stderr and spec.gpus)
            else ""
        )
        return f"`up` failed: {error_line(up.stderr)}{hint}", up.stderr
    return _health_failure(client, dep, spec, wait_s, local, say), ""


def _describe(exc: BaseException) -> str:
    return first_line(str(exc)) if str(exc) else type(exc).__name__


def _health_failure(
    client: docker.DockerClient, dep: Deployment, spec: ServingSpec, limit_s: float, local: bool, say: Say
) -> str | None:
    """None once the service is healthy (and, on this machine, answers /health on its host port)."""
    verdict, detail = wait_healthy(client, dep.project_name, cmp.SERVICE, limit_s, say)
    if verdict != "healthy":
        return detail
    if local and not spec.host_network:
        port = spec.host_port or spec.port
        if not answers_200(f"http://127.0.0.1:{port}{spec.healthcheck.path}"):
            return f"healthy, but port {port} does not answer {spec.healthcheck.path}"
    return None


def _ensure_env_file(out_dir: Path, options: cmp.ComposeOptions, say: Say) -> None:
    path = Path(options.env_file)
    if path.is_absolute():
        return  # checked before anything changed
    path = out_dir / path
    # Public models need no token; compose refuses a missing env_file, so start from an empty one. A link
    # there is refused: compose would feed whatever it points to into the container's environment.
    if create_empty(containing_root(out_dir, default_build_root()), path, mode=0o600):
        say(f"created an empty {display_path(path)}: put HF_TOKEN there for gated models ({cmp.ENV_EXAMPLE_FILE})")


# ---- after a failed deploy -------------------------------------------------------------------------


def _recover(
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
    shown = previous.registry_digest or (f"{previous.image} (image id {previous.image_id[:19]})"
                                         if previous.image_id else previous.image)
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
            detail = _health_failure(client, dep, spec, wait_limit(spec, None),
                                     is_local_docker_host(dep.docker_host), say)
    except (SglstackError, docker.errors.DockerException, OSError) as exc:
        detail = _describe(exc)
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
        current: str | None = client.images.get(record.image).id
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


def _engine_name(client: docker.DockerClient) -> str:
    try:
        return str(client.info().get("Name", ""))
    except docker.errors.APIError:
        return ""

