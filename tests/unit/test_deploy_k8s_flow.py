"""`deploy_k8s` and `rollback_k8s` in process, against the recording kubectl stand-in on PATH (as
tests/cli/test_deploy_k8s.py runs them through `invoke`): every line said, every record written, every
kubectl call, on each way a rollout ends. The wait's clock is the test's, so no test waits or depends on speed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess, TimeoutExpired
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from deploy_fixtures import make_test_stack
from fake_clock import FakeClock

from sglstack.adapters import kubectl as kubectl_adapter
from sglstack.adapters.kubectl import Kubectl
from sglstack.core.errors import DeployError
from sglstack.core.signals import Interrupted
from sglstack.deploy import k8s_flow
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.k8s_flow import K8sDeployment, deploy_k8s, owner_problem, rollback_k8s
from sglstack.deploy.store import DeploymentRecord, append_record, read_records
from sglstack.render import k8s
from sglstack.render.k8s_cache import CacheCandidates
from sglstack.serving.phases import MILESTONES, PHASES

DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "kubectl"
REPO = "127.0.0.1:5000/sglstack/sglang"
A = f"{REPO}@sha256:{'a' * 64}"
B = f"{REPO}@sha256:{'b' * 64}"
OPTIONS = k8s.K8sOptions(gpus=False, nnodes=2)
NAME = k8s.object_name("tiny")  # sglstack-tiny


_DOUBLE_CODE = compile((DOUBLE / "kubectl").read_text(encoding="utf-8"), str(DOUBLE / "kubectl"), "exec")
_real_run = subprocess.run
_ADAPTER_PROCESSES = kubectl_adapter.subprocess  # what the adapter starts kubectl with


def _kubectl_in_process(argv, *, env=None, **kwargs):
    """The kubectl stand-in's own code, run in this process with the argv and environment the adapter gives
    it, its exit and output returned as `subprocess.run` returns them. A fresh Python per kubectl call
    cost ~0.1 s of CPU, 5-100 a test: most of this module's time. What these tests check is the flow;
    the adapter's real child process is tests/cli/test_deploy_k8s.py's (and the first test here)."""
    if argv[0] != str(DOUBLE / "kubectl"):
        return _real_run(argv, env=env, **kwargs)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with mock.patch.object(sys, "argv", list(argv)), mock.patch.dict(os.environ, env or {}, clear=True), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(_DOUBLE_CODE, {"__name__": "kubectl_double"})
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1  # as Python exits
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


@pytest.fixture
def cluster(tmp_path, monkeypatch, request):
    if "kubectl_as_a_child" not in request.fixturenames:
        monkeypatch.setattr(kubectl_adapter.subprocess, "run", _kubectl_in_process)
    monkeypatch.setenv("PATH", f"{DOUBLE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECTL_DOUBLE_STATE", str(tmp_path / "kube"))
    monkeypatch.setenv("KUBECTL_DOUBLE_CONTEXT", "kind-sglstack")
    for name in ("KUBECTL_DOUBLE_UNREADY", "KUBECTL_DOUBLE_QUOTA", "KUBECTL_DOUBLE_FORBID_DELETE",
                 "KUBECTL_DOUBLE_POD_STARTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    # The default build root is not the deployment's: a record written to the default one is not found.
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "default-build"))
    clock = FakeClock(100.0)
    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    said: list[str] = []
    dep = K8sDeployment(stack=make_test_stack(tmp_path / "m"), build_root=tmp_path / "build",
                        kubectl=Kubectl(str(DOUBLE / "kubectl"), "kind-sglstack"))
    return dep, said, clock, tmp_path / "kube"


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line)[2:] for line in (state / "argv.jsonl").read_text().splitlines()]


def applied_image(state: Path) -> str | None:
    path = state / "objects" / f"LeaderWorkerSet.default.{NAME}.json"
    if not path.is_file():
        return None
    obj = json.loads(path.read_text())
    return obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"]


@pytest.fixture
def one_poll_per_wait(monkeypatch):
    """A rollback that never gets ready waits its recorded options' whole limit (540 s here): at the 5 s poll
    that is 108 runs of the kubectl stand-in (a Python program, ~0.1 s of CPU each). The poll is this
    module's own setting and these tests assert what is said and recorded at the deadline, not the polls."""
    monkeypatch.setattr(k8s_flow, "POLL_S", 10_000.0)


