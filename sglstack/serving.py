"""The serving spec: what one SGLang server is, derived once from a stack's `serving:` and overrides.

argv, environment, mounts, /dev/shm, ulimits, GPUs, ports, healthcheck and node placement live here, so
that the smoke containers, the compose file and any later manifest (Kubernetes LeaderWorkerSet) serve
exactly what the smoke gate tested. Everything here is pure except `check_mount_sources`, which looks
at this machine's file system.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Self

from pydantic import ValidationError

from .config import serverflags
from .config.fields import MAX_DURATION_S, bound_text, parse_bind
from .config.schema import ServingSettings, SpeculativeSettings, Stack
from .core.credentials import argv_references, reference_map, secret_reference
from .core.errors import SglstackError, one_line
from .core.quoting import ENV_NAME_RE, one_line_problem

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


# ---- overrides -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingOverrides:
    """What a command line changes about the stack's `serving:`; None means "the stack's value".

    `flags` maps a field to the option that set it when a command names it differently (deploy's
    `--port` sets `host_port`), so that errors name what the user typed.
    """

    model: str | None = None
    draft_model: str | None = None
    speculative_algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    eagle3: bool = True
    tp: int | None = None
    gpus: int | None = None
    port: int | None = None
    host_port: int | None = None
    publish_port: bool = False  # publish on a fixed host port (host_port, else the listen port)
    startup_timeout_s: float | None = None
    shm_size: str | None = None
    extra_args: tuple[str, ...] | None = None  # replaces the stack's
    env: Mapping[str, str] = field(default_factory=dict)  # merged over the stack's
    mounts: tuple[str, ...] = ()  # added; one for a container path the stack mounts replaces it
    hf_cache: str | None = None  # the host folder mounted at HF_CACHE_TARGET
    healthcheck_interval_s: int | None = None
    healthcheck_timeout_s: int | None = None
    healthcheck_retries: int | None = None
    healthcheck_start_period_s: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    dist_init_addr: str | None = None
    flags: Mapping[str, str] = field(default_factory=dict)

    def flag(self, name: str) -> str:
        return self.flags.get(name) or DEFAULT_FLAGS.get(name) or "--" + name.replace("_", "-")


DEFAULT_FLAGS = {
    "startup_timeout_s": "--timeout",
    "mounts": "--mount",
    "host_port": "--port",
    "healthcheck_interval_s": "--health-interval",
    "healthcheck_timeout_s": "--health-timeout",
    "healthcheck_retries": "--health-retries",
    "healthcheck_start_period_s": "--start-period",
}
HEALTHCHECK_DEFAULTS = {"interval_s": 30, "timeout_s": 10, "retries": 3}
SPECULATIVE_DEFAULTS = {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def serving_spec(stack: Stack | None, overrides: ServingOverrides | None = None) -> ServingSpec:
    """The stack's serving settings with `overrides` applied, checked: a `ServingError` names the option.

    Without a stack (smoke of an arbitrary image) the overrides must name the model.
    """
    o = overrides or ServingOverrides()
    name = stack.name if stack is not None else None

    def bad(message: str) -> ServingError:
        return ServingError(message, stack=name)

    if stack is not None:
        base = stack.serving
    else:
        if not o.model:
            raise bad(f"no model to serve: pass {o.flag('model')} or --stack")
        base = ServingSettings(model=o.model)

    speculative = _speculative(base.speculative, o, bad)
    tp = _whole(o.tp, base.tp, o.flag("tp"), bad, minimum=1)
    gpus = _whole(o.gpus, base.gpus, o.flag("gpus"), bad, minimum=0)
    nodes = _nodes(o, bad)
    # Tensor parallelism spans the nodes: 2 nodes of 8 GPUs serve --tp-size 16.
    if gpus and tp > gpus * nodes.nnodes:
        across = f" on each of {nodes.nnodes} nodes" if nodes.multi else ""
        raise bad(f"{o.flag('tp')} {tp} needs at least {tp} GPUs, but {o.flag('gpus')} is {gpus}{across}")
    port = _tcp_port(o.port, base.port, o.flag("port"), bad)
    host_port: int | None = None
    if o.host_port is not None:
        host_port = _tcp_port(o.host_port, base.port, o.flag("host_port"), bad)
    if nodes.multi:
        # Host networking maps nothing: the server itself listens on the port the API is wanted on.
        port = host_port or port
        host_port = port
    elif o.publish_port:
        host_port = host_port or port
    startup = base.startup_timeout_s if o.startup_timeout_s is None else o.startup_timeout_s
    if not startup > 0:
        raise bad(f"{o.flag('startup_timeout_s')} {startup:g}: must be more than 0 seconds")
    if not (math.isfinite(startup) and startup <= MAX_DURATION_S):  # int(inf) below would crash
        raise bad(f"{o.flag('startup_timeout_s')} {startup:g}: must be at most {MAX_DURATION_S} seconds (a week)")
    health = _healthcheck(o, int(startup), bad)

    _check_env(o, bad)
    # Smoke's `--env K=V` reaches only its own containers (reports show secret-named values as ***); the
    # stack's serving.env, written into compose files and manifests, takes secrets only as references.
    env = {**base.env, **o.env}
    mounts = _mounts(base.mounts, o, bad)
    extra = tuple(base.extra_args if o.extra_args is None else o.extra_args)
    if o.extra_args is not None:
        # A smoke's own extra args reach no file (a secret among them is hidden in its logs and reports),
        # but one that sets what the spec sets would serve another model, port or draft than reported.
        found = serverflags.extra_args_problem(o.extra_args, secrets=False)
        if found:
            raise bad(f"{o.flag('extra_args')}: {found[1]}")
    return ServingSpec(stack=name, model=o.model or base.model, speculative=speculative, eagle3=o.eagle3, tp=tp,
                       gpus=gpus, port=port, host_port=host_port, startup_timeout_s=float(startup),
                       shm_size=o.shm_size or base.shm_size, extra_args=extra,
                       env=tuple(sorted((str(k), str(v)) for k, v in env.items())), mounts=mounts,
                       ulimits=GPU_ULIMITS if gpus > 0 else CPU_ULIMITS, healthcheck=health, nodes=nodes)


def _check_env(o: ServingOverrides, bad: Bad) -> None:
    for key, value in o.env.items():
        # The same rules as stacks.yaml's serving.env (quoting.py): a key Compose and Kubernetes take as it is.
        if not ENV_NAME_RE.fullmatch(str(key)):
            raise bad(f"{o.flag('env')} '{one_line(str(key))}': not an environment variable name (letters, digits "
                      "and '_', not starting with a digit)")
        if "\x00" in str(value):
            raise bad(f"{o.flag('env')} {key}: the value holds a NUL character, which no environment value can")


def _whole(value: int | None, default: int, flag: str, bad: Bad, *, minimum: int) -> int:
    chosen = default if value is None else value
    if isinstance(chosen, bool) or not isinstance(chosen, int):
        raise bad(f"{flag} '{chosen}': not a whole number")
    if chosen < minimum:
        raise bad(f"{flag} {chosen}: must be at least {minimum}")
    return chosen


def _tcp_port(value: int | None, default: int, flag: str, bad: Bad) -> int:
    chosen = default if value is None else value
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen <= 65535:
        raise bad(f"{flag} {chosen}: not a TCP port (1..65535)")
    return chosen


def _speculative(base: SpeculativeSettings | None, o: ServingOverrides, bad: Bad) -> SpeculativeSettings | None:
    given = {
        "algorithm": o.speculative_algorithm,
        "draft_model": o.draft_model,
        "num_steps": o.num_steps,
        "eagle_topk": o.eagle_topk,
        "num_draft_tokens": o.num_draft_tokens,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if base is None and "draft_model" not in given:
        return None
    values = {**SPECULATIVE_DEFAULTS, **(base.model_dump() if base else {}), **given}
    try:
        return SpeculativeSettings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "draft_model"
        flag = o.flag("speculative_algorithm" if key == "algorithm" else key)
        raise bad(f"{flag} '{values.get(key)}': {bound_text(err)}") from None


def _nodes(o: ServingOverrides, bad: Bad) -> Nodes:
    nnodes = _whole(o.nnodes, 1, o.flag("nnodes"), bad, minimum=1)
    rank = o.node_rank if o.node_rank is not None else 0
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < nnodes:
        raise bad(f"{o.flag('node_rank')} {rank}: not in 0..{nnodes - 1} (for {o.flag('nnodes')} {nnodes})")
    addr = o.dist_init_addr
    if addr is not None or nnodes > 1:
        host, sep, port = (addr or "").rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            shown = f" '{addr}'" if addr else ""
            raise bad(f"{o.flag('dist_init_addr')}{shown}: multi-node serving needs HOST:PORT of node 0")
    return Nodes(nnodes=nnodes, node_rank=rank, dist_init_addr=addr)


def _healthcheck(o: ServingOverrides, startup_s: int, bad: Bad) -> Healthcheck:
    values = {
        "interval_s": o.healthcheck_interval_s,
        "timeout_s": o.healthcheck_timeout_s,
        "retries": o.healthcheck_retries,
        "start_period_s": o.healthcheck_start_period_s,
    }
    out: dict[str, int] = {}
    for key, value in values.items():
        default = max(startup_s, 1) if key == "start_period_s" else HEALTHCHECK_DEFAULTS[key]
        unit = "" if key == "retries" else " second"
        chosen = default if value is None else value
        flag = o.flag("healthcheck_" + key)
        if isinstance(chosen, bool) or not isinstance(chosen, int):
            raise bad(f"{flag} '{chosen}': not a whole number")
        if chosen < 1:
            raise bad(f"{flag} {chosen}: must be at least 1{unit}")
        out[key] = chosen
    return Healthcheck(path=HEALTH_PATH, **out)


def _mount(text: str, origin: str, bad: Bad) -> Mount:
    try:
        source, target, read_only = parse_bind(text)
    except ValueError as exc:
        raise bad(f"{origin} '{text}': {exc}") from None
    return Mount(source=source, target=posixpath.normpath(target), read_only=read_only, origin=origin)


def _mounts(stack_mounts: tuple[str, ...], o: ServingOverrides, bad: Bad) -> tuple[Mount, ...]:
    mounts = [_mount(m, f"serving.mounts[{i}]", bad) for i, m in enumerate(stack_mounts)]
    given = [_mount(m, o.flag("mounts"), bad) for m in o.mounts]
    if o.hf_cache is not None:
        if not o.hf_cache:
            raise bad(f"{o.flag('hf_cache')}: needs a host folder")
        if ":" in o.hf_cache or one_line_problem(o.hf_cache):
            # It becomes SOURCE:TARGET of a bind and a line of a compose file.
            raise bad(f"{o.flag('hf_cache')} '{one_line(o.hf_cache)}': a host folder without ':' or control characters")
        given.append(Mount(source=o.hf_cache, target=HF_CACHE_TARGET, origin=o.flag("hf_cache")))
    # A mount given on the command line for a container path the stack already mounts replaces it.
    targets = {m.target for m in given}
    return (*[m for m in mounts if m.target not in targets], *given)


# ---- the one impure check --------------------------------------------------------------------------


def check_mount_sources(spec: ServingSpec, *, local: bool) -> str | None:
    """Refuse a bind whose host folder is missing: Docker would create it on the host as root.

    Only this machine's file system can be checked; for a remote engine the notice to show is returned.
    """
    if not spec.mounts:
        return None
    if not local:
        sources = ", ".join(m.source for m in spec.mounts)
        return f"mount sources ({sources}) are on the remote Docker host: they cannot be checked from here"
    for mount in spec.mounts:
        path = Path(os.path.expanduser(mount.source))
        if not path.exists():
            where = f"{mount.origin} '{mount.bind}'" if mount.origin else f"mount '{mount.bind}'"
            raise ServingError(
                f"{where}: {path} does not exist (Docker would create it as root); create it first",
                stack=spec.stack,
            )
    return None
