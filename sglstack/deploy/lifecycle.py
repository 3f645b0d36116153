"""What follows a deploy of one stack: rollback (a deploy of the recorded image before), the service's logs,
and undeploy (`down -v`, recorded)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..adapters.compose import ComposeCLI, detect_compose
from ..adapters.docker import docker_client
from ..core.clock import utc_timestamp
from ..core.errors import DeployError, last_line
from ..render import compose as cmp
from .checks import check_project_owner
from .deployment import LOG_TAIL_LINES, Deployment, Say, say_stderr
from .flow import deploy
from .health import COMPOSE_PROJECT_LABEL, project_containers
from .store import (
    DeploymentRecord,
    append_record,
    display_path,
    records_path,
    require_recordable,
    rollback_target,
)


def rollback(
    dep: Deployment,
    *,
    compose: ComposeCLI | None = None,
    wait_timeout_s: float | None = None,
    say: Say = say_stderr,
) -> DeploymentRecord:
    """Redeploy the healthy image recorded before the current one, with the options it ran with."""
    target = rollback_target(dep.records())
    if target is None:
        raise DeployError(
            f"stack '{dep.stack.name}': no earlier healthy deployment to roll back to in "
            f"{display_path(records_path(dep.build_root, dep.stack.name))}"
        )
    say(f"rolling back stack '{dep.stack.name}' to {target.image} (deployed {target.time})")
    options = cmp.ComposeOptions.from_record(target.options)
    return deploy(dep, target.image, options, compose=compose, wait_timeout_s=wait_timeout_s, action="rollback",
                  smoke_report=target.smoke_report, say=say)


def current_compose_file(dep: Deployment) -> Path:
    records = dep.records()
    name = records[-1].compose_file if records else cmp.COMPOSE_FILE
    path = dep.out_dir / name
    if not path.is_file():
        raise DeployError(f"stack '{dep.stack.name}': {display_path(path)} not found (deploy it first)")
    return path


def service_logs(
    dep: Deployment,
    *,
    compose: ComposeCLI | None = None,
    compose_file: Path | None = None,
    tail: int | None = LOG_TAIL_LINES,
) -> str:
    compose = compose or detect_compose()
    compose_file = compose_file or current_compose_file(dep)
    args = ["logs", "--no-color"] + (["--tail", str(tail)] if tail else [])
    proc = compose.run(dep.project_name, [compose_file], args, docker_host=dep.docker_host)
    return proc.stdout + (proc.stderr if proc.returncode else "")


def undeploy(dep: Deployment, *, compose: ComposeCLI | None = None, say: Say = say_stderr) -> int:
    """`down -v` the stack's project; return how many of its containers remain (0 unless something failed)."""
    require_recordable(dep.build_root, dep.stack.name)  # records must not keep naming a removed service
    compose = compose or detect_compose()
    say(f"compose: {compose.label}")
    client = docker_client(dep.docker_host)
    # Found by a derived name: another stack's containers there are not this stack's to remove.
    check_project_owner(client, project=dep.project_name, stack=dep.stack.name)
    path: Path | None
    try:
        path = current_compose_file(dep)
    except DeployError:
        path = None
    if path is not None:
        proc = compose.run(dep.project_name, [path], ["down", "-v", "--remove-orphans"], docker_host=dep.docker_host)
        if proc.returncode != 0:
            raise DeployError(f"project {dep.project_name}: compose down failed: {last_line(proc.stderr)}")
    else:
        # The build folder is gone: remove what carries the project's label.
        for c in project_containers(client, dep.project_name):
            c.remove(force=True, v=True)
        for network in client.networks.list(filters={"label": f"{COMPOSE_PROJECT_LABEL}={dep.project_name}"}):
            network.remove()
    left = project_containers(client, dep.project_name)
    if left:
        raise DeployError(f"project {dep.project_name}: {len(left)} container(s) still present after down")
    ours = dep.records()
    if ours:
        append_record(dep.build_root, replace(ours[-1], action="undeploy", result="removed", time=utc_timestamp(),
                                              note=""))
    say(f"stack '{dep.stack.name}' (project {dep.project_name}) removed")
    return len(left)