def rows(dep: K8sDeployment) -> list[tuple[str, str, str, str]]:
    return [(r.action, r.result, r.image, r.note) for r in read_records(dep.build_root, "tiny")]


@pytest.fixture
def kubectl_as_a_child():
    """Asked for by a test that runs the stand-in as a real child process, as the adapter does in use."""


def test_a_deploy_applies_waits_and_records_every_field(kubectl_as_a_child, cluster):
    dep, said, clock, state = cluster
    record = deploy_k8s(dep, A, OPTIONS, smoke_report="f" * 64, say=said.append)
    assert said == [
        "k8s: kubectl v1.32.4-double (context kind-sglstack)",
        "rendered build/tiny/k8s/ (leaderworkerset.yaml, service.yaml)",
        f"applying leaderworkerset/{NAME} (size 2, replicas 1): {A}",
        f"stack 'tiny' is ready on kind-sglstack (sha256:{'a' * 64}); recorded in build/tiny/deployments.jsonl",
    ]
    assert record.to_dict() | {"time": "T"} == {
        "stack": "tiny", "action": "deploy", "result": "healthy", "image": A, "digest": f"sha256:{'a' * 64}",
        "image_id": "", "time": "T", "host": "kind-sglstack", "docker_host": "",
        "project": f"k8s:kind-sglstack/-/{NAME}", "compose_tool": "kubectl v1.32.4-double (context kind-sglstack)",
        "compose_file": f"k8s/{k8s.LWS_FILE}", "options": OPTIONS.to_record(), "smoke_report": "f" * 64, "note": "",
        "target": "k8s", "kernel_cache": "",
        # the leader pod's log (the double's is empty): every milestone unknown, none guessed
        "phases": {"milestones_s": dict.fromkeys(MILESTONES), "phases_s": dict.fromkeys(p for p, _, _ in PHASES),
                   "unknown": list(MILESTONES), "resolution_s": 0.001},
    }
    assert read_records(dep.build_root, "tiny") == [record]
    assert calls(state) == [
        ["version", "--client", "-o", "json"],
        ["get", "leaderworkerset", NAME, "-o", "json"],
        ["get", "service", k8s.service_name("tiny"), "-o", "json"],
        ["apply", "--server-side", "--field-manager=sglstack", "--force-conflicts", "-f",
         str(dep.build_root / "tiny" / "k8s")],
        ["get", "leaderworkerset", NAME, "-o", "json"],
        ["get", "pod", f"{NAME}-0", "-o", "json"],
        ["logs", f"{NAME}-0", "-c", "sglang", "--timestamps"],
    ]
    assert clock.sleeps == []
    assert sorted(p.name for p in (dep.build_root / "tiny" / "k8s").iterdir()) == [k8s.LWS_FILE, "service.yaml"]


