"""The deployment actions: what `invoke deploy / status / logs / undeploy / rollback` do, from typed values
(the face, `sglstack.cli.deploy`, turns its options into them): the deployment looked up, the image verified,
the node checked, the stack's lock held, then the flow.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..adapters.docker import docker_client, is_local_docker_host
from ..adapters.kubectl import Kubectl, find_kubectl
from ..attest.provenance import BuildIdentity
from ..attest.verify import verified_line, verified_reference
from ..config.defaults import default_stacks_file
from ..config.imageref import pinned_digest
from ..config.matrix import load_matrix
from ..config.schema import Stack
from ..core.errors import DeployError, SglstackError
from ..core.folderlock import folder_lock
from ..core.records import BadLine, stack_dir
from ..core.records import build_root as default_build_root
from ..lock.trust import lock_for_build
from ..preflight.gate import require_ready
from ..publish import check_node_platform, reference_platforms
from ..render import compose as cmp
from ..render.dockerfile import released_config_hash
from ..render.k8s import K8sOptions, k8s_spec
from ..serving import check_secret_references, require_draft_fits
from .checks import check_options
from .deployment import DeployFailed, Deployment, Say, say_stderr
from .errors import DeployOptionError
from .flow import deploy
from .health import project_containers
from .images import resolve_image_ref, smoke_report_for
from .k8s_flow import K8sDeployment, deploy_k8s, rollback_k8s
from .kernelcache import k8s_caches
from .lifecycle import rollback, service_logs, undeploy
from .status import StackStatus, deployment_status
from .store import DeploymentRecord, read_records, records_path


def _deployment(
    stacks_file: str | None,
    stack_name: str,
    docker_host: str | None,
    build_root: Path | None,
    project: str | None,
    *,
    from_records: bool = False,
) -> Deployment:
    """The deployment to act on; for logs/undeploy/rollback, project and host default to the last record's."""
    stack = load_matrix(stacks_file or default_stacks_file()).get(stack_name)
    dep = Deployment(
        stack=stack, build_root=build_root or default_build_root(), project=project, docker_host=docker_host
    )
    if from_records:
        # The stack's compose records only: a k8s deployment of it is kubectl's, not a compose project.
        records = [r for r in read_records(dep.build_root, stack_name) if r.target == "compose"]
        if records:
            dep.project = dep.project or records[-1].project
            dep.docker_host = dep.docker_host or records[-1].docker_host or None
    return dep


def _k8s_deployment(stacks_file: str | None, stack_name: str, build_root: Path | None, context: str | None,
                    namespace: str | None) -> K8sDeployment:
    stack = load_matrix(stacks_file or default_stacks_file()).get(stack_name)
    return K8sDeployment(stack=stack, build_root=build_root or default_build_root(),
                         kubectl=find_kubectl(context, namespace))


def verified_ref(ref: str, verify_key: str | None, say: Say, *, stack: Stack, stacks_file: str | None) -> str:
    """With --verify-key: the image by the digest that verified (a tag is not trusted twice), signed for this
    stack, its config hash as the matrix gives it now and its SGLang release; or a one-line refusal before
    anything changes. Without it: `ref` as it is."""
    if not verify_key:
        return ref
    lock = lock_for_build(stacks_file or default_stacks_file(), stack)
    expect = BuildIdentity.of_stack(stack, released_config_hash(stack, lock))
    verified, result = verified_reference(ref, verify_key, expect=expect)
    say(verified_line(ref, result) + " with its SBOM and provenance")
    return verified


