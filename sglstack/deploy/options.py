"""The options of the deployment tasks, each defined once: `tasks.py` builds its invoke tasks from these.

Each dataclass is one task's options: its fields give the flag names, the help text and the types, and
`from_cli` turns what invoke parsed into typed values, with a one-line error naming the option for a
value that is not a number. Numbers reach invoke untyped on purpose: invoke's own conversion would end
in a traceback. `tasks.py` imports this module at start-up, so it uses the standard library only.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..core.errors import DeployError

T = TypeVar("T", bound="TaskOptions")
F = TypeVar("F", bound=Callable[..., Any])


def option(help: str, default: Any = None, *, kind: type = str) -> Any:
    """A task option: its help line, default and type (str, int, float or bool)."""
    return field(default=default, metadata={"help": help, "kind": kind})


def required(help: str) -> Any:
    return field(metadata={"help": help, "kind": str})


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


class TaskOptions:
    """Base of the option dataclasses: the task's signature, help and parsing, from the fields."""

    @classmethod
    def task_help(cls) -> dict[str, str]:
        return {f.name.replace("_", "-"): f.metadata["help"] for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def task_signature(cls) -> inspect.Signature:
        """`(c, <one parameter per option>)`: flags keep their defaults, numbers arrive as text."""
        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            kind = f.metadata["kind"]
            if f.default is dataclasses.MISSING:
                default: Any = inspect.Parameter.empty
            else:
                default = f.default if kind in (bool, str) else None
            params.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
        return inspect.Signature(params)

    @classmethod
    def from_cli(cls: type[T], values: Mapping[str, Any]) -> T:
        """Typed options from invoke's values (None: not given); DeployError names a malformed one."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            raw = values.get(f.name)
            if raw is None:
                continue
            out[f.name] = _parse(raw, f.metadata["kind"], f.name)
        return cls(**out)


def _parse(raw: Any, kind: type, name: str) -> Any:
    if kind is bool:
        return bool(raw)
    if kind is str:
        return str(raw)
    text = str(raw).strip()
    try:
        value = int(text) if kind is int else float(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise DeployError(f"{flag_of(name)} '{raw}': not {what}") from None
    if kind is float and not math.isfinite(value):
        raise DeployError(f"{flag_of(name)} '{raw}': not a finite number")
    return value


def task_options(cls: type[TaskOptions]) -> Callable[[F], F]:
    """Give a task body `def body(c, **options)` the signature invoke reads its flags from."""

    def decorate(fn: F) -> F:
        fn.__signature__ = cls.task_signature()  # type: ignore[attr-defined]
        return fn

    return decorate


# ---- the options, once -----------------------------------------------------------------------------

STACK_HELP = "stack name from the matrix"
STACKS_FILE_HELP = "the matrix file (default: stacks.yaml)"
RECORDED_HOST_HELP = "Docker engine URL (default: the one recorded at deploy)"
WAIT_HELP = "seconds to wait for /health (default: start period + healthcheck retries)"
TARGETS = ("compose", "k8s")


@dataclass(frozen=True)
class DeployOptions(TaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = option(STACKS_FILE_HELP)
    digest: str | None = option("the published digest to serve (sha256:..., or a full repo@sha256:... reference)")
    image: str | None = option("serve this image reference instead (e.g. a local tag)")
    docker_host: str | None = option("Docker engine URL to deploy to (default: DOCKER_HOST / local socket)")
    eagle3: bool = option("--no-eagle3: serve without the stack's speculative (EAGLE-3) flags", True, kind=bool)
    gpus: bool = option("--no-gpus: no GPU reservations and no memlock ulimit (CPU hosts)", True, kind=bool)
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
    target: str = option("compose (default) or k8s: a LeaderWorkerSet applied with kubectl", "compose")
    context: str | None = option("k8s: the kubectl context (default: the current one)")
    namespace: str | None = option("k8s: the namespace (default: the context's)")
    replicas: int = option("k8s: LeaderWorkerSet groups, each serving the whole model (default 1)", 1, kind=int)
    host_network: bool = option("k8s: pods use the node's network (NCCL over the host's NICs)", False, kind=bool)
    rdma: str | None = option("k8s: an RDMA device-plugin resource per pod, RESOURCE[=COUNT] (e.g. rdma/ib)")
    hf_token_secret: str = option("k8s: the Secret whose key HF_TOKEN (and key NAME of each ${NAME} in "
                                  "serving.env) the pods read (default hf-token)", "hf-token")
    verify_key: str | None = option("refuse an image that does not verify against this ed25519 public key "
                                    "(PEM): signature, SBOM and provenance by digest (invoke verify-image)")


@dataclass(frozen=True)
class RollbackOptions(TaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = option(STACKS_FILE_HELP)
    docker_host: str | None = option(RECORDED_HOST_HELP)
    wait_timeout: float | None = option(WAIT_HELP, kind=float)
    target: str = option("compose (default) or k8s", "compose")
    context: str | None = option("k8s: the kubectl context (default: the current one)")
    namespace: str | None = option("k8s: the namespace (default: the one recorded at deploy)")


@dataclass(frozen=True)
class LogsOptions(TaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = option(STACKS_FILE_HELP)
    tail: int | None = option("only the last N lines", kind=int)
    docker_host: str | None = option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class UndeployOptions(TaskOptions):
    stack: str = required(STACK_HELP)
    stacks_file: str | None = option(STACKS_FILE_HELP)
    docker_host: str | None = option(RECORDED_HOST_HELP)


@dataclass(frozen=True)
class StatusOptions(TaskOptions):
    stack: str | None = option("only this stack (default: all)")
    docker_host: str | None = option("Docker engine URL")