def test_the_record_keeps_the_leaders_start_by_phase_from_its_log(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_POD_STARTED", "2026-12-05T03:00:00Z")
    logs = state / "pod-logs"
    logs.mkdir(parents=True)
    (logs / f"{NAME}-0.sglang.log").write_text(
        "2026-12-05T03:00:38.500000000Z [2026-12-05 03:00:38] server_args=ServerArgs(model_path='m')\n"
        "2026-12-05T03:00:40.000000000Z [2026-12-05 03:00:40 TP0] Load weight end. elapsed=1.2 s\n"
        "2026-12-05T03:02:02.000000000Z [2026-12-05 03:02:02 TP0] Capture target decode CUDA graph end. elapsed=82 s\n"
        "2026-12-05T03:02:10.250000000Z [2026-12-05 03:02:10] The server is fired up and ready to roll!\n")
    record = deploy_k8s(dep, A, OPTIONS, say=said.append)
    assert record.phases["milestones_s"] == {"imports_done": 38.5, "weights_loaded": 40.0,
                                             "cuda_graphs_captured": 122.0, "healthy": 130.25, "first_token": None}
    assert f"{NAME}-0: start by phase: imports 38.5s, weights 1.5s, cuda_graphs 82.0s, to_healthy 8.2s, " \
           "first_token unknown" in said
    assert read_records(dep.build_root, "tiny")[-1].phases == record.phases


def test_an_unready_update_rolls_back_to_the_previous_digest_with_its_options(cluster, monkeypatch):
    dep, said, clock, state = cluster
    first = k8s.K8sOptions(gpus=False, nnodes=3)
    deploy_k8s(dep, A, first, smoke_report="f" * 64, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=12, say=said.append)
    assert str(failed.value) == (
        f"stack 'tiny' (leaderworkerset/{NAME}): not ready within 12s: 0/1 groups ready (leader /health); "
        f"rolled back to sha256:{'a' * 64} (ready)")
    assert failed.value.log_tail == ""
    assert said[2:] == [
        f"applying leaderworkerset/{NAME} (size 2, replicas 1): {B}",
        f"waiting for leaderworkerset/{NAME}: 0/1 groups ready (leader /health)",
        f"rolling back leaderworkerset/{NAME} to sha256:{'a' * 64} (its manifests re-applied)",
    ]
    assert clock.sleeps == [5.0, 5.0, 2.0]  # the poll, cut to what is left of the limit
    assert applied_image(state) == A
    lws = json.loads((state / "objects" / f"LeaderWorkerSet.default.{NAME}.json").read_text())
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 3  # the options the digest ran with
    assert "f" * 64 in json.dumps(lws["metadata"])  # and the smoke report that let it through
    assert rows(dep) == [
        ("deploy", "healthy", A, ""),
        ("deploy", "failed", B,
         "not ready within 12s: 0/1 groups ready (leader /health)"),
        ("restore", "healthy", A, f"after the failed deploy of {B}"),
    ]
    restore = read_records(dep.build_root, "tiny")[-1]
    assert (restore.options, restore.smoke_report) == (first.to_record(), "f" * 64)


def test_a_rollback_that_does_not_get_ready_either_says_so(cluster, monkeypatch, one_poll_per_wait):
    dep, said, _clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", f"{'a' * 64},{'b' * 64}")
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=5, say=said.append)
    problem = "0/1 groups ready (leader /health)"
    limit = k8s_flow.wait_limit(k8s.k8s_spec(dep.stack, OPTIONS), None)
    assert str(failed.value) == (
        f"stack 'tiny' (leaderworkerset/{NAME}): not ready within 5s: {problem}; rolling back to "
        f"sha256:{'a' * 64} failed too: not ready within {limit:g}s: {problem}")
    assert rows(dep)[1:] == [
        ("deploy", "failed", B, f"not ready within 5s: {problem}"),
        ("restore", "failed", A, f"after the failed deploy of {B}: not ready within {limit:g}s: {problem}"),
    ]


def test_a_first_deploy_that_never_gets_ready_deletes_what_it_applied(cluster, monkeypatch):
    dep, said, clock, state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, A, OPTIONS, wait_timeout_s=1, say=said.append)
    assert str(failed.value) == (
        f"stack 'tiny' (leaderworkerset/{NAME}): not ready within 1s: 0/1 groups ready (leader /health); "
        "no earlier deployment to roll back to: deleted what was applied")
    assert calls(state)[-1] == ["delete", "--ignore-not-found", "--wait=false", "-f",
                                str(dep.build_root / "tiny" / "k8s")]
    assert applied_image(state) is None
    assert clock.sleeps == [1.0]
    assert rows(dep) == [("deploy", "failed", A,
                          "not ready within 1s: 0/1 groups ready (leader /health)")]


def test_a_refused_delete_is_said_not_taken_for_done(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)
    monkeypatch.setenv("KUBECTL_DOUBLE_FORBID_DELETE", "1")
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, A, OPTIONS, wait_timeout_s=1, say=said.append)
    assert str(failed.value).endswith(
        "; no earlier deployment to roll back to, and deleting what was applied: kubectl delete --ignore-not-found "
        "failed: Error from server (Forbidden): leaderworkersets.leaderworkerset.x-k8s.io \"sglstack-tiny\" is "
        "forbidden: User \"deployer\" cannot delete resource \"leaderworkersets\" in API group "
        "\"leaderworkerset.x-k8s.io\" in the namespace \"default\"")
    assert applied_image(state) == A