def deploy_on_k8s(stack_name: str, served: K8sOptions, *, stacks_file: str | None = None, digest: str | None = None,
                  image: str | None = None, verify_key: str | None = None, context: str | None = None,
                  namespace: str | None = None, wait_timeout: float | None = None, skip_preflight: bool = False,
                  build_root: Path | None = None, say: Say = say_stderr) -> DeploymentRecord:
    """A LeaderWorkerSet of the stack's image (by `digest`, else `image`, else the last published), applied
    with kubectl and waited for; recorded."""
    stack = load_matrix(stacks_file or default_stacks_file()).get(stack_name)
    spec = k8s_spec(stack, served)  # every option, before kubectl is even looked for
    if wait_timeout is not None and not wait_timeout > 0:
        raise DeployOptionError(f"stack '{stack.name}': --wait-timeout {wait_timeout:g}: must be more than 0 seconds")
    root = build_root or default_build_root()
    # The cluster is found before the image is verified (registry calls): no context is one line at once.
    kubectl = find_kubectl(context, namespace)
    ref = verified_ref(resolve_image_ref(stack, digest=digest, image=image, build_root=root),
                       verify_key, say, stack=stack, stacks_file=stacks_file)
    dep = K8sDeployment(stack=stack, build_root=root, kubectl=kubectl)
    if spec.gpus and not skip_preflight:
        say("preflight: not run for --on k8s (the GPU nodes are the cluster's); the startup probe waits "
            f"up to {spec.healthcheck.start_period_s}s for /health")
    _check_nodes(kubectl, stack, ref, say)
    try:
        with _stack_lock(root, stack.name, "deploy"):
            caches = k8s_caches(spec, ref, verify_key, say) if served.kernel_cache else None
            return deploy_k8s(dep, ref, served, wait_timeout_s=wait_timeout,
                              smoke_report=smoke_report_for(stack.name, pinned_digest(ref) or "", root), say=say,
                              caches=caches)
    except DeployFailed as exc:
        if exc.log_tail:
            say(exc.log_tail.rstrip())
        raise


def deploy_with_compose(stack_name: str, served: cmp.ComposeOptions, *, stacks_file: str | None = None,
                        digest: str | None = None, image: str | None = None, verify_key: str | None = None,
                        docker_host: str | None = None, wait_timeout: float | None = None,
                        skip_preflight: bool = False, build_root: Path | None = None, project: str | None = None,
                        say: Say = say_stderr) -> DeploymentRecord:
    """The stack's image served by compose on `docker_host`, the node checked first (GPUs asked for), /health
    waited for, recorded; a failed redeploy restores the previous deployment."""
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project)
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
        with _stack_lock(dep.build_root, dep.stack.name, "deploy"):
            return deploy(dep, ref, served, wait_timeout_s=wait_timeout, say=say, verify_key=verify_key)
    except DeployFailed as exc:
        say(exc.log_tail.rstrip())
        raise


def status_rows(stack: str | None = None, *, docker_host: str | None = None, build_root: Path | None = None
                ) -> tuple[list[StackStatus], list[BadLine]]:
    """Each deployed stack's row (or `stack`'s), and the records lines that did not read."""
    root = build_root or default_build_root()
    if stack and not records_path(root, stack).parent.is_dir():
        # No records of it: a stack of stacks.yaml not deployed yet ("nothing deployed"), or a typo, which
        # gets the refusal (and "did you mean") of every task's --stack, not an empty table and exit 0.
        load_matrix(default_stacks_file()).get(stack)
    bad: list[BadLine] = []
    rows = deployment_status(build_root=root, docker_host=docker_host, stack=stack, bad_lines=bad)
    return rows, bad


class NotDeployed(DeployError):
    """logs, undeploy or rollback of a stack with nothing deployed: a check that ran (exit 1)."""


def require_deployed(dep: Deployment) -> None:
    """logs, undeploy and rollback act on a deployment: with no container of the stack's compose project
    on the engine (running or stopped) they say so in one line, not in compose's words ("Couldn't find env
    file") nor with a "removed" of nothing."""
    if not project_containers(docker_client(dep.docker_host), dep.project_name):
        raise NotDeployed(f"stack '{dep.stack.name}' is not deployed (compose project {dep.project_name} has no "
                          "container on the engine)")


def stack_logs(stack_name: str, *, stacks_file: str | None = None, docker_host: str | None = None,
               tail: int | None = None, build_root: Path | None = None, project: str | None = None) -> str:
    """The deployed stack's server logs (the last `tail` lines)."""
    if tail is not None and tail < 1:
        raise DeployOptionError(f"--tail {tail}: must be at least 1 line")
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    require_deployed(dep)
    return service_logs(dep, tail=tail)


def undeploy_stack(stack_name: str, *, stacks_file: str | None = None, docker_host: str | None = None,
                   build_root: Path | None = None, project: str | None = None) -> None:
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    require_deployed(dep)  # before the lock: nothing deployed writes nothing, not even the lock
    with _stack_lock(dep.build_root, dep.stack.name, "undeploy"):
        undeploy(dep)


