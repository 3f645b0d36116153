"""Deploying: `invoke deploy`, `status`, `logs`, `undeploy`, `rollback` (options: `sglstack.deploy.options`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..deploy.options import DeployOptions, LogsOptions, RollbackOptions, StatusOptions, UndeployOptions
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport

# The entry points are imported when a task runs: they load the Docker SDK, which would slow down every
# `invoke` call (even `invoke --list`).


@command(DeployOptions)
def deploy(o: DeployOptions) -> None:
    """Deploy a published stack with compose, wait until /health answers, record it; a failed redeploy
    restores the previous deployment."""
    from ..deploy.actions import deploy_command  # at call time: see above

    deploy_command(o)


@command(StatusOptions)
def status(o: StatusOptions, as_json: JsonReport) -> int:
    """Show each deployed stack: digest, smoke report, health, uptime, model and EAGLE-3 settings (exit 1
    when a records line does not read: it is named, and the rest is shown)."""
    from ..deploy.actions import status_command  # at call time: see above

    return status_command(o, as_json=as_json)


@command(LogsOptions)
def logs(o: LogsOptions) -> None:
    """Print the deployed stack's server logs."""
    from ..deploy.actions import logs_command  # at call time: see above

    logs_command(o)


@command(UndeployOptions)
def undeploy(o: UndeployOptions) -> None:
    """Stop and remove a deployed stack (compose down -v)."""
    from ..deploy.actions import undeploy_command  # at call time: see above

    undeploy_command(o)


@command(RollbackOptions)
def rollback(o: RollbackOptions) -> None:
    """Redeploy the image recorded before the current one, with the options it ran with."""
    from ..deploy.actions import rollback_command  # at call time: see above

    rollback_command(o)