def test_an_apply_refused_whole_changes_nothing_and_records_why(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    before = {p.name: p.read_text() for p in (dep.build_root / "tiny" / "k8s").iterdir()}
    (state / "objects" / f"LeaderWorkerSet.default.{NAME}.json").unlink()
    (state / "objects" / f"Service.default.{k8s.service_name('tiny')}.json").unlink()
    monkeypatch.setenv("KUBECTL_DOUBLE_QUOTA", "LeaderWorkerSet,Service")
    with pytest.raises(DeployError) as refused:
        deploy_k8s(dep, B, OPTIONS, say=said.append)
    assert not isinstance(refused.value, DeployFailed)
    assert str(refused.value).startswith("stack 'tiny': kubectl apply --server-side failed: Error from server")
    assert {p.name: p.read_text() for p in (dep.build_root / "tiny" / "k8s").iterdir()} == before
    assert rows(dep) == [("deploy", "healthy", A, ""), ("deploy", "failed", B, str(refused.value))]
    assert not any(c[0] == "delete" for c in calls(state))
    assert len(said) == 3  # nothing said of a rollback


def test_a_partial_apply_is_undone_and_the_error_says_how(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_QUOTA", "Service")
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, A, OPTIONS, say=said.append)
    assert str(failed.value) == (
        "stack 'tiny': kubectl apply --server-side failed (after applying "
        "leaderworkerset.leaderworkerset.x-k8s.io/sglstack-tiny): Error from server (Forbidden): services "
        "\"sglstack-tiny-api\" is forbidden: exceeded quota: services-quota, requested: services=1, used: services=4, "
        "limited: services=4; no earlier deployment to roll back to: deleted what was applied")
    assert said[-1] == str(failed.value)
    assert applied_image(state) is None
    assert rows(dep) == [("deploy", "failed", A, str(failed.value).rsplit("; no earlier", 1)[0])]


def test_a_signal_while_waiting_rolls_back_says_it_and_goes_on(cluster, monkeypatch):
    dep, said, clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)

    def interrupted(_seconds):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=interrupted))
    with pytest.raises(Interrupted):
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=60, say=said.append)
    assert said[-2:] == [
        f"rolling back leaderworkerset/{NAME} to sha256:{'a' * 64} (its manifests re-applied)",
        f"stack 'tiny': interrupted (SIGTERM); rolled back to sha256:{'a' * 64} (ready)",
    ]
    assert rows(dep)[1:] == [("deploy", "failed", B, "interrupted (SIGTERM)"),
                             ("restore", "healthy", A, f"after the failed deploy of {B}")]
    assert applied_image(state) == A


def test_a_ready_deploy_whose_record_cannot_be_written_is_undone(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    written = []

    def append_once(root, record):
        if record.result == "healthy" and record.action == "deploy":
            from sglstack.core.safefiles import OutputNotWritable
            raise OutputNotWritable("the disk is full")
        written.append(record)
        append_record(root, record)

    monkeypatch.setattr(k8s_flow, "append_record", append_once)
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, say=said.append)
    assert str(failed.value) == (
        f"stack 'tiny' (leaderworkerset/{NAME}): ready, but its record was not written (the disk is full); "
        f"undone: rolled back to sha256:{'a' * 64} (ready)")
    assert applied_image(state) == A
    assert failed.value.log_tail == ""
    assert rows(dep)[1:] == [("deploy", "failed", B, "ready, but its record was not written (the disk is full)"),
                             ("restore", "healthy", A, f"after the failed deploy of {B}")]
    said.clear()

    def signalled(*_a, **_k):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(k8s_flow, "_recover", signalled)
    with pytest.raises(Interrupted):
        deploy_k8s(dep, B, OPTIONS, say=said.append)
    assert said[-1] == ("stack 'tiny': ready, but its record was not written (the disk is full); "
                        "the undo did not finish")


def test_a_deploy_whose_records_cannot_be_written_applies_nothing(cluster):
    dep, said, _clock, state = cluster
    (dep.build_root / "tiny" / "deployments.jsonl").mkdir(parents=True)  # not a file: nothing can be appended
    with pytest.raises(DeployError) as refused:
        deploy_k8s(dep, A, OPTIONS, say=said.append)
    assert str(refused.value).endswith("nothing was changed (a deployment that cannot be recorded is not started)")
    assert applied_image(state) is None
    assert not any(c[0] == "apply" for c in calls(state))


