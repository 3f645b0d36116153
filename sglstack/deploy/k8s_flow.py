"""Deploy and rollback of a stack as a LeaderWorkerSet: render, server-side apply, wait, record.

Every option and the manifests (schemas included) are checked, and kubectl and its context found, before
anything on the cluster changes. The wait reads the LWS status the controller writes: the new generation
observed, every group updated and ready, condition Available. When that does not come, or a signal
arrives meanwhile, the previous healthy deployment's manifests (its digest, its options) are rendered
and applied again and waited for; without one, what was applied is deleted. Both are recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..adapters.kubectl import Kubectl
from ..config.imageref import pinned_digest
from ..config.schema import Stack
from ..core import signals
from ..core.clock import utc_timestamp
from ..core.errors import DeployError, SglstackError, first_line
from ..core.records import stack_dir
from ..core.safefiles import OutputNotWritable
from ..core.signals import Interrupted
from ..render import k8s
from ..render import k8s_lws as lws
from ..render.k8s_cache import CacheCandidates
from ..serving import ServingSpec
from .deployment import DeployFailed, Say, say_stderr
from .files import discard_saved, restore_files, write_files
from .phases import k8s_phases, say_phases
from .store import (
    DeploymentRecord,
    append_record,
    display_path,
    not_recorded,
    read_records,
    record_or_why,
    records_path,
    require_recordable,
    rollback_target,
)

TARGET = "k8s"
MANAGED_BY = "app.kubernetes.io/managed-by"
POLL_S = 5.0


@dataclass
class K8sDeployment:
    stack: Stack
    build_root: Path
    kubectl: Kubectl

    @property
    def out_dir(self) -> Path:
        return stack_dir(self.stack.name, self.build_root) / k8s.K8S_DIR

    @property
    def name(self) -> str:
        return k8s.object_name(self.stack.name)

    @property
    def project(self) -> str:
        """Where it runs, as the records key it: context, namespace, LWS name."""
        return f"k8s:{self.kubectl.context}/{self.kubectl.namespace or '-'}/{self.name}"

    def records(self) -> list[DeploymentRecord]:
        return [r for r in read_records(self.build_root, self.stack.name)
                if r.target == TARGET and r.project == self.project]


def wait_limit(spec: ServingSpec, wait_timeout_s: float | None) -> float:
    """The option, else the startup probe's whole budget plus image pulls and scheduling."""
    if wait_timeout_s is not None:
        return wait_timeout_s
    h = spec.healthcheck
    return h.start_period_s + h.interval_s * (h.retries + 1) + 300


def rollout_state(obj: dict[str, Any] | None) -> tuple[bool, str]:
    """(ready, what is missing) of a LeaderWorkerSet as `kubectl get -o json` shows it (pure)."""
    if obj is None:
        return False, "the LeaderWorkerSet does not exist (is the LWS controller installed?)"
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status") or {}
    if status.get("observedGeneration", 0) < meta.get("generation", 1):
        return False, f"generation {meta.get('generation')} not yet observed by the LWS controller"
    want = spec.get("replicas", 1)
    if status.get("updatedReplicas", 0) < want:
        return False, f"{status.get('updatedReplicas', 0)}/{want} groups updated"
    if status.get("readyReplicas", 0) < want:
        return False, f"{status.get('readyReplicas', 0)}/{want} groups ready (leader /health)"
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    available = conditions.get(lws.CONDITION_AVAILABLE, {})
    if available.get("status") != "True":
        return False, f"condition Available is not True ({available.get('message') or 'not set'})"
    return True, "available"


def wait_ready(dep: K8sDeployment, limit_s: float, say: Say) -> str | None:
    """None once the LWS is available at its new generation; else what was missing at the deadline."""
    deadline = time.monotonic() + limit_s
    last = ""
    while True:
        ready, detail = rollout_state(dep.kubectl.get_json("leaderworkerset", dep.name))
        if ready:
            return None
        if detail != last:
            say(f"waiting for leaderworkerset/{dep.name}: {detail}")
            last = detail
        left = deadline - time.monotonic()
        if left <= 0:
            return f"not ready within {limit_s:g}s: {detail}"
        time.sleep(min(POLL_S, left))


def deploy_k8s(dep: K8sDeployment, image_ref: str, options: k8s.K8sOptions, *, wait_timeout_s: float | None = None,
               action: str = "deploy", smoke_report: str | None = None, say: Say = say_stderr,
               caches: CacheCandidates | None = None) -> DeploymentRecord:
    """Render, apply, wait until ready, record; on failure the previous deployment comes back."""
    spec = k8s.k8s_spec(dep.stack, options)
    files = k8s.render_k8s(dep.stack, image_ref, options, smoke_report=smoke_report, caches=caches)  # validated
    tool = dep.kubectl.label()
    say(f"k8s: {tool}")
    check_owner(dep)
    require_recordable(dep.build_root, dep.stack.name)
    previous = _serving_now(dep.records())
    saved = write_files(dep.out_dir, files)
    try:
        return _apply(dep, image_ref, options, spec, saved, tool, action, smoke_report, previous, wait_timeout_s,
                      files, say)
    finally:
        discard_saved(saved)


