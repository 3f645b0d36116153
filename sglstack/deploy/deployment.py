"""A compose deployment's place (`Deployment`: its build folder, compose project and Docker host), how long
its health is waited for, and what a failure to come up says: below the deploy (`flow`) and the restore after
a failed one (`restore`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from ..config.schema import Stack
from ..core.console import printable_lines
from ..core.errors import DeployError, first_line
from ..core.records import build_root as default_build_root
from ..core.records import stack_dir
from ..render import compose as cmp
from ..serving import ServingSpec
from .health import answers_200, wait_healthy
from .store import (
    DeploymentRecord,
    read_records,
)

LOG_TAIL_LINES = 40
Say = Callable[[str], None]


def say_stderr(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)  # it quotes health replies and logs


class DeployFailed(DeployError):
    """The service crashed or never became healthy; `log_tail` holds its last log lines."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass
class Deployment:
    """Where a stack's deployment lives: its build folder, compose project and Docker host."""

    stack: Stack
    build_root: Path = field(default_factory=default_build_root)
    project: str | None = None
    docker_host: str | None = None

    @property
    def out_dir(self) -> Path:
        return stack_dir(self.stack.name, self.build_root)

    @property
    def project_name(self) -> str:
        return self.project or cmp.project_name(self.stack.name)

    def records(self) -> list[DeploymentRecord]:
        return [r for r in read_records(self.build_root, self.stack.name) if r.project == self.project_name]

    @classmethod
    def of(cls, stack: Stack, *, docker_host: str | None, build_root: Path | None, project: str | None,
           recorded: bool = False) -> Deployment:
        """The deployment to act on; `recorded` (logs, undeploy, rollback): project and host default to the last
        record's (the stack's compose records only: a k8s deployment of it is kubectl's, not a compose project)."""
        dep = cls(stack=stack, build_root=build_root or default_build_root(), project=project, docker_host=docker_host)
        records = [r for r in read_records(dep.build_root, stack.name) if r.target == "compose"] if recorded else []
        if records:
            dep.project = dep.project or records[-1].project
            dep.docker_host = dep.docker_host or records[-1].docker_host or None
        return dep


def wait_limit(spec: ServingSpec, wait_timeout_s: float | None) -> float:
    """How long to wait for health: the option, else the start period plus every healthcheck retry."""
    if wait_timeout_s is not None:
        return wait_timeout_s
    h = spec.healthcheck
    return h.start_period_s + h.interval_s * (h.retries + 1) + h.timeout_s + 30


def describe(exc: BaseException) -> str:
    return first_line(str(exc)) if str(exc) else type(exc).__name__


def health_failure(
    client: docker.DockerClient, dep: Deployment, spec: ServingSpec, limit_s: float, local: bool, say: Say
) -> str | None:
    """None once the service is healthy (and, on this machine, answers /health on its host port)."""
    verdict, detail = wait_healthy(client, dep.project_name, cmp.SERVICE, limit_s, say)
    if verdict != "healthy":
        return detail
    if local and not spec.host_network:
        port = spec.host_port or spec.port
        if not answers_200(f"http://127.0.0.1:{port}{spec.healthcheck.path}"):
            return f"healthy, but port {port} does not answer {spec.healthcheck.path}"
    return None