def test_another_stacks_objects_are_refused_before_any_apply(cluster):
    dep, said, _clock, state = cluster
    other = K8sDeployment(stack=make_test_stack(state.parent / "o", "tiny"), build_root=state.parent / "b2",
                          kubectl=dep.kubectl)
    deploy_k8s(other, A, OPTIONS, say=lambda _m: None)
    path = state / "objects" / f"LeaderWorkerSet.default.{NAME}.json"
    obj = json.loads(path.read_text())
    obj["metadata"]["annotations"][k8s.ANNOTATION_PREFIX + "stack"] = "audit"
    path.write_text(json.dumps(obj))
    applies = len([c for c in calls(state) if c[0] == "apply"])
    with pytest.raises(DeployError) as refused:
        deploy_k8s(dep, B, OPTIONS, say=said.append)
    assert str(refused.value) == (
        f"stack 'tiny': leaderworkerset/{NAME} exists and is stack 'audit''s, not stack 'tiny''s: it is not this "
        "stack's to replace or delete (nothing was changed)")
    assert len([c for c in calls(state) if c[0] == "apply"]) == applies


@pytest.mark.parametrize(("kind", "meta", "problem"), [
    ("service", {"name": "s", "labels": {k8s_flow.MANAGED_BY: "sglstack"}}, None),
    ("leaderworkerset", {"name": "s", "labels": {k8s_flow.MANAGED_BY: "sglstack"}},
     "leaderworkerset/s exists and is no sglstack stack (no io.sglstack/stack annotation)'s, not stack 'tiny''s: "
     "it is not this stack's to replace or delete (nothing was changed)"),
    ("service", {"name": "s", "labels": {k8s_flow.MANAGED_BY: "helm"}},
     "service/s exists and is no sglstack stack (no io.sglstack/stack annotation)'s, not stack 'tiny''s: it is "
     "not this stack's to replace or delete (nothing was changed)"),
    ("service", {"name": "s", "annotations": {"io.sglstack/stack": "tiny"}}, None),
    ("service", {"name": "s", "annotations": {"io.sglstack/stack": "x"}, "labels": {k8s_flow.MANAGED_BY: "sglstack"}},
     "service/s exists and is stack 'x''s, not stack 'tiny''s: it is not this stack's to replace or delete "
     "(nothing was changed)"),
])
def test_whose_object_it_is(kind, meta, problem):
    assert k8s.ANNOTATION_PREFIX == "io.sglstack/"
    assert owner_problem("tiny", kind, {"metadata": meta}) == problem
    assert owner_problem("tiny", kind, None) is None


def test_rollback_applies_the_digest_before_the_current_one(cluster):
    dep, said, _clock, state = cluster
    with pytest.raises(DeployError) as none:
        rollback_k8s(dep, say=said.append)
    assert str(none.value) == (f"stack 'tiny': no earlier healthy k8s deployment (k8s:kind-sglstack/-/{NAME}) to "
                               "roll back to in build/tiny/deployments.jsonl")
    deploy_k8s(dep, A, k8s.K8sOptions(gpus=False, nnodes=3), smoke_report="e" * 64, say=lambda _m: None)
    deploy_k8s(dep, B, OPTIONS, say=lambda _m: None)
    said.clear()
    record = rollback_k8s(dep, say=said.append)
    assert said[0] == f"rolling back stack 'tiny' to {A} (deployed {read_records(dep.build_root, 'tiny')[0].time})"
    assert said[1:] == [
        "k8s: kubectl v1.32.4-double (context kind-sglstack)",
        f"rendered build/tiny/k8s/ ({k8s.LWS_FILE}, service.yaml)",
        f"applying leaderworkerset/{NAME} (size 3, replicas 1): {A}",
        f"stack 'tiny' is ready on kind-sglstack (sha256:{'a' * 64}); recorded in build/tiny/deployments.jsonl",
    ]
    assert (record.action, record.image, record.smoke_report, record.options) == (
        "rollback", A, "e" * 64, k8s.K8sOptions(gpus=False, nnodes=3).to_record())
    assert applied_image(state) == A