def rollback_on_k8s(stack_name: str, *, stacks_file: str | None = None, context: str | None = None,
                    namespace: str | None = None, wait_timeout: float | None = None, build_root: Path | None = None,
                    say: Say = say_stderr) -> DeploymentRecord:
    """The LeaderWorkerSet of the k8s deployment recorded before the current one, applied again."""
    root = build_root or default_build_root()
    records = [r for r in read_records(root, stack_name) if r.target == "k8s"]
    if not records:
        load_matrix(stacks_file or default_stacks_file()).get(stack_name)  # a typo: did you mean
        raise NotDeployed(f"stack '{stack_name}' is not deployed on k8s (no k8s deployment in "
                          f"{records_path(root, stack_name)})")
    if namespace is None:  # the namespace the last k8s deployment of the stack went to
        namespace = records[-1].options.get("namespace")  # type: ignore[assignment]
    k8s_dep = _k8s_deployment(stacks_file, stack_name, root, context, namespace)
    with _stack_lock(root, stack_name, "rollback"):
        return rollback_k8s(k8s_dep, wait_timeout_s=wait_timeout, say=say,
                            check_image=lambda ref: _check_nodes(k8s_dep.kubectl, k8s_dep.stack, ref, say))


def _check_nodes(kubectl: Kubectl, stack: Stack, ref: str, say: Say) -> None:
    """Before anything is applied (a deploy or a rollback): the pods land on nodes of the stack's platforms (their
    node affinity), so the image must serve every platform such a node of the cluster has; an image no node can
    run never reaches the cluster."""
    nodes = kubectl.node_platforms()
    if isinstance(nodes, str):
        say(f"platform: the nodes of {kubectl.context} cannot be listed ({nodes}): not checked against {ref}")
        return
    check_node_platform(stack.name, ref, f"every node of {kubectl.context}", nodes, say)
    reachable = [p for p in stack.platforms if p in nodes]
    if not reachable:  # the pods' node affinity is the stack's platforms: none of them, nowhere to run
        raise DeployError(f"stack '{stack.name}': its pods run only on {' '.join(stack.platforms)} nodes (the stack's "
                          f"platforms), and every node of {kubectl.context} is {' '.join(nodes)}: nothing could be "
                          "scheduled (nothing was pulled or changed)")
    if len(reachable) < 2:
        return  # the one platform the pods may land on is the image's (checked above)
    try:  # a mixed cluster: every platform the pods may land on must be served
        served = reference_platforms(ref) or tuple(reachable)
    except SglstackError:
        return  # said by the check above
    if missing := [p for p in reachable if p not in served]:
        raise DeployError(f"stack '{stack.name}': {ref} is for {' '.join(served)}, and {kubectl.context} has "
                          f"{' '.join(missing)} nodes the pods may land on (the stack is {' '.join(stack.platforms)}): "
                          "the image cannot run there (nothing was pulled or changed)")


def rollback_with_compose(stack_name: str, *, stacks_file: str | None = None, docker_host: str | None = None,
                          wait_timeout: float | None = None, build_root: Path | None = None,
                          project: str | None = None, say: Say = say_stderr) -> DeploymentRecord:
    """The image recorded before the current one, redeployed with the options it ran with."""
    dep = _deployment(stacks_file, stack_name, docker_host, build_root, project, from_records=True)
    try:
        # The options are checked by `deploy` before anything changes, as for a deploy.
        require_deployed(dep)  # before the lock, as for undeploy
        with _stack_lock(dep.build_root, dep.stack.name, "rollback"):
            return rollback(dep, wait_timeout_s=wait_timeout, say=say)
    except DeployFailed as exc:
        say(exc.log_tail.rstrip())
        raise


# One deploy, rollback or undeploy of a stack at a time, and none while it builds or bisects: two would
# replace each other's containers and interleave their records. The second is refused with one line,
# after its options were checked (bad input writes nothing, not even the lock).
def _stack_lock(build_root: Path | None, stack: str, task: str) -> contextlib.AbstractContextManager[None]:
    if not stack or Path(stack).name != stack or stack in (".", ".."):
        return contextlib.nullcontext()  # not a stack name: the matrix says so, in its own one line
    root = build_root or default_build_root()
    return folder_lock(stack_dir(stack, root), task, root=root, stack=stack)
