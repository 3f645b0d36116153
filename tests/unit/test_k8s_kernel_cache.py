"""`invoke deploy --on k8s --kernel-cache`: each pod gets an emptyDir for its caches and an init container (the
serving image, `python3 -c` of the in-image script) that restores, on the node, the artifact whose key matches
that node's GPU, by digest, hash-checked; any other node starts cold and says which key field differed."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from registry_double import RegistryDouble

from sglstack.config.matrix import load_matrix
from sglstack.render import k8s
from sglstack.render.k8s_cache import INIT_SCRIPT, CacheCandidates
from sglstack.serving import ServingError

REPO = Path(__file__).resolve().parents[2]
REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "b" * 64
LAYER = io.BytesIO()
BUILT_NS = 1_764_900_000_123_456_789  # the kernel's build time, which ninja-built caches need back exactly
with tarfile.open(fileobj=LAYER, mode="w:gz", format=tarfile.PAX_FORMAT) as _tar:  # as kernelcache.files packs
    _info = tarfile.TarInfo("triton/k/a.cubin")
    _info.size, _info.mtime, _info.pax_headers = 6, BUILT_NS // 10**9, {"mtime": "1764900000.123456789"}
    _tar.addfile(_info, io.BytesIO(b"kernel"))
LAYER_BYTES = LAYER.getvalue()
LAYER_DIGEST = "sha256:" + hashlib.sha256(LAYER_BYTES).hexdigest()


def candidate(**gpu):
    return {"artifact": "sha256:" + "c" * 64, "layer": LAYER_DIGEST, "size": len(LAYER_BYTES),
            "gpu_name": "none", "compute_capability": "none", "driver_major": "none", **gpu}


def test_the_pods_get_the_cache_volume_and_the_init_container():
    stack = load_matrix(str(REPO / "stacks.yaml")).get("h200-field")
    found = CacheCandidates("http://127.0.0.1:5000/v2/sglstack/sglang/blobs/", (candidate(gpu_name="NVIDIA H200"),))
    files = k8s.render_k8s(stack, REF, k8s.K8sOptions(kernel_cache=True), caches=found)  # schema-validated
    pod = yaml.safe_load(files[k8s.LWS_FILE])["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    init = pod["initContainers"][0]
    assert (init["name"], init["image"], init["command"][:2]) == ("kernel-cache-init", REF, ["python3", "-c"])
    assert init["command"][2] == INIT_SCRIPT.read_text()
    assert init["resources"] == {"limits": {"nvidia.com/gpu": 1}}  # nvidia-smi sees the server's GPU
    env = {e["name"]: e["value"] for e in init["env"]}
    assert json.loads(env["SGLSTACK_KC_CANDIDATES"]) == [candidate(gpu_name="NVIDIA H200")]
    server = pod["containers"][0]
    assert {"name": "kernel-cache", "mountPath": "/root/.cache/sglstack-kernels"} in server["volumeMounts"]
    assert {"name": "kernel-cache", "emptyDir": {}} in pod["volumes"]
    assert {"name": "TRITON_CACHE_DIR", "value": "/root/.cache/sglstack-kernels/triton"} in server["env"]
    plain = yaml.safe_load(k8s.render_k8s(stack, REF)[k8s.LWS_FILE])
    assert "initContainers" not in plain["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


@pytest.fixture
def blobs():
    """A registry's blob endpoint that answers the layer (and a 401 Bearer challenge first, as Docker Hub does); it
    holds the layer's bytes under another digest too (a store whose copy no longer hashes to its name)."""
    with RegistryDouble(auth="bearer", token="anon") as registry:
        registry.blobs[("r", LAYER_DIGEST)] = registry.blobs[("r", "sha256:" + "0" * 64)] = LAYER_BYTES
        yield f"http://{registry.host}/v2/r/blobs/"


def run_init(tmp_path: Path, blobs_url: str, candidates: list[dict]) -> str:
    env = {"PATH": str(tmp_path / "no-nvidia-smi"), "SGLSTACK_KC_DIR": str(tmp_path / "cache"),
           "SGLSTACK_KC_BLOBS": blobs_url, "SGLSTACK_KC_CANDIDATES": json.dumps(candidates)}
    out = subprocess.run([sys.executable, "-c", INIT_SCRIPT.read_text()], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.strip()


def files_in(folder: Path) -> list[str]:
    return sorted(str(Path(d, f).relative_to(folder)) for d, _, fs in os.walk(folder) for f in fs)


def test_the_init_container_restores_the_match_of_its_node(tmp_path, blobs):
    line = run_init(tmp_path, blobs, [candidate(gpu_name="NVIDIA H200"), candidate()])
    assert line == "kernel cache: restored 1 files from sha256:cccccccccccc (key matched on this node)"
    assert files_in(tmp_path / "cache") == ["triton/k/a.cubin"]
    assert (tmp_path / "cache" / "triton" / "k" / "a.cubin").stat().st_mtime_ns == BUILT_NS


def test_another_node_or_a_changed_layer_starts_cold_with_its_line(tmp_path, blobs):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "stale").write_text("x")
    assert run_init(tmp_path, blobs, [candidate(gpu_name="NVIDIA H200")]) == (
        "kernel cache: key differs in gpu_name: this node has 'none', the artifact 'NVIDIA H200'; starting cold")
    assert files_in(tmp_path / "cache") == []  # nothing stale stays
    assert run_init(tmp_path, blobs, [candidate(size=5)]) == (
        "kernel cache: the layer is larger than the 5 bytes its manifest declares; starting cold")
    assert run_init(tmp_path, blobs, [candidate(size=len(LAYER_BYTES) + 1)]) == (
        "kernel cache: the layer does not hash to its digest; starting cold")
    assert run_init(tmp_path, blobs, [{**candidate(), "layer": "sha256:" + "0" * 64}]) == (
        "kernel cache: the layer does not hash to its digest; starting cold")
    assert run_init(tmp_path, blobs, []) == (
        "kernel cache: no artifact of the image matches this deployment; starting cold")
    assert files_in(tmp_path / "cache") == []