def test_records_of_another_context_or_namespace_are_not_this_deployments(cluster):
    dep, _said, _clock, _state = cluster
    there = K8sDeployment(stack=dep.stack, build_root=dep.build_root,
                          kubectl=Kubectl(dep.kubectl.binary, "kind-sglstack", "team-a"))
    assert there.project == f"k8s:kind-sglstack/team-a/{NAME}"
    base: dict[str, Any] = dict(stack="tiny", result="healthy", digest="", image_id="", time="t", host="h",
                                docker_host="", compose_tool="", compose_file="")
    for project, target in ((dep.project, "k8s"), (there.project, "k8s"), (dep.project, "compose")):
        append_record(dep.build_root, DeploymentRecord(action="deploy", image=project + target, project=project,
                                                       target=target, **base))
    assert [r.image for r in dep.records()] == [dep.project + "k8s"]
    assert [r.image for r in there.records()] == [there.project + "k8s"]


@pytest.mark.parametrize(("actions", "serving"), [
    ([], None),
    ([("deploy", "healthy")], 0),
    ([("deploy", "healthy"), ("deploy", "failed")], None),
    ([("deploy", "healthy"), ("undeploy", "healthy")], None),
    ([("deploy", "healthy"), ("status", "healthy")], 0),
    ([("deploy", "failed"), ("restore", "healthy")], 1),
    ([("rollback", "healthy")], 0),
])
def test_what_serves_now_is_the_last_served_record_when_healthy(actions, serving):
    records = [DeploymentRecord(stack="tiny", action=a, result=r, image=str(i), digest="", image_id="", time="t",
                                host="", docker_host="", project="p", compose_tool="", compose_file="")
               for i, (a, r) in enumerate(actions)]
    now = k8s_flow._serving_now(records)
    assert (None if now is None else int(now.image)) == serving


def test_a_rollback_waits_as_long_as_it_is_told(cluster, monkeypatch):
    dep, said, _clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    deploy_k8s(dep, B, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)
    with pytest.raises(DeployFailed) as failed:
        rollback_k8s(dep, wait_timeout_s=7, say=said.append)
    assert str(failed.value).startswith(f"stack 'tiny' (leaderworkerset/{NAME}): not ready within 7s: ")


def test_a_signal_during_the_rollback_says_what_is_left(cluster, monkeypatch):
    dep, said, clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", f"{'a' * 64},{'b' * 64}")

    def sleep(seconds):
        if clock.sleeps:  # the first wait ran out; this is the rollback's
            raise Interrupted(signal.SIGTERM)
        clock.sleep(seconds)

    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=sleep))
    with pytest.raises(Interrupted):
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=5, say=said.append)
    assert said[-1] == ("stack 'tiny': not ready within 5s: 0/1 groups ready (leader /health); the rollback did "
                        "not finish")
    assert rows(dep)[1:] == [("deploy", "failed", B, "not ready within 5s: 0/1 groups ready (leader /health)")]


def test_each_record_carries_the_time_it_was_written(cluster, monkeypatch):
    dep, said, _clock, _state = cluster
    stamps = iter(f"2026-12-05T00:00:0{i}Z" for i in range(10))
    monkeypatch.setattr(k8s_flow, "utc_timestamp", lambda: next(stamps))
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)
    with pytest.raises(DeployFailed):
        deploy_k8s(dep, A, OPTIONS, wait_timeout_s=1, say=said.append)
    # 0: the attempt is made; 1: its failure is recorded
    assert [r.time for r in read_records(dep.build_root, "tiny")] == ["2026-12-05T00:00:01Z"]


@pytest.mark.parametrize(("forbid", "outcome"), [
    ("", "no earlier deployment to roll back to: deleted what was applied"),
    ("1", "no earlier deployment to roll back to, and deleting what was applied: kubectl delete --ignore-not-found "
          "failed: Error from server (Forbidden)"),
])
def test_an_undo_whose_record_cannot_be_written_says_so(cluster, monkeypatch, forbid, outcome):
    dep, said, _clock, _state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)
    monkeypatch.setenv("KUBECTL_DOUBLE_FORBID_DELETE", forbid)
    monkeypatch.setattr(k8s_flow, "record_or_why", lambda _root, _record: "the disk is full")
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, A, OPTIONS, wait_timeout_s=1, say=said.append)
    assert str(failed.value).endswith("; not recorded (the disk is full)")
    assert outcome in str(failed.value)


