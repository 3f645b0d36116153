"""The deployment actions: what `invoke deploy / status / logs / undeploy / rollback` do.

Each takes its options dataclass (`options.py`, the one definition of every flag) and calls the flow.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from pathlib import Path

from ..adapters.docker import docker_client, is_local_docker_host
from ..adapters.kubectl import find_kubectl
from ..attest.provenance import BuildIdentity
from ..attest.verify import verified_line, verified_reference
from ..config.defaults import default_stacks_file
from ..config.imageref import pinned_digest
from ..config.matrix import load_matrix
from ..config.schema import Stack
from ..core.errors import DeployError, did_you_mean
from ..core.folderlock import folder_lock
from ..core.jsonreport import NO_JSON, JsonReport
from ..core.records import BadLine
from ..core.records import build_root as default_build_root
from ..lock.trust import lock_for_build
from ..preflight.gate import require_ready
from ..publish import check_node_platform
from ..render import compose as cmp
from ..render.dockerfile import released_config_hash
from ..render.k8s import HF_TOKEN_SECRET, K8sOptions, k8s_spec
from ..serving import require_draft_fits
from .checks import check_options
from .flow import DeployFailed, Deployment, Say, deploy, say_stderr
from .health import project_containers
from .images import resolve_image_ref, smoke_report_for
from .k8s_flow import K8sDeployment, deploy_k8s, rollback_k8s
from .kernelcache import k8s_caches
from .lifecycle import rollback, service_logs, undeploy
from .options import (
    TARGETS,
    DeployOptionError,
    DeployOptions,
    LogsOptions,
    RollbackOptions,
    StatusOptions,
    UndeployOptions,
)
from .status import deployment_status, print_status
from .store import DeploymentRecord, bad_record_line, read_records, records_path


def compose_options(options: DeployOptions) -> cmp.ComposeOptions:
    """The deploy options that shape the served service (recorded, so a rollback serves the same)."""
    return cmp.ComposeOptions(
        eagle3=options.eagle3,
        gpus=options.gpus,
        port=options.port,
        hf_cache=options.hf_cache,
        start_period_s=options.start_period,
        restart=options.restart,
        env_file=str(Path(options.env_file).resolve()) if options.env_file else cmp.ENV_FILE,
        nnodes=options.nnodes,
        node_rank=options.node_rank,
        dist_init_addr=options.dist_init_addr,
        healthcheck_interval_s=options.health_interval,
        kernel_cache=options.kernel_cache,
    )


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


def k8s_options(options: DeployOptions) -> K8sOptions:
    """The deploy options that shape the LeaderWorkerSet (recorded, so a rollback applies the same)."""
    return K8sOptions(
        eagle3=options.eagle3,
        gpus=options.gpus,
        nnodes=options.nnodes,
        replicas=1 if options.replicas is None else options.replicas,
        namespace=options.namespace,
        host_network=options.host_network,
        rdma=options.rdma,
        hf_cache=options.hf_cache,
        hf_token_secret=options.hf_token_secret or HF_TOKEN_SECRET,
        start_period_s=options.start_period,
        kernel_cache=options.kernel_cache,
    )


def _target(target: str) -> str:
    if target not in TARGETS:
        raise DeployOptionError(f"--on '{target}': not one of {', '.join(TARGETS)}{did_you_mean(target, TARGETS)}")
    return target


def _refuse_the_other_targets(options: DeployOptions | RollbackOptions, on: str) -> None:
    """An option of the other target is bad input (exit 2), before anything is looked up: it would be
    dropped unread, and a script that forgot `--on k8s` would deploy somewhere else than it meant."""
    other: list[tuple[str, object]]
    if on == "k8s":
        other = [("--docker-host", options.docker_host)]
        if isinstance(options, DeployOptions):
            other += [("--env-file", options.env_file), ("--port", options.port), ("--node-rank", options.node_rank),
                      ("--dist-init-addr", options.dist_init_addr)]
        why = "compose only (LWS places the pods)"
    else:
        other = [("--context", options.context), ("--namespace", options.namespace)]
        if isinstance(options, DeployOptions):
            other += [("--replicas", options.replicas is not None), ("--host-network", options.host_network),
                      ("--rdma", options.rdma), ("--hf-token-secret", options.hf_token_secret)]
        why = "--on k8s only (compose would drop {})"
    if given := [flag for flag, value in other if value]:
        several = len(given) > 1
        raise DeployOptionError(f"--on {on}: {', '.join(given)} {'apply' if several else 'applies'} to "
                                + why.format("them" if several else "it"))


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


def deploy_k8s_command(options: DeployOptions, *, build_root: Path | None = None, say: Say = say_stderr
                       ) -> DeploymentRecord:
    _refuse_the_other_targets(options, "k8s")
    served = k8s_options(options)
    stack = load_matrix(options.stacks_file or default_stacks_file()).get(options.stack)
    spec = k8s_spec(stack, served)  # every option, before kubectl is even looked for
    if options.wait_timeout is not None and not options.wait_timeout > 0:
        raise DeployOptionError(f"stack '{stack.name}': --wait-timeout {options.wait_timeout:g}: must be more than 0 "
                                "seconds")
    root = build_root or default_build_root()
    # The cluster is found before the image is verified (registry calls): no context is one line at once.
    kubectl = find_kubectl(options.context, options.namespace)
    ref = verified_ref(resolve_image_ref(stack, digest=options.digest, image=options.image, build_root=root),
                       options.verify_key, say, stack=stack, stacks_file=options.stacks_file)
    dep = K8sDeployment(stack=stack, build_root=root, kubectl=kubectl)
    if spec.gpus and not options.skip_preflight:
        say("preflight: not run for --on k8s (the GPU nodes are the cluster's); the startup probe waits "
            f"up to {spec.healthcheck.start_period_s}s for /health")
    nodes = kubectl.node_platforms()
    if isinstance(nodes, str):
        say(f"platform: the nodes of {kubectl.context} cannot be listed ({nodes}): not checked against {ref}")
    else:  # before anything is applied: an image no node can run never reaches the cluster
        check_node_platform(stack.name, ref, f"every node of {kubectl.context}", nodes, say)
    try:
        digest = pinned_digest(ref) or ""
        with _stack_lock(root, stack.name, "deploy"):
            caches = k8s_caches(spec, ref, options.verify_key, say) if served.kernel_cache else None
            return deploy_k8s(dep, ref, served, wait_timeout_s=options.wait_timeout,
                              smoke_report=smoke_report_for(stack.name, digest, root), say=say, caches=caches)
    except DeployFailed as exc:
        if exc.log_tail:
            say(exc.log_tail.rstrip())
        raise


def deploy_command(
    options: DeployOptions, *, build_root: Path | None = None, project: str | None = None, say: Say = say_stderr
) -> DeploymentRecord:
    if _target(options.on) == "k8s":
        return deploy_k8s_command(options, build_root=build_root, say=say)
    _refuse_the_other_targets(options, "compose")
    dep = _deployment(options.stacks_file, options.stack, options.docker_host, build_root, project)
    served = compose_options(options)
    # Every option is checked before the (slower) preflight and before anything on the host changes.
    spec = check_options(dep.stack, served, options.wait_timeout)
    if is_local_docker_host(options.docker_host):  # a remote engine's model files are on its host, not here
        require_draft_fits(spec, container=True)
    ref = verified_ref(resolve_image_ref(dep.stack, digest=options.digest, image=options.image,
                                         build_root=dep.build_root), options.verify_key, say, stack=dep.stack,
                       stacks_file=options.stacks_file)
    if options.gpus != 0 and not options.skip_preflight:
        # The GPU node is checked before compose replaces a running deployment with one that cannot start.
        say(f"preflight of the GPU node ({options.docker_host or 'local engine'}) in {ref}")
        require_ready(dep.stack, docker_host=options.docker_host, image=ref)
    try:
        with _stack_lock(dep.build_root, dep.stack.name, "deploy"):
            return deploy(dep, ref, served, wait_timeout_s=options.wait_timeout, say=say, verify_key=options.verify_key)
    except DeployFailed as exc:
        say(exc.log_tail.rstrip())
        raise


def status_command(options: StatusOptions, *, build_root: Path | None = None, say: Say = say_stderr,
                   as_json: JsonReport = NO_JSON) -> int:
    """Print the table (and the JSON report); 1 when a records line did not read (each named on stderr), else 0."""
    root = build_root or default_build_root()
    if options.stack and not records_path(root, options.stack).parent.is_dir():
        # No records of it: a stack of stacks.yaml not deployed yet ("nothing deployed"), or a typo, which
        # gets the refusal (and "did you mean") of every task's --stack, not an empty table and exit 0.
        load_matrix(default_stacks_file()).get(options.stack)
    bad: list[BadLine] = []
    rows = deployment_status(
        build_root=root, docker_host=options.docker_host, stack=options.stack, bad_lines=bad,
    )
    print_status(rows, wide=options.wide)
    as_json.emit({"deployments": [asdict(row) for row in rows], "unreadable_record_lines": len(bad)})
    for line in bad:
        say(f"error: {bad_record_line(line)}: skipped, the rows above are what the other lines and the engine show")
    return 1 if bad else 0


class NotDeployed(DeployError):
    """logs, undeploy or rollback of a stack with nothing deployed: a check that ran (exit 1)."""


def require_deployed(dep: Deployment) -> None:
    """logs, undeploy and rollback act on a deployment: with no container of the stack's compose project
    on the engine (running or stopped) they say so in one line, not in compose's words ("Couldn't find env
    file") nor with a "removed" of nothing."""
    if not project_containers(docker_client(dep.docker_host), dep.project_name):
        raise NotDeployed(f"stack '{dep.stack.name}' is not deployed (compose project {dep.project_name} has no "
                          "container on the engine)")


