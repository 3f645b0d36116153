"""The options of the deployment tasks, each defined once (`sglstack.core.options`): `sglstack.cli.deploy`
builds its invoke tasks from these, and the deploy flow takes them typed. The task definitions import this
module when invoke loads `tasks.py`, so it uses the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config.imageref import not_an_image
from ..core.errors import DeployError, SglstackError
from ..core.options import (
    ReportOptions,
    TaskOptions,
    docker_host_option,
    option,
    output_option,
    required,
    stacks_file_option,
)


class DeployOptionError(DeployError):
    """A deploy option's value is not a number (or too long to be one): bad input, exit 2."""

    exit_code = 2


class DeployTaskOptions(TaskOptions):
    bad_value: ClassVar[type[SglstackError]] = DeployOptionError


# ---- the options, once -----------------------------------------------------------------------------

STACK_HELP = "stack name from the matrix"
STACKS_FILE_HELP = "the matrix file (default: stacks.yaml)"
RECORDED_HOST_HELP = "Docker engine URL (default: the one recorded at deploy)"
WAIT_HELP = "seconds to wait for /health (default: start period + healthcheck retries)"
TARGETS = ("compose", "k8s")


@dataclass(frozen=True)
class DeployOptions(DeployTaskOptions):
    at_most_one = (("digest", "image"),)
    stack: str = required(STACK_HELP)
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
    skip_preflight: bool = option("do not run `invoke preflight` on the GPU node first", False, kind=bool)
    on: str = option("where to deploy: compose (default) or k8s (a LeaderWorkerSet applied with kubectl)", "compose")
    context: str | None = option("k8s: the kubectl context (default: the current one)")
    namespace: str | None = option("k8s: the namespace (default: the context's)")
    # replicas and hf_token_secret default in K8sOptions: None here tells a --replicas 1 typed from none
    replicas: int | None = option("k8s: LeaderWorkerSet groups, each serving the whole model (default 1)", kind=int)
    host_network: bool = option("k8s: pods use the node's network (NCCL over the host's NICs)", False, kind=bool)
    rdma: str | None = option("k8s: an RDMA device-plugin resource per pod, RESOURCE[=COUNT] (e.g. rdma/ib)")
    hf_token_secret: str | None = option("k8s: the Secret whose key HF_TOKEN (and key NAME of each ${NAME} in "
                                         "serving.env) the pods read (default hf-token)")
    verify_key: str | None = option("refuse an image that does not verify against this ed25519 public key "
                                    "(PEM): signature, SBOM and provenance by digest (invoke verify-image)")
    kernel_cache: bool = option("restore the image's kernel caches whose key matches this node and deployment "
                                "(else start cold, said in one line)", False, kind=bool)


@dataclass(frozen=True)
class RollbackOptions(DeployTaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)
    wait_timeout: float | None = option(WAIT_HELP, kind=float)
    on: str = option("where the deployment runs: compose (default) or k8s", "compose")
    context: str | None = option("k8s: the kubectl context (default: the current one)")
    namespace: str | None = option("k8s: the namespace (default: the one recorded at deploy)")


@dataclass(frozen=True)
class LogsOptions(DeployTaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    tail: int | None = option("only the last N lines", kind=int)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class UndeployOptions(DeployTaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = stacks_file_option(STACKS_FILE_HELP)
    docker_host: str | None = docker_host_option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class StatusOptions(DeployTaskOptions, ReportOptions):
    stack: str | None = option("only this stack (default: all)")
    docker_host: str | None = docker_host_option("Docker engine URL")
    output: str | None = output_option()

    @property
    def wide(self) -> bool:
        return self.output == "wide"
