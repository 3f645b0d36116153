"""Deploying: `invoke deploy`, `status`, `logs`, `undeploy`, `rollback`: their options (each defined once,
`sglstack.core.options`), turned into the typed values `sglstack.deploy.actions` takes, and what each prints.

invoke imports this module when it loads `tasks.py`, for every call: the deploy part (the Docker SDK) is
imported when a task runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.imageref import not_an_image
from ..core.jsonreport import NO_JSON
from ..core.options import (
    ReportOptions,
    TaskOptions,
    docker_host_option,
    option,
    output_option,
    stacks_file_option,
)
from ..deploy.errors import DeployOptionError, check_tail, target_of
from .cmdoptions import (
    context_option,
    host_network_option,
    only_stack_option,
    rdma_option,
    skip_preflight_option,
    stack_option,
    verify_key_option,
)
from .options import command

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..core.jsonreport import JsonReport
    from ..render.compose import ComposeOptions
    from ..render.k8s import K8sOptions

    Say = Callable[[str], None]


class DeployTaskOptions(TaskOptions):
    bad_value = DeployOptionError


# ---- the options, once -----------------------------------------------------------------------------

STACKS_FILE_HELP = "the matrix file (default: stacks.yaml)"
RECORDED_HOST_HELP = "Docker engine URL (default: the one recorded at deploy)"
WAIT_HELP = "seconds to wait for /health (default: start period + healthcheck retries)"


@dataclass(frozen=True)
class DeployOptions(DeployTaskOptions):
    at_most_one = (("digest", "image"),)
    stack: str = stack_option()
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    digest: str | None = option("the published digest to serve (sha256:..., or a full repo@sha256:... reference)")
    image: str | None = option("serve this image reference instead (e.g. a local tag)", check=not_an_image)
    docker_host: str | None = docker_host_option("Docker engine URL to deploy to (default: DOCKER_HOST / local socket)")
    eagle3: bool = option("--no-eagle3: serve without the stack's speculative (EAGLE-3) flags", True, kind=bool)
    gpus: int | None = option("GPUs per node (default: the stack's serving.gpus); 0: none, no memlock ulimit (CPU "
                              "hosts)", kind=int)
    port: int | None = option("host port (default: the stack's serving.port)", kind=int)
    hf_cache: str | None = option("host folder of the Hugging Face cache (default: the stack's serving.mounts)")
    start_period: int | None = option(
        "healthcheck start period in seconds (default: the stack's serving.startup_timeout_s)", kind=int
    )
    restart: str = option("restart policy: no, always, on-failure, unless-stopped", "unless-stopped")
    env_file: str | None = option("env file with HF_TOKEN (default: build/STACK/compose.env)")
    nnodes: int = option("number of nodes for multi-node serving (default 1)", 1, kind=int)
    node_rank: int = option("this node's rank, 0..nnodes-1 (0 serves the API)", 0, kind=int)
    dist_init_addr: str | None = option("HOST:PORT of node 0 (multi-node)")
    wait_timeout: float | None = option(WAIT_HELP, kind=float)
    health_interval: int = option("seconds between healthchecks (default 30)", 30, kind=int)
    skip_preflight: bool = skip_preflight_option()
    on: str = option("where to deploy: compose (default) or k8s (a LeaderWorkerSet applied with kubectl)", "compose")
    context: str | None = context_option()
    namespace: str | None = option("k8s: the namespace (default: the context's)")
    # replicas and hf_token_secret default in K8sOptions: None here tells a --replicas 1 typed from none
    replicas: int | None = option("k8s: LeaderWorkerSet groups, each serving the whole model (default 1)", kind=int)
    host_network: bool = host_network_option()
    rdma: str | None = rdma_option()
    hf_token_secret: str | None = option("k8s: the Secret whose key HF_TOKEN (and key NAME of each ${NAME} in "
                                         "serving.env) the pods read (default hf-token)")
    image_pull_secret: str | None = option("k8s: the Secret (kubernetes.io/dockerconfigjson) the pods pull the "
                                           "image with; --kernel-cache's init container reads the registry with it")
    verify_key: str | None = verify_key_option("refuse an image that does not verify against this ed25519 public key "
                                               "(PEM): signature, SBOM and provenance by digest (invoke verify-image)")
    kernel_cache: bool = option("restore the image's kernel caches whose key matches this node and deployment "
                                "(else start cold, said in one line)", False, kind=bool)


@dataclass(frozen=True)
class RollbackOptions(DeployTaskOptions):
    stack: str = stack_option()
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)
    wait_timeout: float | None = option(WAIT_HELP, kind=float)
    on: str = option("where the deployment runs: compose (default) or k8s", "compose")
    context: str | None = context_option()
    namespace: str | None = option("k8s: the namespace (default: the one recorded at deploy)")


@dataclass(frozen=True)
class LogsOptions(DeployTaskOptions):
    stack: str = stack_option()
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    tail: int | None = option("only the last N lines", kind=int)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class UndeployOptions(DeployTaskOptions):
    stack: str = stack_option()
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class StatusOptions(DeployTaskOptions, ReportOptions):
    stack: str | None = only_stack_option()
    docker_host: str | None = docker_host_option("Docker engine URL")
    output: str | None = output_option()

    @property
    def wide(self) -> bool:
        return self.output == "wide"


# ---- the options as the typed values the deploy part takes ----------------------------------------------

# The deploy options that shape what is served fill the recorded `ComposeOptions` and `K8sOptions` by name,
# in one place (`RecordedOptions.from_options`): a field takes the option of its own name unless renamed here,
# and these fields take no option (their default). tests/cli/test_deploy_records.py checks every field of both
# has its option or is listed, so a new field cannot be left unfilled.
OPTION_OF_FIELD = {"start_period_s": "start_period", "healthcheck_interval_s": "health_interval"}
FIELDS_WITHOUT_OPTION = frozenset({"healthcheck_timeout_s", "healthcheck_retries", "stop_grace_period_s",
                                   "dist_init_port"})


def compose_options(options: DeployOptions) -> ComposeOptions:
    """The deploy options that shape the served service (recorded, so a rollback serves the same)."""
    # at call time: pydantic and the renderer would slow `invoke --list`
    from ..render.compose import ComposeOptions

    env_file = str(Path(options.env_file).resolve()) if options.env_file else None
    return ComposeOptions.from_options(options, renamed=OPTION_OF_FIELD, env_file=env_file)


def k8s_options(options: DeployOptions) -> K8sOptions:
    """The deploy options that shape the LeaderWorkerSet (recorded, so a rollback applies the same)."""
    from ..render.k8s import K8sOptions  # at call time: as above

    return K8sOptions.from_options(options, renamed=OPTION_OF_FIELD)


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
                      ("--rdma", options.rdma), ("--hf-token-secret", options.hf_token_secret),
                      ("--image-pull-secret", options.image_pull_secret)]
        why = "--on k8s only (compose would drop {})"
    if given := [flag for flag, value in other if value]:
        several = len(given) > 1
        raise DeployOptionError(f"--on {on}: {', '.join(given)} {'apply' if several else 'applies'} to "
                                + why.format("them" if several else "it"))


# ---- the tasks ----------------------------------------------------------------------------------------

def _say_stderr(line: str) -> None:
    from ..deploy.deployment import say_stderr  # at call time: the deploy part loads the Docker SDK

    say_stderr(line)


@command(DeployOptions)
def deploy(o: DeployOptions) -> None:
    """Deploy a published stack with compose, wait until /health answers, record it; a failed redeploy
    restores the previous deployment."""
    deploy_command(o)


def deploy_command(options: DeployOptions, *, build_root: Path | None = None, project: str | None = None,
                   say: Say = _say_stderr) -> None:
    # at call time: the Docker SDK and pydantic
    from ..config.matrix import load_matrix
    from ..deploy.actions import deploy_with_compose
    from ..deploy.k8s_actions import deploy_on_k8s

    on = target_of(options.on)
    _refuse_the_other_targets(options, on)
    stack = load_matrix(options.stacks_file).get(options.stack)
    if on == "k8s":
        deploy_on_k8s(stack, k8s_options(options), stacks_file=options.stacks_file, digest=options.digest,
                      image=options.image, verify_key=options.verify_key, context=options.context,
                      namespace=options.namespace, wait_timeout=options.wait_timeout,
                      skip_preflight=options.skip_preflight, build_root=build_root, say=say)
    else:
        deploy_with_compose(stack, compose_options(options), stacks_file=options.stacks_file, digest=options.digest,
                            image=options.image, verify_key=options.verify_key, docker_host=options.docker_host,
                            wait_timeout=options.wait_timeout, skip_preflight=options.skip_preflight,
                            build_root=build_root, project=project, say=say)


@command(StatusOptions)
def status(o: StatusOptions, as_json: JsonReport) -> int:
    """Show each deployed stack: digest, smoke report, health, uptime, model and EAGLE-3 settings (exit 1
    when a records line does not read: it is named, and the rest is shown)."""
    return status_command(o, as_json=as_json)


def status_command(options: StatusOptions, *, build_root: Path | None = None, say: Say = _say_stderr,
                   as_json: JsonReport = NO_JSON) -> int:
    """Print the table (and the JSON report); 1 when a records line did not read (each named on stderr), else 0."""
    # at call time: the Docker SDK
    from dataclasses import asdict

    from ..deploy.status import print_status, status_rows

    rows, bad = status_rows(options.stack, docker_host=options.docker_host, build_root=build_root)
    print_status(rows, wide=options.wide)
    as_json.emit({"deployments": [asdict(row) for row in rows], "unreadable_record_lines": len(bad)})
    for line in bad:
        say(f"error: {line}: skipped, the rows above are what the other lines and the engine show")
    return 1 if bad else 0


@command(LogsOptions)
def logs(o: LogsOptions) -> None:
    """Print the deployed stack's server logs."""
    # at call time: the Docker SDK and pydantic
    from ..config.matrix import load_matrix
    from ..deploy.actions import stack_logs

    check_tail(o.tail)  # before the matrix is read, as every option
    print(stack_logs(load_matrix(o.stacks_file).get(o.stack), docker_host=o.docker_host, tail=o.tail), end="")


@command(UndeployOptions)
def undeploy(o: UndeployOptions) -> None:
    """Stop and remove a deployed stack (compose down -v)."""
    # at call time: the Docker SDK and pydantic
    from ..config.matrix import load_matrix
    from ..deploy.actions import undeploy_stack

    undeploy_stack(load_matrix(o.stacks_file).get(o.stack), docker_host=o.docker_host)


@command(RollbackOptions)
def rollback(o: RollbackOptions) -> None:
    """Redeploy the image recorded before the current one, with the options it ran with."""
    # at call time: the Docker SDK and pydantic
    from ..config.matrix import load_matrix
    from ..deploy.actions import rollback_with_compose
    from ..deploy.k8s_actions import rollback_on_k8s

    on = target_of(o.on)
    _refuse_the_other_targets(o, on)
    stack = load_matrix(o.stacks_file).get(o.stack)
    if on == "k8s":
        rollback_on_k8s(stack, context=o.context, namespace=o.namespace, wait_timeout=o.wait_timeout)
    else:
        rollback_with_compose(stack, docker_host=o.docker_host, wait_timeout=o.wait_timeout)
