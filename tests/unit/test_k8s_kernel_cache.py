"""`invoke deploy --on k8s --kernel-cache`: each pod gets an emptyDir for its caches and an init container (the
serving image, `python3 -c` of the in-image script) that restores, on the node, the artifact whose key matches
that node's GPU, by digest, hash-checked; any other node starts cold and says which key field differed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sglstack.config.matrix import load_matrix
from sglstack.render import k8s
from sglstack.render.k8s_cache import INIT_SCRIPT, CacheCandidates

REPO = Path(__file__).resolve().parents[2]
REF = "127.0.0.1:5000/sglstack/sglang@sha256:" + "b" * 64
LAYER = io.BytesIO()
with tarfile.open(fileobj=LAYER, mode="w:gz") as _tar:
    _info = tarfile.TarInfo("triton/k/a.cubin")
    _info.size = 6
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
    """A registry's blob endpoint that answers the layer (and a 401 Bearer challenge first, as Docker Hub does)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.startswith("/token"):
                body = b'{"token": "anon"}'
            elif self.headers.get("Authorization") != "Bearer anon":
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://127.0.0.1:{port}/token",service="r"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            else:
                body = LAYER_BYTES
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}/v2/r/blobs/"
    server.shutdown()


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


def test_another_node_or_a_changed_layer_starts_cold_with_its_line(tmp_path, blobs):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "stale").write_text("x")
    assert run_init(tmp_path, blobs, [candidate(gpu_name="NVIDIA H200")]) == (
        "kernel cache: key differs in gpu_name: this node has 'none', the artifact 'NVIDIA H200'; starting cold")
    assert files_in(tmp_path / "cache") == []  # nothing stale stays
    assert run_init(tmp_path, blobs, [candidate(size=5)]) == (
        "kernel cache: the layer does not hash to its digest; starting cold")
    assert run_init(tmp_path, blobs, []) == (
        "kernel cache: no artifact of the image matches this deployment; starting cold")
    assert files_in(tmp_path / "cache") == []
