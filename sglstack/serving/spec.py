"""The serving spec's values: the server's argv, mounts, ulimits, healthcheck, node placement, and the argv
written from them. Pure; derived from a stack by `serving.derive`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Self

from ..config import serverflags
from ..config.settings import SpeculativeSettings
from ..core.credentials import argv_references, reference_map, secret_reference
from ..core.errors import SglstackError, one_line

LAUNCH = ("python3", "-m", "sglang.launch_server")
# SGLang listens on 127.0.0.1 by default: unreachable through a port mapping or from other nodes.
LISTEN_HOST = "0.0.0.0"
HEALTH_PATH = "/health"
HF_CACHE_TARGET = "/root/.cache/huggingface"
# Passed from the caller's environment (smoke) or an env file (compose); never rendered into a file.
# Any other secret is a `${NAME}` reference in serving.env (`ServingSpec.secret_references`), or the
# value of a secret flag in extra_args (`ServingSpec.argv_secret_names`).
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
UNLIMITED = -1
STACK_BYTES = 67108864


class RecordedOptions:
    """A deployment's options as its record holds them, read back by field name: keys a newer or older
    sglstack wrote that this one has no field for are left out, so old records stay readable."""

    def to_record(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_record(cls, data: Mapping[str, object]) -> Self:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def from_options(cls, options: object, *, renamed: Mapping[str, str] | None = None, **given: object) -> Self:
        """From a task's options (a dataclass), the one copy of option to field: each field takes the option
        of its own name (or `renamed[field]`'s), or the value `given` for it; an option the task does not
        have, or left unset (None), keeps the field's default."""
        held = {f.name: getattr(options, f.name) for f in fields(options)}  # type: ignore[arg-type]
        values = {}
        for name in (f.name for f in fields(cls)):  # type: ignore[arg-type]
            value = given[name] if name in given else held.get((renamed or {}).get(name, name))
            if value is not None:
                values[name] = value
        return cls(**values)


def gpu_count(value: int | bool | None) -> int | None:
    """GPUs per node as deploy's options hold them (None: the stack's); a record from before `--gpus N` holds
    true (the stack's) or false (none: `--no-gpus`)."""
    return (None if value else 0) if isinstance(value, bool) else value


class ServingError(SglstackError):
    """A serving setting or option is invalid; the one-line message names the stack and the option or key."""

    exit_code = 2  # bad input

    def __init__(self, message: str, *, stack: str | None = None) -> None:
        self.stack, self.reason = stack, message
        # Messages quote what the user typed: a line break in it must not make the one line two.
        super().__init__(one_line(f"stack '{stack}': {message}" if stack else message))


Bad = Callable[[str], ServingError]


@dataclass(frozen=True)
class Mount:
    source: str  # host path as written ("~" is the home folder of the machine that runs the engine)
    target: str
    read_only: bool = False
    origin: str = field(default="", compare=False)  # the option or key it came from, for error messages

    @property
    def bind(self) -> str:
        """`SOURCE:TARGET[:ro]`, as written (compose expands `~` itself)."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")

    def bind_on_this_machine(self) -> str:
        """The bind with `~` expanded here (the Docker API does not expand it)."""
        return f"{os.path.expanduser(self.source)}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class Ulimit:
    name: str
    soft: int
    hard: int


# Upstream's docker instructions for SGLang: unlimited locked memory and a 64 MiB stack for the NCCL /
# custom all-reduce workers. Without GPUs (the CPU test profile) no memlock: a host with a finite hard
# memlock limit refuses to start a container that asks for an unlimited one.
GPU_ULIMITS = (Ulimit("memlock", UNLIMITED, UNLIMITED), Ulimit("stack", STACK_BYTES, STACK_BYTES))
CPU_ULIMITS = (Ulimit("stack", STACK_BYTES, STACK_BYTES),)


@dataclass(frozen=True)
class Healthcheck:
    """The orchestrator's liveness probe: GET `path` on the server port inside the container."""

    path: str
    interval_s: int
    timeout_s: int
    retries: int
    start_period_s: int  # failures before this do not count: loading a large model takes many minutes


@dataclass(frozen=True)
class NodeArgs:
    """The values of `--nnodes`, `--node-rank` and `--dist-init-addr`, as text: a compose file writes
    numbers, a LeaderWorkerSet `$(LWS_GROUP_SIZE)`, `$(LWS_WORKER_INDEX)`, `$(LWS_LEADER_ADDRESS):PORT`."""

    nnodes: str
    node_rank: str
    dist_init_addr: str


@dataclass(frozen=True)
class Nodes:
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # HOST:PORT of node 0 (a port other than the serving port)

    @property
    def multi(self) -> bool:
        return self.nnodes > 1

    def args(self) -> NodeArgs | None:
        if not self.multi:
            return None
        return NodeArgs(str(self.nnodes), str(self.node_rank), str(self.dist_init_addr))


@dataclass(frozen=True)
class ServingSpec:
    """One server, as every renderer needs it. Build it with `serving_spec`, never by hand."""

    stack: str | None
    model: str
    speculative: SpeculativeSettings | None  # the stack's draft settings (None: it has none)
    eagle3: bool  # served with `speculative`; False: the baseline server
    tp: int
    gpus: int
    port: int  # the server's listen port inside the container (on the host itself under host networking)
    host_port: int | None  # where the host publishes the API; None: a free port the engine picks
    startup_timeout_s: float
    shm_size: str
    extra_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # sorted: the same spec renders the same bytes
    mounts: tuple[Mount, ...]
    ulimits: tuple[Ulimit, ...]
    healthcheck: Healthcheck
    nodes: Nodes
    ipc_mode: str = "host"  # SGLang's workers share tensors through /dev/shm; NCCL wants the host's IPC

    @property
    def speculative_on(self) -> bool:
        return self.eagle3 and self.speculative is not None

    @property
    def host_network(self) -> bool:
        """Multi-node: torch.distributed and NCCL connect the nodes directly, so the server uses the host's."""
        return self.nodes.multi

    @property
    def environment(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def plain_env(self) -> tuple[tuple[str, str], ...]:
        """The env entries whose values are written as they are (no secret reference among them)."""
        return tuple((k, v) for k, v in self.env if secret_reference(v) is None)

    @property
    def secret_references(self) -> tuple[tuple[str, str], ...]:
        """(env key, variable) for each `${NAME}` value: the secret the deployment's secret source holds
        (compose: the environment of the deploy; Kubernetes: key NAME of the Secret; smoke: its own env)."""
        return tuple(sorted(reference_map(self.environment).items()))

    @property
    def argv_secret_names(self) -> tuple[str, ...]:
        """The variables the secret flags of extra_args refer to (`--api-key ${NAME}`), sorted: each
        renderer fills them in from the same secret source as serving.env's references."""
        return tuple(sorted({name for _, name in argv_references(self.extra_args).values()}))

    def baseline(self) -> ServingSpec:
        """The same server without speculative decoding (what EAGLE-3 is measured against)."""
        return replace(self, eagle3=False)

    def with_speculation(self) -> ServingSpec:
        return replace(self, eagle3=True)

    def speculative_summary(self) -> str:
        spec = self.speculative
        if spec is None or not self.eagle3:
            return "off"
        return (
            f"{spec.algorithm} draft={spec.draft_model} steps={spec.num_steps} topk={spec.eagle_topk} "
            f"draft_tokens={spec.num_draft_tokens}"
        )

    def models(self) -> list[str]:
        """The model and the draft the server downloads (what an HF token may be needed for)."""
        return [self.model] + ([self.speculative.draft_model] if self.speculative else [])


# ---- argv ------------------------------------------------------------------------------------------


# Every flag written here is one of config.serverflags.OWNED_FLAGS (a test holds the two equal), which
# serving.extra_args may not set again.
def speculative_argv(spec: SpeculativeSettings) -> list[str]:
    return [
        serverflags.SPECULATIVE_ALGORITHM,
        spec.algorithm,
        serverflags.SPECULATIVE_DRAFT_MODEL_PATH,
        spec.draft_model,
        serverflags.SPECULATIVE_NUM_STEPS,
        str(spec.num_steps),
        serverflags.SPECULATIVE_EAGLE_TOPK,
        str(spec.eagle_topk),
        serverflags.SPECULATIVE_NUM_DRAFT_TOKENS,
        str(spec.num_draft_tokens),
    ]


def node_argv(node: NodeArgs) -> list[str]:
    return [serverflags.NNODES, node.nnodes, serverflags.NODE_RANK, node.node_rank,
            serverflags.DIST_INIT_ADDR, node.dist_init_addr]


def serving_argv(spec: ServingSpec, *, node: NodeArgs | None = None) -> list[str]:
    """`python3 -m sglang.launch_server ...`: the one command line smoke, compose and manifests run.

    `node` replaces the spec's own placement values (a manifest passes its downward-API variables);
    the flags appear only for a multi-node spec or when `node` is given.
    """
    argv = [*LAUNCH, serverflags.MODEL_PATH, spec.model, serverflags.TP_SIZE, str(spec.tp),
            serverflags.HOST, LISTEN_HOST, serverflags.PORT, str(spec.port)]
    if spec.speculative_on:
        assert spec.speculative is not None
        argv += speculative_argv(spec.speculative)
    placement = node or spec.nodes.args()
    if placement is not None:
        argv += node_argv(placement)
    return [*argv, *spec.extra_args]