def test_a_rollback_whose_apply_is_refused_says_why_in_one_line(cluster, monkeypatch):
    dep, said, _clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)
    applies: list[str] = []

    class RefusesTheSecondApply(Kubectl):
        def apply(self, folder, what):
            applies.append(what)
            if len(applies) == 2:
                raise DeployError(f"{what}: kubectl apply --server-side failed: " + "x" * 400 + "\nsecond line")
            return super().apply(folder, what)

    dep = K8sDeployment(stack=dep.stack, build_root=dep.build_root,
                        kubectl=RefusesTheSecondApply(dep.kubectl.binary, dep.kubectl.context))
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=1, say=said.append)
    detail = ("stack 'tiny': kubectl apply --server-side failed: " + "x" * 400)[:300]
    assert str(failed.value).endswith(f"; rolling back to sha256:{'a' * 64} failed too: {detail}")
    assert rows(dep)[-1] == ("restore", "failed", A, f"after the failed deploy of {B}: {detail}")


@pytest.mark.parametrize(("unready", "outcome"), [
    ("b" * 64, f"rolled back to sha256:{'a' * 64} (ready); not recorded (the disk is full)"),
    (f"{'a' * 64},{'b' * 64}", f"rolling back to sha256:{'a' * 64} failed too: not ready within "),
])
def test_a_rollback_whose_records_cannot_be_written_says_so(cluster, monkeypatch, one_poll_per_wait, unready,
                                                          outcome):
    dep, said, _clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", unready)
    monkeypatch.setattr(k8s_flow, "record_or_why", lambda _root, _record: "the disk is full")
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=1, say=said.append)
    assert outcome in str(failed.value)
    assert str(failed.value).endswith("; not recorded (the disk is full)")


def test_a_refused_delete_s_reason_is_cut_at_300_characters(cluster, monkeypatch):
    dep, said, _clock, _state = cluster
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "a" * 64)

    def refused(_folder):
        raise DeployError("d" * 400 + "\nsecond line")

    monkeypatch.setattr(Kubectl, "delete", lambda self, folder: refused(folder))
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, A, OPTIONS, wait_timeout_s=1, say=said.append)
    assert str(failed.value).endswith("; no earlier deployment to roll back to, and " + "d" * 300)


def test_each_record_of_a_rolled_back_deploy_has_the_time_it_was_written(cluster, monkeypatch):
    dep, said, _clock, _state = cluster
    stamps = iter(f"2026-12-05T00:00:0{n}Z" for n in range(10))
    monkeypatch.setattr(k8s_flow, "utc_timestamp", lambda: next(stamps))
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)
    with pytest.raises(DeployFailed):
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=1, say=said.append)
    assert [(r.action, r.result, r.time) for r in read_records(dep.build_root, "tiny")] == [
        ("deploy", "healthy", "2026-12-05T00:00:01Z"), ("deploy", "failed", "2026-12-05T00:00:03Z"),
        ("restore", "healthy", "2026-12-05T00:00:04Z")]


def test_the_k8s_wait_limit_is_the_startup_probe_budget_plus_pulls_and_scheduling(tmp_path):
    spec = k8s.k8s_spec(make_test_stack(tmp_path / "m"), OPTIONS)
    h = spec.healthcheck
    assert (h.start_period_s, h.interval_s, h.retries) == (120, 30, 3)
    # 120 s start period + (3 retries + the first probe) x 30 s + 300 s for image pulls and scheduling
    assert k8s_flow.wait_limit(spec, None) == 540
    assert k8s_flow.wait_limit(spec, 7) == 7


def test_what_is_applied_is_rendered_with_the_deploy_s_options_and_smoke_report(cluster):
    dep, _said, _clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, smoke_report="f" * 64, say=lambda _m: None)
    obj = json.loads((state / "objects" / f"LeaderWorkerSet.default.{NAME}.json").read_text())
    assert obj["spec"]["leaderWorkerTemplate"]["size"] == 2  # OPTIONS' nnodes, not the default's 1
    assert obj["metadata"]["annotations"][k8s.ANNOTATION_PREFIX + "smoke-report"] == "f" * 64


