"""The compose deployment actions: what `invoke deploy / logs / undeploy / rollback` do, from a `Stack` and typed
values (the face, `sglstack.cli.deploy`, loads the matrix and turns its options into them): the deployment looked
up, the image verified, the node checked, the stack's lock held, then the flow. `k8s_actions` is `--on k8s`'s."""

from __future__ import annotations

from pathlib import Path

from ..adapters.docker import is_local_docker_host
from ..config.schema import Stack
from ..preflight.gate import require_ready
from ..render.compose import ComposeOptions
from ..serving import check_secret_references, require_draft_fits
from .checks import check_options
from .deployment import DeployFailed, Deployment, Say, say_stderr
from .errors import check_tail
from .flow import deploy
from .guard import require_deployed, stack_lock, verified_ref
from .images import resolve_image_ref
from .lifecycle import rollback, service_logs, undeploy
from .store import DeploymentRecord


def deploy_with_compose(stack: Stack, served: ComposeOptions, *, stacks_file: str | None = None,
                        digest: str | None = None, image: str | None = None, verify_key: str | None = None,
                        docker_host: str | None = None, wait_timeout: float | None = None,
                        skip_preflight: bool = False, build_root: Path | None = None, project: str | None = None,
                        say: Say = say_stderr) -> DeploymentRecord:
    """The stack's image served by compose on `docker_host`, the node checked first (GPUs asked for), /health
    waited for, recorded; a failed redeploy restores the previous deployment."""
    dep = Deployment.of(stack, docker_host=docker_host, build_root=build_root, project=project)
    # Every option is checked before the (slower) preflight and before anything on the host changes; so is
    # each `${NAME}` compose interpolates from this environment (compose itself would refuse it only at `up`).
    spec = check_options(dep.stack, served, wait_timeout)
    check_secret_references(spec)
    if is_local_docker_host(docker_host):  # a remote engine's model files are on its host, not here
        require_draft_fits(spec, container=True)
    ref = verified_ref(resolve_image_ref(dep.stack, digest=digest, image=image, build_root=dep.build_root),
                       verify_key, say, stack=dep.stack, stacks_file=stacks_file)
    if served.gpus != 0 and not skip_preflight:
        # The GPU node is checked before compose replaces a running deployment with one that cannot start.
        say(f"preflight of the GPU node ({docker_host or 'local engine'}) in {ref}")
        require_ready(dep.stack, docker_host=docker_host, image=ref)
    try:
        with stack_lock(dep.build_root, dep.stack.name, "deploy"):
            return deploy(dep, ref, served, wait_timeout_s=wait_timeout, say=say, verify_key=verify_key)
    except DeployFailed as exc:
        say(exc.log_tail.rstrip())
        raise


def stack_logs(stack: Stack, *, docker_host: str | None = None,
               tail: int | None = None, build_root: Path | None = None, project: str | None = None) -> str:
    """The deployed stack's server logs (the last `tail` lines)."""
    check_tail(tail)
    dep = Deployment.of(stack, docker_host=docker_host, build_root=build_root, project=project, recorded=True)
    require_deployed(dep)
    return service_logs(dep, tail=tail)


def undeploy_stack(stack: Stack, *, docker_host: str | None = None, build_root: Path | None = None,
                   project: str | None = None) -> None:
    dep = Deployment.of(stack, docker_host=docker_host, build_root=build_root, project=project, recorded=True)
    require_deployed(dep)  # before the lock: nothing deployed writes nothing, not even the lock
    with stack_lock(dep.build_root, dep.stack.name, "undeploy"):
        undeploy(dep)


def rollback_with_compose(stack: Stack, *, docker_host: str | None = None, wait_timeout: float | None = None,
                          build_root: Path | None = None, project: str | None = None,
                          say: Say = say_stderr) -> DeploymentRecord:
    """The image recorded before the current one, redeployed with the options it ran with."""
    dep = Deployment.of(stack, docker_host=docker_host, build_root=build_root, project=project, recorded=True)
    try:
        # The options are checked by `deploy` before anything changes, as for a deploy.
        require_deployed(dep)  # before the lock, as for undeploy
        with stack_lock(dep.build_root, dep.stack.name, "rollback"):
            return rollback(dep, wait_timeout_s=wait_timeout, say=say)
    except DeployFailed as exc:
        say(exc.log_tail.rstrip())
        raise


