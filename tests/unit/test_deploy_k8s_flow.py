"""`deploy_k8s` in process, against the recording kubectl stand-in on PATH (as tests/cli/test_deploy_k8s.py runs it
through `invoke`): every line said, every record written, every kubectl call, on each way a rollout ends (more:
test_deploy_k8s_flow_rollback.py). The wait's clock is the test's, so no test waits or depends on speed."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import pytest
from deploy_fixtures import make_test_stack
from k8s_flow_cluster import NAME, OPTIONS, A, B, applied_image, calls, make_cluster, one_poll_per_wait_set, rows

from sglstack.core.errors import DeployError
from sglstack.core.signals import Interrupted
from sglstack.deploy import k8s_flow
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.k8s_flow import K8sDeployment, deploy_k8s, owner_problem
from sglstack.deploy.store import append_record, read_records
from sglstack.render import k8s
from sglstack.serving.phases import MILESTONES, PHASES


@pytest.fixture
def cluster(tmp_path, monkeypatch, request):
    return make_cluster(tmp_path, monkeypatch, request)


@pytest.fixture
def one_poll_per_wait(monkeypatch):
    one_poll_per_wait_set(monkeypatch)


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
