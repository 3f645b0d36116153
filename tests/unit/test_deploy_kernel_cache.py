"""`invoke deploy --kernel-cache` (compose): the folder the init service copies into the cache volume is filled
from the artifact whose key is exactly this deployment's on this node, or emptied with one line naming the key
field that differs; the compose file carries the volume, the init service and every cache variable."""

from __future__ import annotations

from pathlib import Path

import yaml

from sglstack.config.matrix import load_matrix
from sglstack.deploy.kernelcache import deployment_key, restore_for_compose, smoke_store
from sglstack.kernelcache import CONTAINER_CACHE_ROOT, NodeGpu, cache_files
from sglstack.render.compose import ComposeOptions, deploy_spec, render_compose

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "a" * 64


def stack():
    return load_matrix(REPO / "tests" / "fixtures" / "stacks-cpu.yaml").get("cpu-test")


def packed_for(build_root: Path, options: ComposeOptions) -> None:
    folder = build_root / "made"
    (folder / "triton" / "k").mkdir(parents=True)
    (folder / "triton" / "k" / "a.cubin").write_bytes(b"kernel")
    key = deployment_key(deploy_spec(stack(), options), DIGEST, NodeGpu())
    smoke_store(build_root, "cpu-test").put(key, folder)


def test_a_matching_key_fills_the_folder_and_another_empties_it_with_its_line(tmp_path):
    said: list[str] = []
    out = tmp_path / "cpu-test"
    options = ComposeOptions(kernel_cache=True)
    packed_for(tmp_path, options)
    line = restore_for_compose(tmp_path, "cpu-test", out, deploy_spec(stack(), options), "img:tag", DIGEST,
                               local=True, verify_key=None, say=said.append)
    assert line.startswith("kernel cache: restored 1 files from sha256:") and said == [line]
    assert cache_files(out / "kernel-cache-restored") == {"triton/k/a.cubin": 6}
    # The same image served without EAGLE-3: another argv, another key. Nothing stale stays in the folder.
    baseline = ComposeOptions(kernel_cache=True, eagle3=False)
    line = restore_for_compose(tmp_path, "cpu-test", out, deploy_spec(stack(), baseline), "img:tag", DIGEST,
                               local=True, verify_key=None, say=said.append)
    assert line == ("kernel cache: key differs in draft_model: this start has 'none', the artifact "
                    "'test-org/tiny-eagle3' (and 1 more: serving_hash); starting cold")
    assert cache_files(out / "kernel-cache-restored") == {}
    line = restore_for_compose(tmp_path, "cpu-test", out, deploy_spec(stack(), options), "img:tag", DIGEST,
                               local=False, verify_key=None, say=said.append)
    assert line == ("kernel cache: the Docker host is remote and the restored folder would be on this machine; "
                    "starting cold")


def test_the_compose_file_fills_a_volume_before_the_server_starts():
    text = render_compose(stack(), f"r@{DIGEST}", options=ComposeOptions(kernel_cache=True))
    doc = yaml.safe_load(text)
    server, init = doc["services"]["sglang"], doc["services"]["kernel-cache-init"]
    assert server["depends_on"] == {"kernel-cache-init": {"condition": "service_completed_successfully"}}
    assert f"kernel-cache:{CONTAINER_CACHE_ROOT}" in server["volumes"]
    assert server["environment"]["TRITON_CACHE_DIR"] == f"{CONTAINER_CACHE_ROOT}/triton"
    assert server["environment"]["XDG_CACHE_HOME"] == f"{CONTAINER_CACHE_ROOT}/xdg"
    assert init["image"] == f"r@{DIGEST}"
    assert init["volumes"] == ["./kernel-cache-restored:/restore:ro", "kernel-cache:/cache"]
    assert init["command"] == ["sh", "-c", "find /cache -mindepth 1 -delete && cp -a /restore/. /cache/"]
    # The init service's container is the stack's too: a redeploy's ownership check finds it labelled.
    assert init["labels"] == {"io.sglstack.stack": "cpu-test"}
    assert doc["volumes"] == {"kernel-cache": {}}
    plain = yaml.safe_load(render_compose(stack(), f"r@{DIGEST}", options=ComposeOptions()))
    assert set(plain["services"]) == {"sglang"} and "volumes" not in plain
    assert "TRITON_CACHE_DIR" not in plain["services"]["sglang"].get("environment", {})


def test_status_shows_the_recorded_start_by_phase():
    from sglstack.deploy.status import start_cell

    phases = {"milestones_s": {"imports_done": 37.1, "weights_loaded": 38.1, "cuda_graphs_captured": None,
                               "healthy": 63.0, "first_token": None},
              "phases_s": {"imports": 37.1, "weights": 1.0, "cuda_graphs": None, "to_healthy": None,
                           "first_token": None}}
    assert start_cell(phases) == "healthy 63.0s: imports 37.1, weights 1.0, cuda_graphs ?, to_healthy ?"
    assert start_cell({}) == ""
