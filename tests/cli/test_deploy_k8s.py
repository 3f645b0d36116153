"""`invoke deploy --on k8s` and `invoke rollback --on k8s` through the production code, with a
recording kubectl stand-in on PATH (no cluster here): the exact argv, the records, the rollback by digest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from clirun import run_invoke, start_invoke
from k8s_deploy_fixtures import NAME, REPOSITORY, STACK, A, B, applied_image, calls, deploy, records

from sglstack.render import k8s


def test_deploy_applies_server_side_waits_and_records(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = deploy(cluster, tmp_path, A, "--namespace", "llm", "--wait-timeout", "30")
    assert proc.returncode == 0, proc.stderr
    manifests = Path(cluster["SGLSTACK_BUILD_DIR"]) / STACK / "k8s"
    ctx = ["--context", "kind-sglstack", "--namespace", "llm"]
    log = calls(cluster)
    assert [*ctx, "apply", "--server-side", "--field-manager=sglstack", "--force-conflicts", "-f",
            str(manifests)] in log
    assert [*ctx, "get", "leaderworkerset", NAME, "-o", "json"] in log
    assert applied_image(cluster, "llm") == f"{REPOSITORY}@{A}"
    (row,) = records(cluster)
    assert (row["target"], row["action"], row["result"], row["digest"]) == ("k8s", "deploy", "healthy", A)
    assert row["project"] == f"k8s:kind-sglstack/llm/{NAME}" and row["options"]["nnodes"] == 2
    lws_obj = yaml.safe_load((manifests / k8s.LWS_FILE).read_text())
    assert lws_obj["metadata"]["namespace"] == "llm"
    assert lws_obj["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_a_group_that_never_gets_ready_rolls_back_to_the_previous_digest(cluster: dict[str, str],
                                                                          tmp_path: Path) -> None:
    assert deploy(cluster, tmp_path, A).returncode == 0
    proc = deploy(cluster, tmp_path, B, "--wait-timeout", "1", KUBECTL_DOUBLE_UNREADY=B)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"rolled back to {A} (ready)" in errors[0], proc.stderr
    assert "groups ready" in errors[0]
    assert applied_image(cluster) == f"{REPOSITORY}@{A}"
    manifests = Path(cluster["SGLSTACK_BUILD_DIR"]) / STACK / "k8s" / k8s.LWS_FILE
    assert f"@{A}" in manifests.read_text() and B not in manifests.read_text()
    rows = [(r["action"], r["result"], r["digest"]) for r in records(cluster)]
    assert rows == [("deploy", "healthy", A), ("deploy", "failed", B), ("restore", "healthy", A)]
    applies = [c for c in calls(cluster) if "apply" in c]
    assert len(applies) == 3  # A, B, A again


def test_a_first_deploy_that_fails_deletes_what_it_applied(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = deploy(cluster, tmp_path, B, "--wait-timeout", "1", KUBECTL_DOUBLE_UNREADY=B)
    assert proc.returncode != 0 and "deleted what was applied" in proc.stderr
    assert any(c[2:4] == ["delete", "--ignore-not-found"] for c in calls(cluster))
    assert not (Path(cluster["KUBECTL_DOUBLE_STATE"]) / "objects" / f"LeaderWorkerSet.default.{NAME}.json").exists()


def test_invoke_rollback_reapplies_the_previous_digest(cluster: dict[str, str], tmp_path: Path) -> None:
    assert deploy(cluster, tmp_path, A).returncode == 0
    assert deploy(cluster, tmp_path, B).returncode == 0
    assert applied_image(cluster) == f"{REPOSITORY}@{B}"
    proc = run_invoke("rollback", "--stack", STACK, "--on", "k8s", cwd=tmp_path, env=cluster, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert applied_image(cluster) == f"{REPOSITORY}@{A}"
    last = records(cluster)[-1]
    assert (last["action"], last["result"], last["digest"], last["options"]["nnodes"]) == ("rollback", "healthy", A, 2)


def test_no_current_context_is_one_line_before_anything(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = deploy(cluster, tmp_path, A, KUBECTL_DOUBLE_CONTEXT="")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --on k8s: no current kubectl context (error: current-context is not set); "
        "pass --context or run `kubectl config use-context`")
    assert [c for c in calls(cluster) if c[:1] != ["config"]] == []
    assert not (Path(cluster["SGLSTACK_BUILD_DIR"]) / STACK / "k8s").exists()


def test_an_unknown_context_and_no_kubectl_are_one_line(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = deploy(cluster, tmp_path, A, "--context", "prod")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith("error: --context prod: not a")
    bare = {**cluster, "PATH": str(Path(sys.executable).parent)}
    proc = deploy(bare, tmp_path, A)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: --on k8s: kubectl not found on PATH (nothing was changed)"


@pytest.mark.parametrize(("extra", "named"), [
    (("--rdma", "rdma ib"), "--rdma 'rdma ib'"),
    (("--docker-host", "ssh://x"), "--docker-host"),
])
def test_bad_k8s_options_change_nothing(cluster: dict[str, str], tmp_path: Path, extra: tuple[str, ...],
                                        named: str) -> None:
    proc = deploy(cluster, tmp_path, A, *extra)
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert named in line
    assert calls(cluster) == []


def test_an_unknown_target_is_one_line(cluster: dict[str, str], tmp_path: Path) -> None:
    proc = run_invoke("deploy", "--stack", STACK, "--on", "helm", "--digest", A, cwd=tmp_path, env=cluster)
    assert proc.returncode == 2  # bad input
    assert proc.stderr.strip() == "error: --on 'helm': not one of compose, k8s"


def test_sigterm_while_waiting_rolls_back_then_exits_143(cluster: dict[str, str], tmp_path: Path) -> None:
    import signal

    assert deploy(cluster, tmp_path, A).returncode == 0
    proc = start_invoke("deploy", "--stack", STACK, "--on", "k8s", "--digest", B, "--nnodes", "2", "--wait-timeout",
                        "120", cwd=tmp_path, env={**cluster, "KUBECTL_DOUBLE_UNREADY": B}, stdout=None)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("waiting for leaderworkerset/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, "".join(seen) + rest
    assert "interrupted (SIGTERM); rolled back to" in rest
    assert applied_image(cluster) == f"{REPOSITORY}@{A}"
    assert [r["action"] for r in records(cluster)][-2:] == ["deploy", "restore"]


def _lws(generation: int = 2, observed: int = 2, updated: int = 1, ready: int = 1, available: str = "True") -> dict:
    return {"metadata": {"generation": generation}, "spec": {"replicas": 1},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "readyReplicas": ready,
                       "conditions": [{"type": "Available", "status": available, "message": "m"}]}}


@pytest.mark.parametrize(("obj", "ready", "says"), [
    (_lws(), True, "available"),
    (None, False, "does not exist"),
    (_lws(observed=1), False, "generation 2 not yet observed"),  # the status still describes the old template
    (_lws(updated=0), False, "0/1 groups updated"),
    (_lws(ready=0), False, "0/1 groups ready"),
    (_lws(available="False"), False, "Available is not True"),
])
def test_rollout_state_reads_the_status_the_lws_controller_writes(obj: dict | None, ready: bool, says: str) -> None:
    from sglstack.deploy.k8s_flow import rollout_state

    assert rollout_state(obj)[0] is ready
    assert says in rollout_state(obj)[1]


def test_the_pods_pull_with_the_named_secret_and_a_bad_name_is_one_line(cluster: dict[str, str],
                                                                       tmp_path: Path) -> None:
    proc = deploy(cluster, tmp_path, A, "--image-pull-secret", "regcred")
    assert proc.returncode == 0, proc.stderr
    path = Path(cluster["KUBECTL_DOUBLE_STATE"]) / "objects" / f"LeaderWorkerSet.default.{NAME}.json"
    template = json.loads(path.read_text())["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert template[role]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert records(cluster)[-1]["options"]["image_pull_secret"] == "regcred"  # a rollback pulls the same way
    proc = deploy(cluster, tmp_path, B, "--image-pull-secret", "Reg_Cred")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: stack '{STACK}': --image-pull-secret 'Reg_Cred': not a Secret name (a DNS subdomain: lowercase "
        "letters, digits, '-' and '.')"]
