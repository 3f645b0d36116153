"""The kubectl adapter: the only place that runs kubectl (found on PATH, as a user runs it).

Every call names the context explicitly, so a `kubectl config use-context` elsewhere during a deploy
cannot send the rollback to another cluster.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.credentials import tool_environment
from ..core.errors import DeployError, last_line
from ..core.inputs import loads

FIELD_MANAGER = "sglstack"
TIMEOUT_S = 120


class ApplyFailed(DeployError):
    """`kubectl apply` failed; `applied` names the objects it applied before (a partial apply is a change)."""

    def __init__(self, message: str, applied: tuple[str, ...]) -> None:
        super().__init__(message)
        self.applied = applied


@dataclass(frozen=True)
class Kubectl:
    binary: str
    context: str
    namespace: str | None = None

    def run(self, args: list[str], *, check: str | None = None) -> subprocess.CompletedProcess[str]:
        """`kubectl --context C [--namespace N] ARGS`; with `check`, a non-zero exit is a DeployError."""
        argv = [self.binary, "--context", self.context]
        if self.namespace:
            argv += ["--namespace", self.namespace]
        try:
            proc = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                                  env=tool_environment())
        except subprocess.TimeoutExpired:
            raise DeployError(f"kubectl {' '.join(args[:2])}: no answer within {TIMEOUT_S}s") from None
        if check and proc.returncode != 0:
            raise DeployError(f"{check}: kubectl {' '.join(args[:2])} failed: {last_line(proc.stderr)}")
        return proc

    def label(self) -> str:
        proc = self.run(["version", "--client", "-o", "json"])
        try:
            version = loads(proc.stdout)["clientVersion"]["gitVersion"]
        except (ValueError, KeyError, TypeError):
            version = "?"
        return f"kubectl {version} (context {self.context})"

    def apply(self, folder: Path, what: str) -> str:
        # Server-side apply with our own field manager; --force-conflicts takes back the fields a hand
        # edit took (`kubectl set image`), so that a rollback really serves the recorded digest.
        # kubectl applies the files' objects one by one and goes on past a refused one: what it printed as
        # applied before failing is on the cluster now.
        proc = self.run(["apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "--force-conflicts",
                         "-f", str(folder)])
        if proc.returncode != 0:
            applied = tuple(line.split()[0] for line in proc.stdout.splitlines()
                            if line.strip().endswith(("serverside-applied", "configured", "created", "unchanged")))
            partly = f" (after applying {', '.join(applied)})" if applied else ""
            raise ApplyFailed(f"{what}: kubectl apply --server-side failed{partly}: {last_line(proc.stderr)}",
                              applied)
        return proc.stdout

    def delete(self, folder: Path) -> None:
        """Delete the folder's objects (absent ones are fine); a refusal is a DeployError, never 'done'."""
        self.run(["delete", "--ignore-not-found", "--wait=false", "-f", str(folder)],
                 check="deleting what was applied")

    def node_platforms(self) -> tuple[str, ...] | str:
        """The platforms (`os/arch`) of the cluster's nodes, each once; or why they cannot be read (a role
        without `list nodes`), for the caller to say that the platform was not checked."""
        proc = self.run(["get", "nodes", "-o", "json"])
        if proc.returncode != 0:
            return last_line(proc.stderr)
        try:
            items = loads(proc.stdout).get("items") or []
            return tuple(dict.fromkeys(f"{i['status']['nodeInfo']['operatingSystem']}/"
                                       f"{i['status']['nodeInfo']['architecture']}" for i in items))
        except (ValueError, KeyError, TypeError, AttributeError):
            return "kubectl get nodes: not the JSON of a node list"

    def get_json(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object as `kubectl get KIND NAME -o json` shows it; None when it does not exist."""
        proc = self.run(["get", kind, name, "-o", "json"])
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise DeployError(f"kubectl get {kind} {name} failed: {last_line(proc.stderr)}")
        try:
            data = loads(proc.stdout)
        except ValueError:
            raise DeployError(f"kubectl get {kind} {name}: not JSON") from None
        return data if isinstance(data, dict) else None


    def logs(self, pod: str, container: str) -> str | None:
        """`kubectl logs POD -c CONTAINER --timestamps` (each line with its UTC time); None when unreadable."""
        proc = self.run(["logs", pod, "-c", container, "--timestamps"])
        return proc.stdout if proc.returncode == 0 else None


def find_kubectl(context: str | None, namespace: str | None) -> Kubectl:
    """kubectl on PATH and a context to use (the given one, which must exist, else the current one)."""
    binary = shutil.which("kubectl")
    if binary is None:
        raise DeployError("--on k8s: kubectl not found on PATH (nothing was changed)")
    if context is None:
        proc = subprocess.run([binary, "config", "current-context"], capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False, env=tool_environment())
        current = proc.stdout.strip()
        if proc.returncode != 0 or not current:
            raise DeployError("--on k8s: no current kubectl context "
                              f"({last_line(proc.stderr)}); pass --context or run `kubectl config use-context`")
        return Kubectl(binary, current, namespace)
    proc = subprocess.run([binary, "config", "get-contexts", "-o", "name"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False, env=tool_environment())
    if context not in proc.stdout.split():
        raise DeployError(f"--context {context}: not a context of your kubeconfig (kubectl config get-contexts)")
    return Kubectl(binary, context, namespace)
