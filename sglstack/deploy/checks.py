"""Everything a deployment needs from the target host, checked before anything there changes.

A redeploy must never take the running deployment down for a reason that could have been known
before `up`: a port another process holds, a mount source that does not exist, a missing env file.
"""

from __future__ import annotations

import errno
import math
import socket
from collections.abc import Callable
from pathlib import Path

import docker

from ..adapters.docker import docker_host_name
from ..config.schema import Stack
from ..core.errors import DeployError
from ..publish import check_node_platform, engine_platform
from ..render import compose as cmp
from ..serving import ServingSpec, check_mount_sources
from .errors import DeployOptionError
from .health import COMPOSE_PROJECT_LABEL, project_containers


def check_options(stack: Stack, options: cmp.ComposeOptions, wait_timeout_s: float | None) -> ServingSpec:
    """Every option of a deploy (pure): the serving spec it serves, or a one-line error naming the option."""
    spec = cmp.deploy_spec(stack, options)
    if wait_timeout_s is not None and not (math.isfinite(wait_timeout_s) and wait_timeout_s > 0):
        raise DeployOptionError(f"stack '{stack.name}': --wait-timeout {wait_timeout_s:g}: must be more than 0 "
                                "seconds")
    return spec


def check_host(
    client: docker.DockerClient,
    spec: ServingSpec,
    options: cmp.ComposeOptions,
    *,
    project: str,
    local: bool,
    docker_host: str | None,
) -> list[str]:
    """The checks against the target host; returns the notices of what cannot be checked from here."""
    notices = []
    check_project_owner(client, project=project, stack=spec.stack or "")
    if notice := check_mount_sources(spec, local=local):
        notices.append(notice)
    env_file = Path(options.env_file)
    if env_file.is_absolute() and not env_file.is_file():
        raise DeployError(
            f"stack '{spec.stack}': --env-file {env_file} not found (it holds HF_TOKEN; see {cmp.ENV_EXAMPLE_FILE})"
        )
    if notice := check_port(client, spec, project=project, local=local, docker_host=docker_host):
        notices.append(notice)
    return notices


def project_owner_problem(project: str, stack: str, containers: list[tuple[str, str | None]]) -> str | None:
    """Why `stack` may not replace or remove compose project `project`, whose containers are given as
    (name, their io.sglstack.stack label); None when every one is this stack's (pure).

    A project is found by a name derived from the stack's (`names.py`); the matrix refuses two stacks
    that share one, but another matrix file, a renamed stack or a project of someone else's may not.
    """
    for name, owner in sorted(containers):
        if owner != stack:
            whose = f"stack '{owner}'" if owner else "no sglstack stack (it has no io.sglstack.stack label)"
            return (f"compose project {project} holds container {name} of {whose}, not of stack '{stack}': "
                    "it is not this stack's to replace or remove (nothing was changed)")
    return None


def check_project_owner(client: docker.DockerClient, *, project: str, stack: str) -> None:
    found = [(c.name, c.labels.get(cmp.LABEL_STACK)) for c in project_containers(client, project)]
    if problem := project_owner_problem(project, stack, found):
        raise DeployError(f"stack '{stack}': {problem}")


def check_port(
    client: docker.DockerClient, spec: ServingSpec, *, project: str, local: bool, docker_host: str | None
) -> str | None:
    """The API's host port must be free, or held by this same deployment (which the redeploy replaces)."""
    port = spec.host_port or spec.port
    where = "this machine" if local else docker_host_name(docker_host) or "the Docker host"
    # The engine's summary list: one call, with each running container's published ports and labels.
    for summary in client.api.containers():
        published = [p for p in summary.get("Ports") or [] if p.get("PublicPort") == port]
        if not any(p.get("Type", "tcp") == "tcp" for p in published):
            continue
        labels = summary.get("Labels") or {}
        if labels.get(COMPOSE_PROJECT_LABEL) == project:
            return None
        name = (summary.get("Names") or ["?"])[0].lstrip("/")
        owner = labels.get(COMPOSE_PROJECT_LABEL)
        held = f"container {name}" + (f" (compose project {owner})" if owner else "")
        raise DeployError(
            f"stack '{spec.stack}': --port {port}: already published on {where} by {held}; "
            "choose another --port (nothing was changed)"
        )
    if spec.host_network and client.api.containers(filters={"label": f"{COMPOSE_PROJECT_LABEL}={project}"}):
        return None  # host networking publishes nothing: this deployment's own server holds the port
    if not local:
        return (f"--port {port}: no container on {where} publishes it; a process outside Docker there "
                "cannot be checked from here")
    if port_in_use(port):
        raise DeployError(
            f"stack '{spec.stack}': --port {port}: in use on this machine by a process outside Docker; "
            "choose another --port (nothing was changed)"
        )
    return None


def port_in_use(port: int) -> bool:
    """Whether a listening socket holds `port` on this machine (on any address Docker would publish on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a closed connection in TIME_WAIT does not count, a listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def check_engine_platform(client: docker.DockerClient, stack: str, image_ref: str, say: Callable[[str], None]) -> None:
    """Before the pull: an image for another platform than the engine's is one line, not `exec format error` in a
    restart loop."""
    check_node_platform(stack, image_ref, f"the node ({engine_name(client) or 'local engine'})",
                        (engine_platform(client),), say, client)


def engine_name(client: docker.DockerClient) -> str:
    try:
        return str(client.info().get("Name", ""))
    except docker.errors.APIError:
        return ""