# long: the apply, the wait and each way of undoing them read best in order, as flow's deploy does
def _apply(dep: K8sDeployment, image_ref: str, options: k8s.K8sOptions, spec: ServingSpec,
           saved: dict[Path, Path | None], tool: str, action: str, smoke_report: str | None,
           previous: DeploymentRecord | None, wait_timeout_s: float | None, files: dict[str, str], say: Say
           ) -> DeploymentRecord:
    """Apply the written manifests, wait, record; undo on any failure (as `flow.deploy` does)."""
    say(f"rendered {display_path(dep.out_dir)}/ ({', '.join(files)})")
    attempt = DeploymentRecord(
        stack=dep.stack.name, action=action, result="failed", image=image_ref,
        digest=pinned_digest(image_ref) or "", image_id="", time=utc_timestamp(),
        host=dep.kubectl.context,
        docker_host="", project=dep.project, compose_tool=tool, compose_file=f"{k8s.K8S_DIR}/{k8s.LWS_FILE}",
        options=options.to_record(), smoke_report=smoke_report or "unknown", target=TARGET,
    )
    say(f"applying leaderworkerset/{dep.name} (size {options.nnodes}, replicas {options.replicas}): {image_ref}")
    failure: str | None = None
    applied = False
    try:
        dep.kubectl.apply(dep.out_dir, f"stack '{dep.stack.name}'")
        applied = True
        failure = wait_ready(dep, wait_limit(spec, wait_timeout_s), say)
    except BaseException as exc:
        if not applied and isinstance(exc, DeployError) and not getattr(exc, "applied", ()):
            # The API server refused every object: nothing changed there, so nothing changes here. (A
            # partial apply, the LeaderWorkerSet applied and the Service refused, is a change: recovered.)
            restore_files(saved)
            record_or_why(dep.build_root, replace(attempt, time=utc_timestamp(), note=str(exc)))
            raise
        why = (f"interrupted ({exc.name})" if isinstance(exc, Interrupted) else
               "interrupted" if isinstance(exc, KeyboardInterrupt) else first_line(str(exc)))
        outcome = "the rollback did not finish"
        try:
            with signals.deferred():
                outcome = _recover(dep, attempt, previous, why, say)
        finally:
            say(f"{why}; {outcome}" if why.startswith(f"stack '{dep.stack.name}'") else
                f"stack '{dep.stack.name}': {why}; {outcome}")
        if isinstance(exc, DeployError):  # the error line says what was undone, like a failed wait's
            raise DeployFailed(f"{first_line(str(exc))}; {outcome}", "") from None
        raise
    if failure is not None:
        outcome = _recover_shielded(dep, attempt, previous, failure, say, unfinished="the rollback did not finish")
        raise DeployFailed(f"stack '{dep.stack.name}' (leaderworkerset/{dep.name}): {failure}; {outcome}", "")
    phases = k8s_phases(dep.kubectl, dep.name, k8s.CONTAINER)
    say_phases(f"{dep.name}-0", phases, say)  # a log with none of the lines says nothing
    record = replace(attempt, result="healthy", time=utc_timestamp(), phases=phases)
    try:
        append_record(dep.build_root, record)
    except OutputNotWritable as exc:
        # Ready but unrecorded: undone, so that what runs is what the records end with (see `flow`).
        why = f"ready, but its record was not written ({exc})"
        outcome = _recover_shielded(dep, attempt, previous, why, say, unfinished="the undo did not finish")
        raise DeployFailed(f"stack '{dep.stack.name}' (leaderworkerset/{dep.name}): {why}; undone: {outcome}",
                           "") from None
    say(f"stack '{dep.stack.name}' is ready on {dep.kubectl.context} ({record.digest}); recorded in "
        f"{display_path(records_path(dep.build_root, dep.stack.name))}")
    return record