# ---- a private registry: the pod's image pull Secret ---------------------------------------------------


def test_the_init_container_reads_the_registry_with_the_pods_pull_secret_and_no_value_is_rendered(monkeypatch):
    # The deploying machine's own credentials are in its environment: none of them may reach the manifest.
    monkeypatch.setenv("SGLSTACK_REGISTRY_USER", "deployer")
    monkeypatch.setenv("SGLSTACK_REGISTRY_PASSWORD", "pw-never-rendered")
    stack = load_matrix(str(REPO / "stacks.yaml")).get("h200-field")
    found = CacheCandidates("http://127.0.0.1:5000/v2/sglstack/sglang/blobs/", (candidate(gpu_name="NVIDIA H200"),))
    options = k8s.K8sOptions(kernel_cache=True, image_pull_secret="regcred")
    files = k8s.render_k8s(stack, REF, options, caches=found)  # schema-validated (strict)
    assert "pw-never-rendered" not in "".join(files.values()) and "deployer" not in "".join(files.values())
    for role in ("leaderTemplate", "workerTemplate"):
        pod = yaml.safe_load(files[k8s.LWS_FILE])["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert {"name": "kernel-cache-pull-secret",
                "secret": {"secretName": "regcred", "optional": True,
                           "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}} in pod["volumes"]
        init = pod["initContainers"][0]
        assert {"name": "DOCKER_CONFIG", "value": "/run/sglstack/docker-config"} in init["env"]
        assert init["volumeMounts"] == [{"name": "kernel-cache", "mountPath": "/cache"},
                                        {"name": "kernel-cache-pull-secret", "mountPath": "/run/sglstack/docker-config",
                                         "readOnly": True}]
        server = pod["containers"][0]  # the server needs no registry credentials: it is not given them
        assert all(m["name"] != "kernel-cache-pull-secret" for m in server["volumeMounts"])
        assert all(e["name"] != "DOCKER_CONFIG" for e in server["env"])
    # Without --kernel-cache the pods still pull with the Secret; nothing else of it is rendered.
    pod = yaml.safe_load(k8s.render_k8s(stack, REF, k8s.K8sOptions(image_pull_secret="regcred"))[k8s.LWS_FILE])
    spec = pod["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and "initContainers" not in spec
    assert all("secret" not in v for v in spec["volumes"])
    plain = yaml.safe_load(k8s.render_k8s(stack, REF, k8s.K8sOptions(kernel_cache=True), caches=found)[k8s.LWS_FILE])
    plain_pod = plain["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert "imagePullSecrets" not in plain_pod
    assert all(e["name"] != "DOCKER_CONFIG" for e in plain_pod["initContainers"][0]["env"])


def test_a_pull_secret_that_is_not_a_secret_name_is_one_line():
    stack = load_matrix(str(REPO / "stacks.yaml")).get("h200-field")
    with pytest.raises(ServingError) as info:
        k8s.render_k8s(stack, REF, k8s.K8sOptions(kernel_cache=True, image_pull_secret="Reg_Cred\nx"))
    assert str(info.value) == ("stack 'h200-field': --image-pull-secret 'Reg_Cred\\nx': not a Secret name (a DNS "
                               "subdomain: lowercase letters, digits, '-' and '.')")


USER, PASSWORD = "puller", "pw-" + "9" * 12


@pytest.fixture
def private():
    """A private registry's blob endpoint: Basic auth, and an authorized GET redirected to a blob store (as
    distribution on S3 does), which records what Authorization reached it."""
    with RegistryDouble(auth=(USER, PASSWORD), redirect_blobs=True) as registry:
        registry.blobs[("r", LAYER_DIGEST)] = LAYER_BYTES
        yield f"http://{registry.host}/v2/r/blobs/", registry.host, {"store": registry.store_auth}


def run_with_config(tmp_path: Path, blobs_url: str, config: dict | str | None) -> subprocess.CompletedProcess:
    folder = tmp_path / "docker-config"
    folder.mkdir(exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    env = {"PATH": str(tmp_path / "no-nvidia-smi"), "SGLSTACK_KC_DIR": str(tmp_path / "cache"),
           "SGLSTACK_KC_BLOBS": blobs_url, "SGLSTACK_KC_CANDIDATES": json.dumps([candidate()]),
           "DOCKER_CONFIG": str(folder)}
    return subprocess.run([sys.executable, "-c", INIT_SCRIPT.read_text()], env=env, capture_output=True, text=True,
                          timeout=60, check=True)


@pytest.mark.parametrize("entry", [
    {"auth": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()},
    {"username": USER, "password": PASSWORD},
], ids=["auth", "username-password"])
def test_a_private_registry_is_read_with_the_docker_configs_credentials_never_sent_to_the_blob_store(
        tmp_path, private, entry):
    url, host, seen = private
    done = run_with_config(tmp_path, url, {"auths": {f"http://{host}/v1/": {"email": "x"}, host: entry}})
    assert done.stdout.strip() == "kernel cache: restored 1 files from sha256:cccccccccccc (key matched on this node)"
    assert files_in(tmp_path / "cache") == ["triton/k/a.cubin"]
    assert seen["store"] == [None]  # the redirect to the blob store carried no credentials
    assert PASSWORD not in done.stdout + done.stderr


def test_without_or_with_wrong_or_unreadable_credentials_it_starts_cold_in_one_line(tmp_path, private):
    url, host, _ = private
    folder = tmp_path / "docker-config"
    cases = [
        (None, f"kernel cache: not restored (registry {host}: it asks for credentials (HTTP 401), and the Docker "
               f"config in {folder} has no credentials for it); starting cold"),
        ({"auths": {"other.example": {"auth": base64.b64encode(b"u:p").decode()}}},
         f"kernel cache: not restored (registry {host}: it asks for credentials (HTTP 401), and the Docker config "
         f"in {folder} has no credentials for it); starting cold"),
        ({"auths": {host: {"username": USER, "password": "wrong-" + PASSWORD}}},
         f"kernel cache: not restored (registry {host}: the blob was refused (HTTP 401) with the credentials of "
         f"the Docker config in {folder}); starting cold"),
        ({"auths": {host: {"auth": "not base64 at all"}}},
         f"kernel cache: not restored (the Docker config {folder}/config.json: the 'auths' entry of {host} is not "
         "base64 user:password); starting cold"),
        ("{not json", f"kernel cache: not restored (the Docker config {folder}/config.json cannot be read "
                      "(JSONDecodeError)); starting cold"),
    ]
    for config, line in cases:
        if (folder / "config.json").exists():
            (folder / "config.json").unlink()
        done = run_with_config(tmp_path, url, config)
        assert done.stdout.strip() == line, config
        assert done.stderr == "" and PASSWORD not in done.stdout
        assert files_in(tmp_path / "cache") == []


def test_the_docker_configs_entry_is_found_by_host_as_the_docker_cli_names_it(tmp_path, monkeypatch):
    from sglstack.inimage.incontainer import kernelcache_init as init

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert init.credentials("r.example:5000") is None  # no config.json: anonymous
    hub = base64.b64encode(b"hubuser:hubpw").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": hub},  # what `docker login` writes for Docker Hub
        "https://r.example:5000": {"username": "u", "password": "p"},
        "r.example": {"auth": base64.b64encode(b"other:port").decode()},
    }}))
    assert init.credentials("registry-1.docker.io") == ("hubuser", "hubpw")  # the Hub's API host
    assert init.credentials("r.example:5000") == ("u", "p")
    assert init.credentials("r.example") == ("other", "port")
    assert init.credentials("r.example:443") is None


def _init_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernelcache_init", INIT_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_init_container_unpacks_no_more_than_its_limit(tmp_path):
    init = _init_module()
    layer = tmp_path / "layer.tar.gz"
    with tarfile.open(layer, mode="w:gz") as tar:
        for name in ("a", "b"):
            info = tarfile.TarInfo(f"triton/{name}")
            info.size = 600
            tar.addfile(info, io.BytesIO(b"\0" * 600))
    with pytest.raises(ValueError, match="more than 1000 bytes unpacked"):
        init.unpack(str(layer), str(tmp_path / "cache"), max_bytes=1000)
    assert init.unpack(str(layer), str(tmp_path / "cache2"), max_bytes=1200) == 2


def test_the_init_container_gives_up_a_download_that_trickles(tmp_path, blobs, monkeypatch):
    init = _init_module()
    clock = iter([0.0, 10_000.0, 10_000.0])  # the deadline, then a chunk read long after it
    monkeypatch.setattr(init.time, "monotonic", lambda: next(clock))
    problem = init.download(blobs + LAYER_DIGEST, candidate(), str(tmp_path / "layer"))
    assert problem == f"the layer came slower than 256 KiB/s ({len(LAYER_BYTES)} of {len(LAYER_BYTES)} bytes)"
