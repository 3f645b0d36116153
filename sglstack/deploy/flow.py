"""Deploy of one stack's compose project (the restore after a failed one: `restore`; rollback, undeploy, logs:
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

import os
from dataclasses import replace
from pathlib import Path

import docker
import docker.errors

from ..adapters.compose import ComposeCLI, detect_compose, error_line
from ..adapters.docker import docker_client, is_local_docker_host
from ..config.imageref import image_name
from ..core.clock import utc_timestamp
from ..core.errors import DeployError
from ..core.safefiles import OutputNotWritable
from ..core.signals import Interrupted, deferred
from ..render import compose as cmp
from ..serving import ServingSpec
from .checks import check_engine_platform, check_host, check_options, engine_name
from .deployment import DeployFailed, Deployment, Say, describe, health_failure, say_stderr, wait_limit
from .files import Saved, discard_saved, ensure_env_file, restore_files, write_files
from .images import ensure_image, image_identity, smoke_report_for
from .kernelcache import restore_for_compose
from .phases import deployed_phases, say_phases
from .restore import recover
from .store import (
    DeploymentRecord,
    append_record,
    display_path,
    records_path,
    require_recordable,
    serving_now,
)

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
    check_engine_platform(client, stack.name, image_ref, say)
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
                               image_id=image_id, time=utc_timestamp(), host=engine_name(client),
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
            with deferred():
                outcome, tail = recover(dep, client, compose, attempt, previous, saved, failure, say, extra=extra)
        except Interrupted:  # a signal waited for the restore: say what it left, then exit 128+signal
            say(f"stack '{stack.name}': {failure}; {outcome}")
            raise
        raise DeployFailed(f"stack '{stack.name}' (project {project}): {failure}; {outcome}", tail)

    phases = deployed_phases(client, project)
    say_phases(cmp.SERVICE, phases, say)
    record = replace(attempt, result="healthy", time=utc_timestamp(), phases=phases)
    try:
        append_record(dep.build_root, record)
    except OutputNotWritable as exc:
        # Healthy but unrecorded: undone, so that what serves is what the records end with.
        why = f"healthy, but its record was not written ({exc})"
        outcome, tail = "the undo did not finish", ""
        try:
            with deferred():
                outcome, tail = recover(dep, client, compose, attempt, previous, saved, why, say)
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
        why = describe(exc)
    outcome = "the restore did not finish"
    try:
        with deferred():
            outcome, _ = recover(dep, client, compose, attempt, previous, saved, why, say)
    finally:
        say(f"stack '{dep.stack.name}': {why}; {outcome}")


def _write_checked_files(dep: Deployment, compose: ComposeCLI, options: cmp.ComposeOptions, files: dict[str, str],
                         compose_file: Path, say: Say) -> Saved:
    """Write the deployment's files and have compose check them; the saved files of the running deployment.

    Until `up`, the running deployment is untouched: any failure (or signal) puts the files back."""
    saved = write_files(dep.out_dir, files)
    try:
        ensure_env_file(dep.out_dir, options.env_file, say)
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
    return health_failure(client, dep, spec, wait_s, local, say), ""