def owner_problem(stack: str, kind: str, obj: dict[str, Any] | None) -> str | None:
    """Why `stack` may not apply over, or delete, `obj` (as `kubectl get -o json` shows it); None when it
    does not exist or is this stack's (pure). Its name is derived from the stack's (`names.py`), which
    another matrix file, a renamed stack or someone else's object may share."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    owner = (meta.get("annotations") or {}).get(k8s.ANNOTATION_PREFIX + "stack")
    if owner == stack:
        return None
    if owner is None and kind == "service" and (meta.get("labels") or {}).get(MANAGED_BY) == "sglstack":
        return None  # applied by an sglstack whose Services had no stack annotation: its LWS decides
    whose = f"stack '{owner}'" if owner else f"no sglstack stack (no {k8s.ANNOTATION_PREFIX}stack annotation)"
    return (f"{kind}/{meta.get('name')} exists and is {whose}'s, not stack '{stack}''s: it is not this stack's "
            "to replace or delete (nothing was changed)")


def check_owner(dep: K8sDeployment) -> None:
    """Refuse before anything is applied when the LWS or Service of this name belongs to another stack."""
    for kind, name in (("leaderworkerset", dep.name), ("service", k8s.service_name(dep.stack.name))):
        if problem := owner_problem(dep.stack.name, kind, dep.kubectl.get_json(kind, name)):
            raise DeployError(f"stack '{dep.stack.name}': {problem}")


def _serving_now(records: list[DeploymentRecord]) -> DeploymentRecord | None:
    served = [r for r in records if r.action in ("deploy", "rollback", "restore", "undeploy")]
    if not served or served[-1].result != "healthy" or served[-1].action == "undeploy":
        return None
    return served[-1]


def _recover_shielded(dep: K8sDeployment, attempt: DeploymentRecord, previous: DeploymentRecord | None, why: str,
                      say: Say, *, unfinished: str) -> str:
    """`_recover` with signals held until it is done; a signal that ends it anyway is said with what is left
    (`unfinished`) before it goes on."""
    outcome = unfinished
    try:
        with signals.deferred():
            outcome = _recover(dep, attempt, previous, why, say)
    except Interrupted:
        say(f"stack '{dep.stack.name}': {why}; {outcome}")
        raise
    return outcome


def _recover(dep: K8sDeployment, attempt: DeploymentRecord, previous: DeploymentRecord | None,
             reason: str, say: Say) -> str:
    """Record the failed attempt; apply the previous digest's manifests again (or delete the new ones). Each
    happens whether or not its record can be written; the outcome says what was not recorded."""
    unrecorded = record_or_why(dep.build_root, replace(attempt, time=utc_timestamp(), note=reason))
    if previous is None:
        try:
            dep.kubectl.delete(dep.out_dir)
        except (SglstackError, OSError) as exc:
            return f"no earlier deployment to roll back to, and {first_line(str(exc))}" + not_recorded(
                unrecorded)
        return "no earlier deployment to roll back to: deleted what was applied" + not_recorded(unrecorded)
    say(f"rolling back leaderworkerset/{dep.name} to {previous.digest} (its manifests re-applied)")
    detail: str | None = None
    try:
        options = k8s.K8sOptions.from_record(previous.options)
        spec = k8s.k8s_spec(dep.stack, options)
        discard_saved(write_files(dep.out_dir, k8s.render_k8s(dep.stack, previous.image, options,
                                                              smoke_report=previous.smoke_report)))
        dep.kubectl.apply(dep.out_dir, f"stack '{dep.stack.name}'")
        detail = wait_ready(dep, wait_limit(spec, None), say)
    except (SglstackError, OSError) as exc:
        detail = first_line(str(exc))
    unrecorded = unrecorded or record_or_why(dep.build_root, replace(
        previous, action="restore", result="failed" if detail else "healthy", time=utc_timestamp(),
        note=f"after the failed {attempt.action} of {attempt.image}" + (f": {detail}" if detail else "")))
    if detail is None:
        return f"rolled back to {previous.digest} (ready)" + not_recorded(unrecorded)
    return f"rolling back to {previous.digest} failed too: {detail}" + not_recorded(unrecorded)


def rollback_k8s(dep: K8sDeployment, *, wait_timeout_s: float | None = None, say: Say = say_stderr,
                 check_image: Callable[[str], None] = lambda _ref: None) -> DeploymentRecord:
    """Apply the healthy digest recorded before the current one, with the options it ran with; `check_image`
    (the nodes' platforms against it, as a deploy checks them) runs before anything is applied."""
    target = rollback_target(dep.records())
    if target is None:
        raise DeployError(f"stack '{dep.stack.name}': no earlier healthy k8s deployment ({dep.project}) to roll "
                          f"back to in {display_path(records_path(dep.build_root, dep.stack.name))}")
    check_image(target.image)
    say(f"rolling back stack '{dep.stack.name}' to {target.image} (deployed {target.time})")
    return deploy_k8s(dep, target.image, k8s.K8sOptions.from_record(target.options), wait_timeout_s=wait_timeout_s,
                      action="rollback", smoke_report=target.smoke_report, say=say)
