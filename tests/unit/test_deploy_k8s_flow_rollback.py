"""`rollback_k8s`, the records of a k8s deployment and what is applied, in process against the recording kubectl
stand-in on PATH: every line said, every record written, every kubectl call. The wait's clock is the test's, so no
test waits or depends on speed."""

from __future__ import annotations

import json
import signal
from subprocess import CompletedProcess, TimeoutExpired
from types import SimpleNamespace
from typing import Any

import pytest
from deploy_fixtures import make_test_stack
from k8s_flow_cluster import (
    _ADAPTER_PROCESSES,
    NAME,
    OPTIONS,
    A,
    B,
    applied_image,
    make_cluster,
    one_poll_per_wait_set,
    rows,
)

from sglstack.adapters import kubectl as kubectl_adapter
from sglstack.adapters.kubectl import Kubectl
from sglstack.core.errors import DeployError
from sglstack.core.signals import Interrupted
from sglstack.deploy import k8s_flow
from sglstack.deploy.deployment import DeployFailed
from sglstack.deploy.k8s_flow import K8sDeployment, deploy_k8s, rollback_k8s
from sglstack.deploy.store import DeploymentRecord, append_record, read_records
from sglstack.render import k8s
from sglstack.render.k8s_cache import CacheCandidates


@pytest.fixture
def cluster(tmp_path, monkeypatch, request):
    return make_cluster(tmp_path, monkeypatch, request)


@pytest.fixture
def one_poll_per_wait(monkeypatch):
    one_poll_per_wait_set(monkeypatch)


@pytest.fixture
def kubectl_as_a_child():
    """Asked for by a test that runs the stand-in as a real child process, as the adapter does in use."""


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
