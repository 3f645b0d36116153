"""Pure planning: the smoke options from a stack's `SmokeSettings` + CLI overrides, and the two launches.

Nothing here touches Docker or the network; `runner.py` turns a `ContainerPlan` into a container.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from ..errors import SmokeError
from ..matrix import Gates, Stack

CONTAINER_PORT = 30000
LAUNCH = ("python3", "-m", "sglang.launch_server")
# Upstream's docker instructions for SGLang: unlimited locked memory and a 64 MiB stack for the
# NCCL / custom all-reduce workers.
GPU_ULIMITS = (("memlock", -1, -1), ("stack", 67108864, 67108864))
# Without GPUs (the CPU test profile) no memlock: hosts with a low hard memlock limit refuse -1.
CPU_ULIMITS = (("stack", 67108864, 67108864),)
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

RUN_KINDS = ("baseline", "eagle3")


@dataclass(frozen=True)
class SmokeOptions:
    """Everything one smoke run needs; built by `smoke_options` from a stack and overrides."""

    model: str
    draft_model: str | None = None  # required when "eagle3" is in kinds (smoke_options checks)
    speculative_algorithm: str = "EAGLE3"
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    tp: int = 1
    gpus: int = 1
    port: int = CONTAINER_PORT
    timeout: float = 3600.0
    concurrency: int = 8
    num_prompts: int = 8
    max_new_tokens: int = 128
    shm_size: str = "32g"
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    docker_host: str | None = None
    request_timeout: float = 600.0
    gates: Gates = field(default_factory=Gates)
    report: str | None = None
    build_dir: str = "build"
    no_history: bool = False
    pull: bool = True
    # A GPU smoke checks the node first (driver, GPUs, NCCL, shm): minutes of model loading are not
    # spent on a node that cannot serve.
    skip_preflight: bool = False
    # The servers to start: ("baseline",) needs no draft model and runs on SGLang versions that predate
    # EAGLE-3 (a bisect of the baseline speed).
    kinds: tuple[str, ...] = RUN_KINDS
    # Measured concurrency-1 runs per server start (one sample each), with the radix cache flushed
    # before each one when flush_cache is set, so no run is faster for having seen the prompts.
    runs: int = 1
    flush_cache: bool = False

    def fingerprint(self) -> dict[str, Any]:
        """What must match for two runs' tokens/s to be comparable (the image may differ: that is the point)."""
        return {
            "model": self.model,
            "draft_model": self.draft_model,
            "tp": self.tp,
            "gpus": self.gpus,
            "algorithm": self.speculative_algorithm,
            "num_steps": self.num_steps,
            "eagle_topk": self.eagle_topk,
            "num_draft_tokens": self.num_draft_tokens,
            "max_new_tokens": self.max_new_tokens,
            "concurrency": self.concurrency,
            "num_prompts": self.num_prompts,
        }

    def describe(self) -> dict[str, Any]:
        """A report-safe view: env values are not included (they may be credentials)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("env", "gates", "labels")}
        out["env_keys"] = sorted(self.env)
        out["gates"] = self.gates.model_dump()
        out["extra_args"] = redact_command(self.extra_args)
        out["mounts"] = list(self.mounts)
        return out


@dataclass(frozen=True)
class ContainerPlan:
    """One server container: its command and the engine settings, as data."""

    kind: str  # "baseline" or "eagle3"
    image: str
    command: tuple[str, ...]
    environment: Mapping[str, str]
    binds: tuple[str, ...]  # "HOST:CONTAINER[:MODE]"
    gpus: int
    ipc_mode: str
    shm_size: str
    ulimits: tuple[tuple[str, int, int], ...]
    labels: Mapping[str, str]
    container_port: int
    bind_address: str  # host address the container port is published on

    def redacted_environment(self) -> dict[str, str]:
        return {k: ("***" if _is_secret(k) else v) for k, v in self.environment.items()}


# ---- options ---------------------------------------------------------------------------------------

# CLI option name -> SmokeOptions field, for overrides that are renamed or need parsing.
_GATE_KEYS = ("min_speedup", "min_accept_length", "min_agreement", "max_regression")
_RENAMED = {"stacks_file": None, "stack": None, "image": None}


def smoke_options(stack: Stack | None, **overrides: Any) -> SmokeOptions:
    """Options from `stack.smoke` (if any) with CLI-named overrides applied; None means "not given"."""
    given = {k: v for k, v in overrides.items() if v is not None and k not in _RENAMED}
    known = {f.name for f in fields(SmokeOptions)} | set(_GATE_KEYS)
    unknown = sorted(set(given) - known)
    if unknown:
        raise SmokeError(f"unknown smoke option(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")

    base: dict[str, Any] = {}
    gates = Gates()
    if stack is not None:
        s = stack.smoke
        base = {
            "model": s.model,
            "tp": s.tp,
            "gpus": s.gpus,
            "port": s.port,
            "timeout": s.timeout_s,
            "concurrency": s.concurrency,
            "num_prompts": s.num_prompts,
            "max_new_tokens": s.max_new_tokens,
            "shm_size": s.shm_size,
            "extra_args": tuple(s.extra_args),
            "env": dict(s.env),
            "mounts": tuple(s.mounts),
        }
        if s.speculative is not None:
            spec = s.speculative
            base.update(
                draft_model=spec.draft_model,
                speculative_algorithm=spec.algorithm,
                num_steps=spec.num_steps,
                eagle_topk=spec.eagle_topk,
                num_draft_tokens=spec.num_draft_tokens,
            )
        gates = s.gates

    gate_updates = {k: float(given.pop(k)) for k in _GATE_KEYS if k in given}
    try:
        gates = Gates(**{**gates.model_dump(), **gate_updates})
    except ValueError as exc:
        first = str(exc).splitlines()
        raise SmokeError(f"invalid gate override: {' '.join(first[1:3]).strip() or first[0]}") from None

    where = f"stack '{stack.name}'" if stack is not None else "the options"
    if "env" in given:
        base["env"] = {**base.get("env", {}), **parse_pairs(given.pop("env"), "--env")}
    if "labels" in given:
        base["labels"] = parse_pairs(given.pop("labels"), "--label")
    if "mounts" in given:
        extra = parse_mounts(given.pop("mounts"))
        targets = {m.split(":")[1].rstrip("/") for m in extra}
        # A --mount for a container path the stack already mounts replaces the stack's one.
        kept = [m for m in base.get("mounts", ()) if m.split(":")[1].rstrip("/") not in targets]
        base["mounts"] = (*kept, *extra)
    if "extra_args" in given:
        extra = given.pop("extra_args")
        base["extra_args"] = tuple(extra.split() if isinstance(extra, str) else extra)
    if "kinds" in given:
        base["kinds"] = parse_kinds(given.pop("kinds"))
    base.update(given)
    base["gates"] = gates

    required = ("model", "draft_model") if "eagle3" in base.get("kinds", RUN_KINDS) else ("model",)
    for key in required:
        if not base.get(key):
            flag = "--" + key.replace("_", "-")
            raise SmokeError(f"no {key.replace('_', ' ')} for the smoke in {where}: pass {flag} or --stack")
    try:
        opts = SmokeOptions(**base)
        opts = replace(
            opts,
            tp=int(opts.tp),
            gpus=int(opts.gpus),
            port=int(opts.port),
            timeout=float(opts.timeout),
            concurrency=int(opts.concurrency),
            num_prompts=int(opts.num_prompts),
            max_new_tokens=int(opts.max_new_tokens),
            no_history=_flag(opts.no_history),
            pull=_flag(opts.pull),
            skip_preflight=_flag(opts.skip_preflight),
            runs=int(opts.runs),
            flush_cache=_flag(opts.flush_cache),
        )
    except (TypeError, ValueError) as exc:
        raise SmokeError(f"invalid smoke option: {exc}") from None
    for name in ("tp", "concurrency", "num_prompts", "max_new_tokens", "port", "runs"):
        if getattr(opts, name) < 1:
            raise SmokeError(f"smoke option {name} must be >= 1 (got {getattr(opts, name)})")
    if opts.gpus < 0:
        raise SmokeError(f"smoke option gpus must be >= 0 (got {opts.gpus})")
    if opts.gpus and opts.tp > opts.gpus:
        raise SmokeError(f"--tp {opts.tp} needs at least {opts.tp} GPUs, but --gpus is {opts.gpus}")
    if opts.timeout <= 0:
        raise SmokeError(f"smoke option timeout must be > 0 (got {opts.timeout})")
    return opts


SECRET_FLAGS = ("--api-key", "--admin-api-key")


def redact_command(command: Iterable[str]) -> list[str]:
    """The command with the values of secret flags replaced, for logs and reports."""
    out: list[str] = []
    hide_next = False
    for arg in command:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def _flag(value: Any) -> bool:
    """Booleans also arrive as strings (`--smoke-opt no_history=true`)."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"'{value}' is not a boolean")
    return bool(value)


