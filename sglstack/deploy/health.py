"""Is the deployed service healthy: container health through the engine, and /health over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import docker
import docker.errors
import requests
from docker.models.containers import Container

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"


def health_verdict(attrs: Mapping[str, object]) -> tuple[str, str]:
    """(verdict, detail) from a container's inspect data (pure): healthy, starting, crashed or unhealthy."""
    state = attrs.get("State") or {}
    assert isinstance(state, Mapping)
    restarts = int(attrs.get("RestartCount") or 0)  # type: ignore[call-overload]
    status = state.get("Status", "")
    if status in ("exited", "dead") or state.get("Restarting") or restarts > 0:
        return "crashed", f"exited with code {state.get('ExitCode')} (restarts: {restarts})"
    health = (state.get("Health") or {}).get("Status")
    if health == "healthy" and status == "running":
        return "healthy", "healthy"
    if health == "unhealthy":
        return "unhealthy", "its healthcheck on /health failed"
    if health is None and status == "running":
        return "starting", "running (no healthcheck)"
    return "starting", str(health or status)


def project_containers(client: docker.DockerClient, project: str, *, service: str | None = None) -> list[Container]:
    labels = [f"{COMPOSE_PROJECT_LABEL}={project}"]
    if service:
        labels.append(f"{COMPOSE_SERVICE_LABEL}={service}")
    return client.containers.list(all=True, filters={"label": labels})


def wait_healthy(
    client: docker.DockerClient, project: str, service: str, limit_s: float, say: Callable[[str], None]
) -> tuple[str, str]:
    """Poll the service's containers until all are healthy, one crashes or turns unhealthy, or `limit_s`."""
    deadline = time.monotonic() + limit_s
    last = ""
    while True:
        # Through the engine, not `compose ps`: one API call instead of a CLI start per poll.
        ids = [c.id for c in project_containers(client, project, service=service)]
        if not ids:
            return "crashed", "no container is running for the service"
        verdicts = []
        for cid in ids:
            try:
                attrs = client.api.inspect_container(cid)
            except docker.errors.NotFound:
                return "crashed", f"container {str(cid)[:12]} disappeared"
            verdicts.append(health_verdict(attrs))
        for verdict, detail in verdicts:
            if verdict in ("crashed", "unhealthy"):
                return verdict, detail
        if all(v == "healthy" for v, _ in verdicts):
            return "healthy", "healthy"
        state = ", ".join(d for _, d in verdicts)
        if state != last:
            say(f"waiting for /health: {state}")
            last = state
        if time.monotonic() > deadline:
            return "unhealthy", f"not healthy after {limit_s:.0f} s ({state})"
        time.sleep(1.0)


def answers_200(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.RequestException:
        return False


def container_log_tail(client: docker.DockerClient, project: str, service: str, lines: int) -> str:
    """The service's last log lines, through the engine (a compose CLI start costs seconds)."""
    out = []
    for c in project_containers(client, project, service=service):
        try:
            out.append(c.logs(stdout=True, stderr=True, tail=lines).decode("utf-8", "replace"))
        except docker.errors.APIError:
            continue
    return "".join(out)
