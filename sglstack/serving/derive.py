"""Deriving the serving spec once, from a stack's `serving:` and the command line's overrides, every bad
override named; and the one impure check, `check_mount_sources`, which looks at this machine's file system."""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..config import serverflags
from ..config.fields import MAX_DURATION_S, KeyedValueError, bound_text, parse_bind, size_bytes
from ..config.schema import Stack
from ..config.settings import ServingSettings, SpeculativeSettings
from ..core.errors import one_line
from ..core.quoting import ENV_NAME_RE, one_line_problem
from .spec import (
    CPU_ULIMITS,
    GPU_ULIMITS,
    HEALTH_PATH,
    HF_CACHE_TARGET,
    Bad,
    Healthcheck,
    Mount,
    Nodes,
    ServingError,
    ServingSpec,
)

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
                       shm_size=_shm_size(o, bad) or base.shm_size, extra_args=extra,
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
    if values["eagle_topk"] == 1 and "num_draft_tokens" not in given:
        # `--num-steps 5` over a topk-1 stack: the draft tokens follow, as SGLang itself would set them.
        values["num_draft_tokens"] = values["num_steps"] + 1
    try:
        return SpeculativeSettings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, KeyedValueError):  # a check across the settings, about the key it names
            key, why = str(cause.key[0]), str(cause)
        else:
            key, why = (str(err["loc"][0]) if err["loc"] else "draft_model"), bound_text(err)
        if key == "num_draft_tokens" and "num_draft_tokens" not in given:  # derived from the steps given
            key, why = "num_steps", f"with topk 1 it serves steps + 1 draft tokens, which {why}"
        flag = o.flag("speculative_algorithm" if key == "algorithm" else key)
        raise bad(f"{flag} '{values.get(key)}': {why}") from None


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


def _shm_size(o: ServingOverrides, bad: Bad) -> str | None:
    """A smoke's or deploy's own /dev/shm size, held to the rule serving.shm_size is held to in stacks.yaml."""
    if o.shm_size is not None:
        try:
            size_bytes(o.shm_size)
        except ValueError as exc:
            raise bad(f"{o.flags.get('shm_size') or 'shm_size'}: {exc}") from None
    return o.shm_size


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


def check_secret_references(spec: ServingSpec, host_env: Mapping[str, str] | None = None) -> None:
    """Each `${NAME}` of serving.env and of a secret flag in extra_args must be set where the server gets it
    from (the smoke's environment, compose's interpolation by `invoke deploy`): one line naming the first that
    is not, before anything starts."""
    host_env = os.environ if host_env is None else host_env
    for key, name in spec.secret_references:
        if name not in host_env:
            raise ServingError(f"serving.env.{key} refers to ${{{name}}}, which is not set in this environment",
                               stack=spec.stack)
    for name in spec.argv_secret_names:
        if name not in host_env:
            raise ServingError(f"serving.extra_args refers to ${{{name}}}, which is not set in this environment",
                               stack=spec.stack)