def parse_pairs(values: Iterable[str] | Mapping[str, str] | str, flag: str) -> dict[str, str]:
    if isinstance(values, Mapping):
        return {str(k): str(v) for k, v in values.items()}
    if isinstance(values, str):
        values = [values]
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise SmokeError(f"{flag} '{item}': expected KEY=VALUE")
        out[key] = value
    return out


def parse_kinds(value: Iterable[str] | str) -> tuple[str, ...]:
    """`baseline`, `eagle3` or both (comma-separated or a sequence), in the order they run."""
    items = value.split(",") if isinstance(value, str) else list(value)
    wanted = {str(k).strip() for k in items if str(k).strip()}
    unknown = sorted(wanted - set(RUN_KINDS))
    if unknown or not wanted:
        raise SmokeError(f"smoke kinds '{','.join(map(str, items))}': choose from {', '.join(RUN_KINDS)}")
    return tuple(k for k in RUN_KINDS if k in wanted)


def parse_mounts(values: Iterable[str] | str) -> list[str]:
    if isinstance(values, str):
        values = [values]
    out = []
    for item in values:
        parts = str(item).split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
            raise SmokeError(f"--mount '{item}': expected HOST:CONTAINER[:ro] with an absolute container path")
        out.append(str(item))
    return out


# ---- the two launches ------------------------------------------------------------------------------