def test_the_kernel_caches_found_are_rendered_into_what_is_applied(cluster):
    dep, said, _clock, state = cluster
    found = CacheCandidates("http://127.0.0.1:5000/v2/sglstack/sglang/blobs/",
                            ({"artifact": "sha256:" + "c" * 64, "layer": "sha256:" + "d" * 64, "size": 6},))
    deploy_k8s(dep, A, k8s.K8sOptions(gpus=False, nnodes=2, kernel_cache=True), say=said.append, caches=found)
    lws = json.loads((state / "objects" / f"LeaderWorkerSet.default.{NAME}.json").read_text())
    init = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["initContainers"][0]
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env["SGLSTACK_KC_BLOBS"] == found.blobs_url
    assert json.loads(env["SGLSTACK_KC_CANDIDATES"]) == list(found.candidates)


def _stamps(monkeypatch):
    stamps = iter(f"2026-12-05T03:00:{n:02d}Z" for n in range(1, 60))
    monkeypatch.setattr(k8s_flow, "utc_timestamp", lambda: next(stamps))


def test_no_smoke_report_is_recorded_as_unknown(cluster):
    dep, said, _clock, _state = cluster
    record = deploy_k8s(dep, A, OPTIONS, say=said.append)
    assert record.smoke_report == "unknown"


def test_an_apply_with_no_answer_changes_nothing_and_is_recorded(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    _stamps(monkeypatch)
    inner = _ADAPTER_PROCESSES.run

    def run(argv, **kwargs):
        if "apply" in argv:
            raise TimeoutExpired(argv, kubectl_adapter.TIMEOUT_S)
        return inner(argv, **kwargs)

    monkeypatch.setattr(_ADAPTER_PROCESSES, "run", run)
    with pytest.raises(DeployError) as refused:
        deploy_k8s(dep, B, OPTIONS, say=said.append)
    assert not isinstance(refused.value, DeployFailed)
    assert str(refused.value).endswith(f"no answer within {kubectl_adapter.TIMEOUT_S}s")
    assert rows(dep)[-1] == ("deploy", "failed", B, str(refused.value))
    assert read_records(dep.build_root, "tiny")[-1].time == "2026-12-05T03:00:02Z"  # when it failed
    assert applied_image(state) == A


def test_an_error_while_waiting_after_the_apply_rolls_back(cluster, monkeypatch):
    dep, said, _clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)
    inner = _ADAPTER_PROCESSES.run
    seen = {"apply": False, "failed": False}

    def run(argv, **kwargs):
        if "apply" in argv:
            seen["apply"] = True
        elif seen["apply"] and not seen["failed"] and "get" in argv and "leaderworkerset" in argv:
            seen["failed"] = True
            return CompletedProcess(argv, 1, "", "Unable to connect to the server: EOF\n")
        return inner(argv, **kwargs)

    monkeypatch.setattr(_ADAPTER_PROCESSES, "run", run)
    with pytest.raises(DeployFailed) as failed:
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=30, say=said.append)
    assert str(failed.value) == (f"kubectl get leaderworkerset {NAME} failed: Unable to connect to the server: EOF; "
                                 f"rolled back to sha256:{'a' * 64} (ready)")
    assert failed.value.log_tail == ""
    assert applied_image(state) == A


def test_a_plain_interrupt_while_waiting_rolls_back_and_says_interrupted(cluster, monkeypatch):
    dep, said, clock, state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)

    def interrupted(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=interrupted))
    with pytest.raises(KeyboardInterrupt):
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=60, say=said.append)
    assert said[-1] == f"stack 'tiny': interrupted; rolled back to sha256:{'a' * 64} (ready)"
    assert applied_image(state) == A
    assert rows(dep)[1][3] == "interrupted"


def test_a_rollback_cut_short_after_a_signal_says_it_did_not_finish(cluster, monkeypatch):
    dep, said, clock, _state = cluster
    deploy_k8s(dep, A, OPTIONS, say=lambda _m: None)
    monkeypatch.setenv("KUBECTL_DOUBLE_UNREADY", "b" * 64)

    def interrupted(_seconds):
        raise Interrupted(signal.SIGTERM)

    def cluster_lost(*_a, **_k):
        raise DeployError("the cluster went away")

    monkeypatch.setattr(k8s_flow, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=interrupted))
    monkeypatch.setattr(k8s_flow, "_recover", cluster_lost)
    with pytest.raises(DeployError):
        deploy_k8s(dep, B, OPTIONS, wait_timeout_s=60, say=said.append)
    assert said[-1] == "stack 'tiny': interrupted (SIGTERM); the rollback did not finish"
