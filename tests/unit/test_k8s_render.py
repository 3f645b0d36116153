"""The Kubernetes manifests: a LeaderWorkerSet and a Service rendered from the same serving spec as compose
and smoke, for every stack of stacks.yaml, checked against kubernetes-validate's schemas and our LWS model."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from sglstack.build.context import render_command
from sglstack.config.matrix import load_matrix
from sglstack.render import k8s
from sglstack.render import k8s_lws as lws
from sglstack.render.compose import ComposeOptions, deploy_spec
from sglstack.serving import ServingError, serving_argv

REPO = Path(__file__).resolve().parents[2]
STACKS = load_matrix(str(REPO / "stacks.yaml"))
STACK_NAMES = sorted(STACKS.names())
REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "ab" * 32
NODE_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")


def _without_node_args(argv: list[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        if token in NODE_FLAGS:
            skip = True
            continue
        out.append(token)
    return out


def _render(name: str, **options) -> dict:
    files = k8s.render_k8s(STACKS.get(name), REF, k8s.K8sOptions(**options))
    return {file: yaml.safe_load(text) for file, text in files.items()}


def _containers(obj: dict, role: str) -> list[dict]:
    return obj["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"]


@pytest.mark.parametrize("name", STACK_NAMES)
@pytest.mark.parametrize("nnodes", [1, 2])
def test_every_stack_renders_the_compose_argv_with_lws_placement(name: str, nnodes: int) -> None:
    objs = _render(name, nnodes=nnodes)
    lws_obj, svc = objs[k8s.LWS_FILE], objs[k8s.SERVICE_FILE]
    stack = STACKS.get(name)
    compose_argv = serving_argv(deploy_spec(stack, ComposeOptions()))
    spec = deploy_spec(stack, ComposeOptions())
    assert lws_obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws_obj["kind"] == "LeaderWorkerSet"
    tpl = lws_obj["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == nnodes and tpl["restartPolicy"] == "RecreateGroupOnPodRestart"
    for role in ("leaderTemplate", "workerTemplate"):
        (c,) = _containers(lws_obj, role)
        argv = c["command"]
        assert _without_node_args(argv) == compose_argv
        i = argv.index("--nnodes")
        assert argv[i:i + 6] == ["--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
                                 "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{k8s.DIST_INIT_PORT}"]
        assert int(argv[argv.index("--port") + 1]) != k8s.DIST_INIT_PORT
        assert "@sha256:" in c["image"] and c["image"] == REF
        assert c["resources"]["limits"]["nvidia.com/gpu"] == spec.gpus
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        vols = {v["name"]: v for v in tpl[role]["spec"]["volumes"]}
        assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": k8s.shm_quantity(spec.shm_size)}
        probes = {p for p in ("startupProbe", "readinessProbe", "livenessProbe") if p in c}
        if role == "leaderTemplate":
            assert probes == {"startupProbe", "readinessProbe", "livenessProbe"}
            startup = c["startupProbe"]
            # The startup probe covers the whole model load before liveness may kill the pod.
            assert startup["periodSeconds"] * startup["failureThreshold"] >= stack.serving.startup_timeout_s
            assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": spec.port}
        else:
            assert probes == set(), "workers serve no HTTP: a probe there would restart the group forever"
        secret_env = [e for e in c["env"] if e["name"] in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
        assert secret_env and all("value" not in e and e["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
                                  for e in secret_env)
    assert svc["spec"]["selector"] == {lws.SET_NAME_LABEL: lws_obj["metadata"]["name"], lws.WORKER_INDEX_LABEL: "0"}
    assert svc["metadata"]["name"] != lws_obj["metadata"]["name"]  # LWS owns a headless Service of its own name
    assert svc["spec"]["ports"][0]["port"] == spec.port


def test_no_token_value_reaches_the_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hf_SECRETvalue0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", secret)
    files = k8s.render_k8s(STACKS.get(STACK_NAMES[0]), REF, k8s.K8sOptions(nnodes=2))
    assert all(secret not in text for text in files.values())


def test_host_network_and_rdma_switch() -> None:
    objs = _render(STACK_NAMES[0], nnodes=2, host_network=True, rdma="rdma/ib=2")
    for role in ("leaderTemplate", "workerTemplate"):
        pod = objs[k8s.LWS_FILE]["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        (c,) = pod["containers"]
        assert c["resources"]["limits"]["rdma/ib"] == 2
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    plain = _render(STACK_NAMES[0])[k8s.LWS_FILE]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert "hostNetwork" not in plain and "securityContext" not in plain["containers"][0]


def test_rendering_is_deterministic() -> None:
    stack = STACKS.get(STACK_NAMES[0])
    assert k8s.render_k8s(stack, REF) == k8s.render_k8s(stack, REF)


@pytest.mark.parametrize(("options", "named"), [
    ({"dist_init_port": 30000}, "--dist-init-port 30000"),
    ({"nnodes": 0}, "--nnodes 0"),
    ({"rdma": "rdma ib"}, "--rdma 'rdma ib'"),
    ({"rdma": "rdma/ib=0"}, "--rdma 'rdma/ib=0'"),
    ({"hf_cache": "~/.cache/huggingface"}, "--hf-cache"),
    ({"hf_token_secret": "Bad_Name"}, "--hf-token-secret"),
])
def test_bad_options_are_one_line_errors(options: dict, named: str) -> None:
    with pytest.raises(ServingError) as err:
        k8s.render_k8s(STACKS.get(STACK_NAMES[0]), REF, k8s.K8sOptions(**options))
    assert named in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"stack '{STACK_NAMES[0]}'")


def test_a_tag_is_refused() -> None:
    with pytest.raises(ServingError, match="by digest"):
        k8s.render_k8s(STACKS.get(STACK_NAMES[0]), "127.0.0.1:5000/sglstack/sglang:cu130")


def test_lws_model_rejects_a_wrong_field() -> None:
    obj = k8s.manifests(STACKS.get(STACK_NAMES[0]), REF, k8s.K8sOptions())[k8s.LWS_FILE]
    lws.LeaderWorkerSet.model_validate(obj)
    for mutate, where in (
        (lambda o: o["spec"]["leaderWorkerTemplate"].update(groupSize=2), "groupSize"),
        (lambda o: o["spec"]["leaderWorkerTemplate"].update(restartPolicy="RecreateGroupOnRestart"), "restartPolicy"),
        (lambda o: o["spec"].update(startupPolicy="LeaderStarted"), "startupPolicy"),
        (lambda o: o.update(apiVersion="leaderworkerset.x-k8s.io/v1beta1"), "apiVersion"),
    ):
        bad = copy.deepcopy(obj)
        mutate(bad)
        with pytest.raises(ValidationError) as err:
            lws.LeaderWorkerSet.model_validate(bad)
        assert where in str(err.value)
        with pytest.raises(ServingError, match=where):
            k8s.validate_manifests({k8s.LWS_FILE: bad})


def test_kubernetes_validate_checks_the_pod_templates_and_the_service() -> None:
    objs = k8s.manifests(STACKS.get(STACK_NAMES[0]), REF, k8s.K8sOptions(nnodes=2))
    k8s.validate_manifests(objs)  # offline, strict, against SCHEMA_VERSION
    bad = copy.deepcopy(objs)
    _containers(bad[k8s.LWS_FILE], "workerTemplate")[0]["shmSize"] = "32g"  # a compose key, not a pod's
    with pytest.raises(ServingError, match=r"leaderworkerset.yaml \(workerTemplate\)"):
        k8s.validate_manifests(bad)
    svc = copy.deepcopy(objs)
    svc[k8s.SERVICE_FILE]["spec"]["ports"][0]["port"] = "http"
    with pytest.raises(ServingError, match=r"service\.yaml"):
        k8s.validate_manifests(svc)


def test_invoke_render_writes_k8s_for_a_digest_and_notes_a_tag(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    name = STACK_NAMES[0]
    out = tmp_path / "out"
    render_command(str(REPO / "stacks.yaml"), name, out_dir=str(out), image=REF,
                   k8s_options=k8s.K8sOptions(nnodes=2))
    lws_path, svc_path = out / "k8s" / k8s.LWS_FILE, out / "k8s" / k8s.SERVICE_FILE
    assert yaml.safe_load(lws_path.read_text())["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert svc_path.is_file()
    render_command(str(REPO / "stacks.yaml"), name, out_dir=str(out))  # the moving tag
    assert not lws_path.exists() and not svc_path.exists()
    assert "not written: the manifests serve an image by digest" in capsys.readouterr().out


def test_invoke_render_with_a_bad_k8s_option_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ServingError, match="--rdma"):
        render_command(str(REPO / "stacks.yaml"), STACK_NAMES[0], out_dir=str(out),
                       k8s_options=k8s.K8sOptions(rdma="not a resource"))
    assert not out.exists()


def test_only_the_lws_placement_is_left_for_kubernetes_to_expand() -> None:
    stack = STACKS.get(STACK_NAMES[0])
    serving = stack.serving.model_copy(update={"extra_args": ("--chat-template", "$(HOME)/t.jinja"),
                                               "env": {"GREETING": "$(USER)"}})
    stack = stack.model_copy(update={"serving": serving})
    obj = k8s.manifests(stack, REF, k8s.K8sOptions(nnodes=2))[k8s.LWS_FILE]
    (c,) = _containers(obj, "workerTemplate")
    assert "$$(HOME)/t.jinja" in c["command"] and "$(LWS_WORKER_INDEX)" in c["command"]
    assert {"name": "GREETING", "value": "$$(USER)"} in c["env"]


def test_tp_spans_the_nodes_of_a_group() -> None:
    stack = STACKS.get(STACK_NAMES[0])
    wide = stack.model_copy(update={"serving": stack.serving.model_copy(update={"tp": 16, "gpus": 8})})
    (c,) = _containers(k8s.manifests(wide, REF, k8s.K8sOptions(nnodes=2))[k8s.LWS_FILE], "leaderTemplate")
    assert c["command"][c["command"].index("--tp-size") + 1] == "16"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    with pytest.raises(ServingError, match="needs at least 16 GPUs"):
        k8s.manifests(wide, REF, k8s.K8sOptions(nnodes=1))