def server_command(options: SmokeOptions, *, speculative: bool) -> list[str]:
    """`python3 -m sglang.launch_server ...`; the EAGLE-3 run adds the draft model and the four flags."""
    cmd = [
        *LAUNCH,
        "--host",
        "0.0.0.0",
        "--port",
        str(options.port),
        "--model-path",
        options.model,
        "--tp-size",
        str(options.tp),
    ]
    if speculative:
        cmd += [
            "--speculative-algorithm",
            options.speculative_algorithm,
            "--speculative-draft-model-path",
            str(options.draft_model),
            "--speculative-num-steps",
            str(options.num_steps),
            "--speculative-eagle-topk",
            str(options.eagle_topk),
            "--speculative-num-draft-tokens",
            str(options.num_draft_tokens),
        ]
    return [*cmd, *options.extra_args]


def launch_commands(options: SmokeOptions) -> dict[str, list[str]]:
    return {kind: server_command(options, speculative=kind == "eagle3") for kind in options.kinds}


def is_local_docker_host(docker_host: str | None) -> bool:
    host = docker_host or ""
    if not host or host.startswith(("unix://", "npipe://")):
        return True
    hostname = docker_host_name(host)
    return hostname in ("127.0.0.1", "localhost", "::1")


def docker_host_name(docker_host: str) -> str:
    """The machine name in tcp://host:port or ssh://user@host[:port]."""
    return urlsplit(docker_host).hostname or ""


def container_plan(
    options: SmokeOptions, image: str, kind: str, *, host_env: Mapping[str, str] | None = None
) -> ContainerPlan:
    """The container for one run. `host_env` supplies HF_TOKEN (default: this process's environment)."""
    host_env = os.environ if host_env is None else host_env
    environment = {k: host_env[k] for k in SECRET_ENV if host_env.get(k)}
    environment.update(options.env)
    binds = tuple(_expand_home(m) for m in options.mounts)
    local = is_local_docker_host(options.docker_host)
    return ContainerPlan(
        kind=kind,
        image=image,
        command=tuple(server_command(options, speculative=kind == "eagle3")),
        environment=environment,
        binds=binds,
        gpus=options.gpus,
        ipc_mode="host",
        shm_size=options.shm_size,
        ulimits=GPU_ULIMITS if options.gpus > 0 else CPU_ULIMITS,
        labels={"io.sglstack.smoke": kind, **options.labels},
        container_port=options.port,
        # A remote GPU node's loopback is not reachable from here: publish on its interfaces instead.
        bind_address="127.0.0.1" if local else "0.0.0.0",
    )


def _expand_home(mount: str) -> str:
    host, _, rest = mount.partition(":")
    return f"{os.path.expanduser(host)}:{rest}"


def _is_secret(key: str) -> bool:
    upper = key.upper()
    return key in SECRET_ENV or any(word in upper for word in ("TOKEN", "SECRET", "PASSWORD", "KEY"))
