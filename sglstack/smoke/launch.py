"""The two launches of a smoke, planned as data: a server container (`ContainerPlan`) or a local process
(`ProcessPlan`), each from the serving spec the smoke options give. Pure but for reading the caller's
environment it is handed; `runner.py` starts what these plan.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..adapters.docker import is_local_docker_host
from ..core import labels as lb
from ..core.credentials import REDACTED, names_secret, resolve_argv, secret_values_of
from ..core.errors import SmokeInputError
from ..serving import LAUNCH, SECRET_ENV, Mount, ServingSpec, serving_argv
from .plan import SmokeOptions
from .processenv import passes_to_process


@dataclass(frozen=True)
class ContainerPlan:
    """One server container: its argv and the engine settings, as data (rendered from the serving spec)."""

    kind: str  # "baseline" or "eagle3"
    image: str
    command: tuple[str, ...]  # the container's argv (Docker calls it the command)
    environment: Mapping[str, str]
    binds: tuple[str, ...]  # "HOST:CONTAINER[:MODE]"
    gpus: int
    ipc_mode: str
    shm_size: str
    ulimits: tuple[tuple[str, int, int], ...]
    labels: Mapping[str, str]
    container_port: int
    bind_address: str  # host address the container port is published on
    referenced: frozenset[str] = frozenset()  # env keys whose values came from `${NAME}` references

    def redacted_environment(self) -> dict[str, str]:
        return {k: (REDACTED if k in SECRET_ENV or names_secret(k) or k in self.referenced else v)
                for k, v in self.environment.items()}

    def secret_values(self) -> tuple[str, ...]:
        """What the server's log lines may echo and no report may show (SGLang logs its server_args)."""
        return secret_values_of(self.environment, self.referenced, self.command)


# ---- the two launches ------------------------------------------------------------------------------


def run_spec(options: SmokeOptions, kind: str) -> ServingSpec:
    """The server of one run: the spec with speculative decoding for "eagle3", without for "baseline"."""
    return options.serving if kind == "eagle3" else options.serving.baseline()


def launch_argvs(options: SmokeOptions) -> dict[str, list[str]]:
    return {kind: serving_argv(run_spec(options, kind)) for kind in options.kinds}


def server_environment(spec: ServingSpec, host_env: Mapping[str, str]) -> dict[str, str]:
    """What one server gets on top of its own environment, whichever runner starts it: the HF token of this
    process, serving.env's plain values, and each `${NAME}` reference as this process's own NAME
    (`check_secret_references` refused a missing one before anything started; a plan made only to show
    the command has none)."""
    environment = {k: host_env[k] for k in SECRET_ENV if host_env.get(k)}
    environment.update(spec.plain_env)
    environment.update({key: host_env[name] for key, name in spec.secret_references if name in host_env})
    return environment


def container_plan(
    options: SmokeOptions, image: str, kind: str, *, host_env: Mapping[str, str] | None = None
) -> ContainerPlan:
    """The container for one run. `host_env` supplies HF_TOKEN (default: this process's environment)."""
    host_env = os.environ if host_env is None else host_env
    spec = run_spec(options, kind)
    environment = server_environment(spec, host_env)
    return ContainerPlan(
        kind=kind,
        image=image,
        command=tuple(resolve_argv(serving_argv(spec), host_env)),
        environment=environment,
        binds=tuple(_bind(m) for m in spec.mounts),
        gpus=spec.gpus,
        ipc_mode=spec.ipc_mode,
        shm_size=spec.shm_size,
        ulimits=tuple((u.name, u.soft, u.hard) for u in spec.ulimits),
        labels={lb.SMOKE_CONTAINER_LABEL: kind, **options.labels},
        container_port=spec.port,
        # A remote GPU node's loopback is not reachable from here: publish on its interfaces instead.
        bind_address="127.0.0.1" if is_local_docker_host(options.docker_host) else "0.0.0.0",
        referenced=frozenset(k for k, _ in spec.secret_references),
    )


def _bind(mount: Mount) -> str:
    return mount.bind_on_this_machine()


# ---- the process runner ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessPlan:
    """One server as a local process: the serving argv run by the environment's interpreter, as data."""

    kind: str
    argv: tuple[str, ...]
    environment: Mapping[str, str]  # the server's whole environment (nothing else of the caller's)
    port: int  # the listen port (no port mapping: the process binds it on this machine)
    python: str
    secrets: tuple[str, ...] = ()  # as ContainerPlan.secret_values: hidden in its log and the report


def env_interpreter(python_env: str) -> str:
    """`PATH/bin/python3`: the interpreter of a venv or an installation prefix."""
    return os.path.join(python_env, "bin", "python3")


def process_plan(
    options: SmokeOptions, kind: str, port: int, *, host_env: Mapping[str, str] | None = None
) -> ProcessPlan:
    """The process for one run: the spec's exact argv on `port`, with `python3` the environment's, and
    its whole environment: the caller's variables that `passes_to_process`, then `server_environment`.

    The environment's bin folder goes first on PATH, as `activate` would put it, so the tools SGLang
    starts by name (ninja, nvcc wrappers of JIT compilers) are the environment's own.
    """
    if options.python_env is None:
        raise SmokeInputError("smoke runner 'process': no --python-env")
    host_env = os.environ if host_env is None else host_env
    spec = replace(run_spec(options, kind), port=port)
    argv = resolve_argv(serving_argv(spec), host_env)
    python = env_interpreter(options.python_env)
    assert argv[0] == LAUNCH[0]
    environment = {k: v for k, v in host_env.items() if passes_to_process(k, v)}
    environment.update(server_environment(spec, host_env))
    bin_dir = os.path.dirname(python)
    path = environment.get("PATH", "")
    environment["PATH"] = bin_dir + (os.pathsep + path if path else "")
    secrets = secret_values_of(environment, {k for k, _ in spec.secret_references}, argv)
    return ProcessPlan(kind=kind, argv=(python, *argv[1:]), environment=environment, port=port, python=python,
                       secrets=secrets)
