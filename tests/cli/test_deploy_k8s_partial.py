"""k8s deploy: a partial apply is a change and is undone; a refused `kubectl delete` is said, never 'done'.

Through the production code and the recording kubectl stand-in (tests/doubles/kubectl): the API server
refuses to create the Service (a used-up ResourceQuota) after the LeaderWorkerSet was applied, as kubectl
goes on past a refused object; and RBAC refuses the delete of what a failed first deploy applied.
"""

from __future__ import annotations

from pathlib import Path

from k8s_deploy_fixtures import NAME, REPOSITORY, A, B, applied_image, calls, deploy, records

OBJECTS = "objects"


def _lws_file(env: dict[str, str]) -> Path:
    return Path(env["KUBECTL_DOUBLE_STATE"]) / OBJECTS / f"LeaderWorkerSet.default.{NAME}.json"


def test_a_first_deploy_whose_service_is_refused_deletes_the_applied_leaderworkerset(cluster, tmp_path):
    proc = deploy(cluster, tmp_path, B, "--wait-timeout", "5", KUBECTL_DOUBLE_QUOTA="Service")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "after applying leaderworkerset.leaderworkerset.x-k8s.io/" in errors[0] and "exceeded quota" in errors[0]
    assert errors[0].endswith("; no earlier deployment to roll back to: deleted what was applied")
    assert not _lws_file(cluster).exists()  # before: left serving the new digest, with no Service
    assert any(c[2:4] == ["delete", "--ignore-not-found"] for c in calls(cluster))
    assert [(r["action"], r["result"], r["digest"]) for r in records(cluster)] == [("deploy", "failed", B)]


def test_a_partial_apply_over_a_healthy_deployment_rolls_back_to_it(cluster, tmp_path):
    assert deploy(cluster, tmp_path, A).returncode == 0
    service = next((Path(cluster["KUBECTL_DOUBLE_STATE"]) / OBJECTS).glob("Service.*"))
    service.unlink()  # removed by hand; the quota now refuses to create it again
    proc = deploy(cluster, tmp_path, B, "--wait-timeout", "5", KUBECTL_DOUBLE_QUOTA="Service")
    assert proc.returncode != 0
    assert applied_image(cluster) == f"{REPOSITORY}@{A}"  # before: B, never waited for, never recorded
    rows = [(r["action"], r["digest"]) for r in records(cluster)]
    assert rows[:2] == [("deploy", A), ("deploy", B)] and rows[2] == ("restore", A)


def test_a_refused_delete_is_reported_as_failed(cluster, tmp_path):
    proc = deploy(cluster, tmp_path, B, "--wait-timeout", "1", KUBECTL_DOUBLE_UNREADY=B,
                  KUBECTL_DOUBLE_FORBID_DELETE="1")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "deleted what was applied" not in proc.stderr, proc.stderr
    assert "deleting what was applied: kubectl delete --ignore-not-found failed: Error from server (Forbidden)" \
        in errors[0]
    assert _lws_file(cluster).exists()
