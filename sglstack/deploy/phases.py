"""A deployment's start by phase, read after health from the server's own log lines with the engine's or the
cluster's stamps (`serving.phases`), kept in the deployment record and said in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import docker
import docker.errors

from ..adapters.kubectl import Kubectl
from ..core.errors import SglstackError
from ..render.compose import SERVICE
from ..serving.phases import MILESTONES, docker_log_lines, docker_time, phases_line, start_phases
from .health import project_containers


def say_phases(container: str, phases: dict[str, Any], say: Callable[[str], None]) -> None:
    """The one line of a start by phase; nothing when the log had none of the lines."""
    if phases and len(phases["unknown"]) < len(MILESTONES):
        say(phases_line(container, phases).removeprefix("smoke: "))


def k8s_phases(kubectl: Kubectl, lws_name: str, container: str) -> dict[str, Any]:
    """The start by phase of the first group's leader pod (`NAME-0`), from its container's log with the
    cluster's stamps and the container's `startedAt` ({} when either cannot be read)."""
    pod = f"{lws_name}-0"
    try:
        obj = kubectl.get_json("pod", pod)
        statuses = ((obj or {}).get("status") or {}).get("containerStatuses") or []
        running = next(((s.get("state") or {}).get("running") or {} for s in statuses if s.get("name") == container),
                       {})
        started = docker_time(str(running.get("startedAt") or ""))
        text = kubectl.logs(pod, container) if started is not None else None
    except SglstackError:
        return {}
    if started is None or text is None:
        return {}
    return start_phases(docker_log_lines(text), started, None)


def deployed_phases(client: docker.DockerClient, project: str) -> dict[str, Any]:
    """The service container's start by phase, from its log with the engine's stamps ({} when unreadable)."""
    for container in project_containers(client, project, service=SERVICE):
        try:
            raw = container.logs(stdout=True, stderr=True, timestamps=True)
            container.reload()
        except docker.errors.APIError:
            continue
        started = docker_time(str((container.attrs.get("State") or {}).get("StartedAt") or ""))
        if started is None:
            continue
        # deploy sends no request: the first token is not measured here (smoke measures it)
        return start_phases(docker_log_lines(raw.decode("utf-8", "replace")), started, None)
    return {}
