"""The Kubernetes manifests: a LeaderWorkerSet and a Service rendered from the same serving spec as compose
and smoke, for every stack of stacks.yaml, checked against kubernetes-validate's schemas and our LWS model."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from sglstack.config.matrix import load_matrix
from sglstack.imagebuild.context import render_stack_folder
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
    render_stack_folder(str(REPO / "stacks.yaml"), STACKS.get(name), out_dir=str(out), image=REF,
                   k8s_options=k8s.K8sOptions(nnodes=2))
    lws_path, svc_path = out / "k8s" / k8s.LWS_FILE, out / "k8s" / k8s.SERVICE_FILE
    assert yaml.safe_load(lws_path.read_text())["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert svc_path.is_file()
    render_stack_folder(str(REPO / "stacks.yaml"), STACKS.get(name), out_dir=str(out))  # the moving tag
    assert not lws_path.exists() and not svc_path.exists()
    assert "not written: the manifests serve an image by digest" in capsys.readouterr().out


def test_invoke_render_with_a_bad_k8s_option_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ServingError, match="--rdma"):
        render_stack_folder(str(REPO / "stacks.yaml"), STACKS.get(STACK_NAMES[0]), out_dir=str(out),
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


# ---- every field and every refusal, exactly ---------------------------------------------------------

LABELS = {"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": "sglstack-cu129",
          "app.kubernetes.io/managed-by": "sglstack", "io.sglstack/stack": "cu129"}
FULL = {"nnodes": 2, "replicas": 3, "namespace": "ml", "rdma": "rdma/ib", "host_network": True,
        "hf_cache": "/data/hf", "start_period_s": 95}


def test_the_objects_with_every_option_field_by_field() -> None:
    objs = k8s.manifests(STACKS.get("cu129"), REF, k8s.K8sOptions(**FULL), smoke_report="r.json")
    lws_obj, svc = objs[k8s.LWS_FILE], objs[k8s.SERVICE_FILE]
    assert list(objs) == [k8s.LWS_FILE, k8s.SERVICE_FILE]
    assert {k: v for k, v in lws_obj.items() if k != "spec"} == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "sglstack-cu129", "namespace": "ml", "labels": LABELS, "annotations": {
            "io.sglstack/stack": "cu129", "io.sglstack/image": REF, "io.sglstack/model": "moonshotai/Kimi-K2.5",
            "io.sglstack/speculative": "EAGLE3 draft=AQ-MedAI/Kimi-K25-eagle3 steps=3 topk=1 draft_tokens=4",
            "io.sglstack/smoke-report": "r.json"}}}
    spec = lws_obj["spec"]
    assert {k: v for k, v in spec.items() if k != "leaderWorkerTemplate"} == {
        "replicas": 3, "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}}}
    tpl = spec["leaderWorkerTemplate"]
    assert (tpl["size"], tpl["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    get = {"httpGet": {"path": "/health", "port": 30000}, "timeoutSeconds": 10}
    token = {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN", "optional": True}}
    for role, leader in (("leaderTemplate", True), ("workerTemplate", False)):
        assert tpl[role]["metadata"] == {"labels": {"app.kubernetes.io/name": "sglang",
                                                    "io.sglstack/role": "leader" if leader else "worker"}}
        pod = tpl[role]["spec"]
        (c,) = pod["containers"]
        assert {k: v for k, v in pod.items() if k != "containers"} == {
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
                        {"name": "mount-0", "hostPath": {"path": "/data/hf", "type": "DirectoryOrCreate"}}],
            "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}}
        expected = {
            "name": "sglang", "image": REF, "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "HF_TOKEN", "valueFrom": token}, {"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": token}],
            "resources": {"limits": {"nvidia.com/gpu": 8, "rdma/ib": 1}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                             {"name": "mount-0", "mountPath": "/root/.cache/huggingface"}],
            "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        }
        if leader:
            expected |= {
                "ports": [{"name": "http", "containerPort": 30000, "protocol": "TCP"}],
                "startupProbe": {**get, "periodSeconds": 10, "failureThreshold": 10},  # 95 s: ten tries of 10 s
                "readinessProbe": {**get, "periodSeconds": 10, "failureThreshold": 3},
                "livenessProbe": {**get, "periodSeconds": 30, "failureThreshold": 3},
            }
        assert {k: v for k, v in c.items() if k != "command"} == expected
        assert c["command"][c["command"].index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    assert svc == {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "sglstack-cu129-api", "namespace": "ml", "labels": LABELS,
                     "annotations": {"io.sglstack/stack": "cu129"}},
        "spec": {"type": "ClusterIP",
                 "selector": {"leaderworkerset.sigs.k8s.io/name": "sglstack-cu129",
                              "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                 "ports": [{"name": "http", "port": 30000, "targetPort": 30000, "protocol": "TCP"}]}}
    k8s.validate_manifests(objs)


def test_the_defaults_add_no_namespace_no_resources_without_gpus_and_an_unknown_smoke_report() -> None:
    stack = STACKS.get("cu129")
    serving = stack.serving.model_copy(update={
        "mounts": ("/models:/models:ro", "cache:/cache"), "env": {"A": "x", "B": "${MY_KEY}", "HF_TOKEN": "${T}"}})
    objs = k8s.manifests(stack.model_copy(update={"serving": serving}), REF,
                         k8s.K8sOptions(gpus=0, hf_token_secret="team.secrets"))
    meta = objs[k8s.LWS_FILE]["metadata"]
    assert "namespace" not in meta and "namespace" not in objs[k8s.SERVICE_FILE]["metadata"]
    assert meta["annotations"]["io.sglstack/smoke-report"] == "unknown"
    pod = objs[k8s.LWS_FILE]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert set(pod) == {"containers", "volumes", "affinity"}  # the affinity: the stack's platforms, always
    (c,) = pod["containers"]
    assert c["resources"] == {} and "securityContext" not in c and "ports" not in c
    assert pod["volumes"][1:] == [{"name": "mount-0", "hostPath": {"path": "/models", "type": "DirectoryOrCreate"}},
                                  {"name": "mount-1", "emptyDir": {}}]
    assert c["volumeMounts"][1:] == [{"name": "mount-0", "mountPath": "/models", "readOnly": True},
                                     {"name": "mount-1", "mountPath": "/cache"}]
    secret = {"name": "team.secrets"}
    assert sorted(c["env"], key=lambda e: e["name"]) == [
        {"name": "A", "value": "x"},
        {"name": "B", "valueFrom": {"secretKeyRef": {**secret, "key": "MY_KEY"}}},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {**secret, "key": "T"}}},
        {"name": "HUGGING_FACE_HUB_TOKEN",
         "valueFrom": {"secretKeyRef": {**secret, "key": "HF_TOKEN", "optional": True}}},
    ]


@pytest.mark.parametrize(("options", "message"), [
    ({"nnodes": 0}, "--nnodes 0: must be a whole number from 1 to 2147483647"),
    ({"nnodes": 2**31}, "--nnodes 2147483648: must be a whole number from 1 to 2147483647"),
    ({"nnodes": True}, "--nnodes True: must be a whole number from 1 to 2147483647"),
    ({"nnodes": 1.0}, "--nnodes 1.0: must be a whole number from 1 to 2147483647"),
    ({"replicas": 0}, "--replicas 0: must be a whole number from 1 to 2147483647"),
    ({"dist_init_port": 0}, "--dist-init-port 0: must be a whole number from 1 to 65535"),
    ({"dist_init_port": 65536}, "--dist-init-port 65536: must be a whole number from 1 to 65535"),
    ({"dist_init_port": 30000}, "--dist-init-port 30000: the serving port; torch.distributed needs another"),
    ({"namespace": "Ml"}, "--namespace 'Ml': not a namespace name (a DNS label: at most 63 lowercase letters, "
                          "digits and '-', starting and ending with a letter or digit)"),
    ({"namespace": "a" * 64}, f"--namespace '{'a' * 64}': not a namespace name (a DNS label: at most 63 lowercase "
                              "letters, digits and '-', starting and ending with a letter or digit)"),
    ({"hf_cache": "data/hf"}, "--hf-cache 'data/hf': on Kubernetes, an absolute folder on every node (hostPath), "
                              "on one line"),
    ({"hf_cache": "/data\n/hf"}, "--hf-cache '/data\\n/hf': on Kubernetes, an absolute folder on every node "
                                 "(hostPath), on one line"),
    ({"rdma": "rdma/ib=x"}, "--rdma 'rdma/ib=x': not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ({"rdma": "rdma/ib=2147483648"}, "--rdma 'rdma/ib=2147483648': the count must be from 1 to 2147483647"),
    ({"rdma": "rdma/ib", "gpus": 0}, "--rdma: needs GPUs (it was given with --gpus 0)"),
    ({"hf_token_secret": "Bad_Name"}, "--hf-token-secret 'Bad_Name': not a Secret name (a DNS subdomain: lowercase "
                                      "letters, digits, '-' and '.')"),
    ({"hf_token_secret": "a" * 254}, f"--hf-token-secret '{'a' * 254}': not a Secret name (a DNS subdomain: "
                                     "lowercase letters, digits, '-' and '.')"),
])
def test_each_bad_option_is_its_own_line(options: dict, message: str) -> None:
    with pytest.raises(ServingError) as err:
        k8s.k8s_spec(STACKS.get("cu129"), k8s.K8sOptions(**options))
    assert str(err.value) == f"stack 'cu129': {message}"


def test_the_largest_values_each_field_holds_are_taken() -> None:
    stack = STACKS.get("cu129")
    k8s.k8s_spec(stack, k8s.K8sOptions(nnodes=2**31 - 1, replicas=2**31 - 1, dist_init_port=65535,
                                       namespace="a" * 63, hf_token_secret="a" * 253, rdma="rdma/ib=2147483647"))
    k8s.k8s_spec(stack, k8s.K8sOptions(dist_init_port=1, rdma="rdma/ib=1"))


@pytest.mark.parametrize(("rdma", "problem"), [
    ("rdma/ib", None), ("rdma/ib=3", None), ("ib", None), ("example.com/hca_shared_devices_a", None),
    ("a" * 63, None), ("a" * 253 + "/b", None),
    ("a" * 64, "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ("a" * 254 + "/b", "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ("rdma/ib=", "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ("rdma/ib=-1", "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ("Rdma/ib", "not RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1)"),
    ("rdma/ib=0", "the count must be from 1 to 2147483647"),
])
def test_rdma_problem(rdma: str, problem: str | None) -> None:
    assert k8s.rdma_problem(rdma) == problem


def test_rdma_resource_and_its_count() -> None:
    assert k8s.K8sOptions().rdma_resource() is None
    assert k8s.K8sOptions(rdma="rdma/ib").rdma_resource() == ("rdma/ib", 1)
    assert k8s.K8sOptions(rdma="rdma/ib=4").rdma_resource() == ("rdma/ib", 4)


@pytest.mark.parametrize(("docker", "quantity"), [
    ("32g", "32Gi"), ("1024", "1024"), ("512m", "512Mi"), ("1kb", "1Ki"), ("2T", "2Ti"), ("10b", "10"),
    (" 8 gb ", "8Gi"),
])
def test_shm_quantity(docker: str, quantity: str) -> None:
    assert k8s.shm_quantity(docker) == quantity


def test_a_bad_shm_size_is_one_line() -> None:
    with pytest.raises(ServingError) as err:
        k8s.shm_quantity("32q")
    assert str(err.value) == "serving.shm_size '32q': not a size such as 32g"


def test_the_startup_probe_covers_the_start_period_in_ten_second_tries() -> None:
    stack = STACKS.get("cu129")
    for start, tries in ((95, 10), (100, 10), (1, 1), (3600, 360)):
        obj = k8s.manifests(stack, REF, k8s.K8sOptions(start_period_s=start))[k8s.LWS_FILE]
        (c,) = _containers(obj, "leaderTemplate")
        assert (c["startupProbe"]["periodSeconds"], c["startupProbe"]["failureThreshold"]) == (10, tries)


def test_the_yaml_is_plain_block_style_in_the_objects_order_without_anchors() -> None:
    files = k8s.render_k8s(STACKS.get("cu129"), REF, k8s.K8sOptions(nnodes=2))
    lws_text = files[k8s.LWS_FILE]
    assert lws_text.startswith("apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata:\n")
    assert "&" not in lws_text and "*id" not in lws_text and "- {" not in lws_text
    # 120 characters a line: the speculative summary stays on its line
    speculative = "EAGLE3 draft=AQ-MedAI/Kimi-K25-eagle3 steps=3 topk=1 draft_tokens=4"
    assert f"    io.sglstack/speculative: {speculative}\n" in lws_text
    assert files[k8s.SERVICE_FILE].startswith("apiVersion: v1\nkind: Service\n")
    assert k8s.dump({"b": 1, "a": [1]}) == "b: 1\na:\n- 1\n"
    with_report = k8s.render_k8s(STACKS.get("cu129"), REF, smoke_report="build/cu129/smoke.json")
    assert "    io.sglstack/smoke-report: build/cu129/smoke.json\n" in with_report[k8s.LWS_FILE]


def test_validation_errors_name_the_file_and_the_field() -> None:
    objs = k8s.manifests(STACKS.get("cu129"), REF, k8s.K8sOptions())
    bad = copy.deepcopy(objs)
    bad[k8s.LWS_FILE]["spec"]["replicas"] = -1
    with pytest.raises(ServingError) as err:
        k8s.validate_manifests(bad)
    assert str(err.value) == "leaderworkerset.yaml: spec.replicas: must be >= 0"
    svc = copy.deepcopy(objs)
    svc[k8s.SERVICE_FILE]["spec"]["ports"][0]["port"] = "http"
    with pytest.raises(ServingError) as err:
        k8s.validate_manifests(svc)
    assert str(err.value).startswith("service.yaml: spec.ports.0.port: ")
    top = copy.deepcopy(objs)
    top[k8s.SERVICE_FILE]["surprise"] = 1
    with pytest.raises(ServingError) as err:
        k8s.validate_manifests(top)
    assert str(err.value).startswith("service.yaml: (top): ")
    worker_only = copy.deepcopy(objs)
    del worker_only[k8s.LWS_FILE]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    k8s.validate_manifests(worker_only)
    _containers(worker_only[k8s.LWS_FILE], "workerTemplate")[0]["shmSize"] = "32g"
    with pytest.raises(ServingError) as err:
        k8s.validate_manifests(worker_only)
    assert str(err.value) == ("leaderworkerset.yaml (workerTemplate): template.spec.containers.0: Additional "
                              "properties are not allowed ('shmSize' was unexpected)")


def test_a_tag_and_a_bad_leader_template_are_refused_word_for_word() -> None:
    with pytest.raises(ServingError) as err:
        k8s.manifests(STACKS.get("cu129"), "r.io/a:v1", k8s.K8sOptions())
    assert str(err.value) == ("stack 'cu129': k8s manifests serve an image by digest (REPO@sha256:...), not "
                              "'r.io/a:v1': a tag can move under a running group")
    objs = k8s.manifests(STACKS.get("cu129"), REF, k8s.K8sOptions())
    _containers(objs[k8s.LWS_FILE], "leaderTemplate")[0]["shmSize"] = "32g"
    with pytest.raises(ServingError) as err:
        k8s.validate_manifests(objs)
    assert str(err.value).startswith("leaderworkerset.yaml (leaderTemplate): template.spec.containers.0: ")


def test_the_pods_land_only_on_nodes_of_the_stacks_platforms() -> None:
    """A cluster of x86 and Grace nodes: pods of an x86 stack on x86 nodes only, of a two-platform stack on
    either (the deploy checks the image serves every platform its pods may land on)."""
    for name, archs in (("cu129", ["amd64"]), ("pypi-cu130-gb", ["amd64", "arm64"])):
        lws_obj = k8s.manifests(STACKS.get(name), REF, k8s.K8sOptions())[k8s.LWS_FILE]
        for role in ("leaderTemplate", "workerTemplate"):
            terms = lws_obj["spec"]["leaderWorkerTemplate"][role]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert terms == [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": archs}]}]
