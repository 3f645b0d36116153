"""Compose deployment of a published stack: deploy, status, logs, undeploy, rollback.

One module per job: `errors` (its bad input), `actions` and `k8s_actions` (what each task does, from a `Stack`
and typed values: the face, `sglstack.cli.deploy`, loads the matrix and turns the options into them), `guard`
(the checks before anything changes), `identity` (what a release signature must name),
`flow` (deploy / rollback / undeploy, with the restore of the previous deployment after a failed one),
`checks` (what is checked before anything changes), `images` (which image, and the smoke report that
passed it), `health`, `store` (the deployment records), `status` (the table); `ComposeCLI` and
`detect_compose` come from the compose adapter (`sglstack.adapters.compose`).

Names are re-exported lazily: `sglstack.cli.deploy` imports `sglstack.deploy.errors` at start-up, and loading the
Docker SDK there would slow down every `invoke` call, including `invoke --list`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ComposeCLI": "..adapters.compose",
    "detect_compose": "..adapters.compose",
    "DeploymentRecord": "store",
    "append_record": "store",
    "read_records": "store",
    "records_path": "store",
    "rollback_target": "store",
    "serving_now": "store",
    "published_image_ref": "images",
    "resolve_image_ref": "images",
    "image_identity": "images",
    "COMPOSE_PROJECT_LABEL": "health",
    "health_verdict": "health",
    "DeployFailed": "flow",
    "Deployment": "flow",
    "deploy": "flow",
    "rollback": "lifecycle",
    "undeploy": "lifecycle",
    "service_logs": "lifecycle",
    "StackStatus": "status",
    "deployment_status": "status",
    "format_duration": "status",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sglstack.deploy' has no attribute '{name}'")
    return getattr(importlib.import_module(module if module.startswith(".") else f".{module}", __name__), name)
