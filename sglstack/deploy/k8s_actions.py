"""`invoke deploy --on k8s` and `invoke rollback --on k8s`, from typed values (the face, `sglstack.cli.deploy`,
loads the matrix and turns its options into them): the image verified, the cluster's nodes checked, the stack's
lock held, then `k8s_flow`."""

from __future__ import annotations

from pathlib import Path

from ..adapters.kubectl import find_kubectl
from ..config.imageref import pinned_digest
from ..config.schema import Stack
from ..core.records import build_root as default_build_root
from ..render.k8s import K8sOptions, k8s_spec
from .deployment import DeployFailed, Say, say_stderr
from .errors import DeployOptionError
from .guard import NotDeployed, stack_lock, verified_ref
from .images import resolve_image_ref, smoke_report_for
from .k8s_flow import K8sDeployment, deploy_k8s, rollback_k8s
from .kernelcache import k8s_caches
from .nodes import check_nodes
from .store import DeploymentRecord, read_records, records_path


def deploy_on_k8s(stack: Stack, served: K8sOptions, *, stacks_file: str | None = None, digest: str | None = None,
                  image: str | None = None, verify_key: str | None = None, context: str | None = None,
                  namespace: str | None = None, wait_timeout: float | None = None, skip_preflight: bool = False,
                  build_root: Path | None = None, say: Say = say_stderr) -> DeploymentRecord:
    """A LeaderWorkerSet of the stack's image (by `digest`, else `image`, else the last published), applied
    with kubectl and waited for; recorded. `stacks_file`: the matrix `stack` came from (its lock is beside it)."""
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
    check_nodes(kubectl, stack, ref, say)
    try:
        with stack_lock(root, stack.name, "deploy"):
            caches = k8s_caches(spec, ref, verify_key, say) if served.kernel_cache else None
            return deploy_k8s(dep, ref, served, wait_timeout_s=wait_timeout,
                              smoke_report=smoke_report_for(stack.name, pinned_digest(ref) or "", root), say=say,
                              caches=caches)
    except DeployFailed as exc:
        if exc.log_tail:
            say(exc.log_tail.rstrip())
        raise


def rollback_on_k8s(stack: Stack, *, context: str | None = None, namespace: str | None = None,
                    wait_timeout: float | None = None, build_root: Path | None = None,
                    say: Say = say_stderr) -> DeploymentRecord:
    """The LeaderWorkerSet of the k8s deployment recorded before the current one, applied again."""
    root = build_root or default_build_root()
    records = [r for r in read_records(root, stack.name) if r.target == "k8s"]
    if not records:
        raise NotDeployed(f"stack '{stack.name}' is not deployed on k8s (no k8s deployment in "
                          f"{records_path(root, stack.name)})")
    if namespace is None:  # the namespace the last k8s deployment of the stack went to
        namespace = records[-1].options.get("namespace")  # type: ignore[assignment]
    dep = K8sDeployment(stack=stack, build_root=root, kubectl=find_kubectl(context, namespace))
    with stack_lock(root, stack.name, "rollback"):
        return rollback_k8s(dep, wait_timeout_s=wait_timeout, say=say,
                            check_image=lambda ref: check_nodes(dep.kubectl, dep.stack, ref, say))