def logs_command(options: LogsOptions, *, build_root: Path | None = None, project: str | None = None) -> None:
    if options.tail is not None and options.tail < 1:
        raise DeployOptionError(f"--tail {options.tail}: must be at least 1 line")
    dep = _deployment(options.stacks_file, options.stack, options.docker_host, build_root, project, from_records=True)
    require_deployed(dep)
    print(service_logs(dep, tail=options.tail), end="")


def undeploy_command(options: UndeployOptions, *, build_root: Path | None = None, project: str | None = None) -> None:
    dep = _deployment(options.stacks_file, options.stack, options.docker_host, build_root, project, from_records=True)
    require_deployed(dep)  # before the lock: nothing deployed writes nothing, not even the lock
    with _stack_lock(dep.build_root, dep.stack.name, "undeploy"):
        undeploy(dep)


def rollback_command(
    options: RollbackOptions, *, build_root: Path | None = None, project: str | None = None, say: Say = say_stderr
) -> DeploymentRecord:
    _refuse_the_other_targets(options, _target(options.on))
    if options.on == "k8s":
        root = build_root or default_build_root()
        namespace = options.namespace
        if namespace is None:  # the namespace the last k8s deployment of the stack went to
            k8s_rows = [r for r in read_records(root, options.stack) if r.target == "k8s"]
            namespace = k8s_rows[-1].options.get("namespace") if k8s_rows else None  # type: ignore[assignment]
        if not any(r.target == "k8s" for r in read_records(root, options.stack)):
            load_matrix(options.stacks_file or default_stacks_file()).get(options.stack)  # a typo: did you mean
            raise NotDeployed(f"stack '{options.stack}' is not deployed on k8s (no k8s deployment in "
                              f"{records_path(root, options.stack)})")
        k8s_dep = _k8s_deployment(options.stacks_file, options.stack, root, options.context, namespace)
        with _stack_lock(root, options.stack, "rollback"):
            return rollback_k8s(k8s_dep, wait_timeout_s=options.wait_timeout, say=say)
    dep = _deployment(options.stacks_file, options.stack, options.docker_host, build_root, project, from_records=True)
    try:
        # The options are checked by `deploy` before anything changes, as for a deploy.
        require_deployed(dep)  # before the lock, as for undeploy
        with _stack_lock(dep.build_root, dep.stack.name, "rollback"):
            return rollback(dep, wait_timeout_s=options.wait_timeout, say=say)
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
    return folder_lock(root / stack, task, root=root, stack=stack)
