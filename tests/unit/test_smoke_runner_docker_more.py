"""`run_smoke` with the docker runner, in process (tests/lib/inthread_docker: the SDK's container as a double, its
command served by the SGLang double on a thread): the kernel caches bound into the containers (DeepGEMM compiled
in a one-off container, the warm start a second container), a remote Docker host (its published ports reached by
its name, its bind sources and draft not looked for here), and the line naming what changed since the last pass.
Verdicts come from the double's scripted behaviour, never from measured speed."""

from __future__ import annotations

import socket

import pytest
from draft_fixtures import DRAFT, TARGET, model_folder
from inthread_docker import Engine

from sglstack.serving.caches import CONTAINER_CACHE_ROOT
from sglstack.serving.draft import DraftMismatch
from sglstack.smoke import fields as fields_mod
from sglstack.smoke import report as report_mod
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke import runner as runner_mod
from sglstack.smoke import server as server_mod
from sglstack.smoke import warm as warm_mod

IMAGE_ID = "sha256:" + "6" * 64
ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0", "SGLANG_DOUBLE_KERNELS": "2",
       "SGLANG_DOUBLE_COMPILE_S": "0"}
REMOTE = "gpu-node.test"  # a name only the test's resolver knows: where the "remote" servers listen
REMOTE_ADDRESS = "127.0.0.3"  # a loopback address 127.0.0.1 is not: a server reached at 127.0.0.1 is not this one


def _engine(monkeypatch, tmp_path, ids=(IMAGE_ID,), listen=None):
    double = Engine(tmp_path, listen=listen)
    monkeypatch.setattr(server_mod, "running_container", double.running_container)
    monkeypatch.setattr(report_mod, "smoke_chart", lambda data, history: b"png")  # drawn by its own tests
    monkeypatch.setattr(warm_mod, "gpu_facts", lambda visible=None: ("none", "none", "none"))
    images = iter(ids)

    def open_what_to_serve(stack, image, options, interpreter, log):
        double.opened.append((stack, image, interpreter))
        return "the engine", {"ref": image, "digest": None, "id": next(images), "repo_digests": []}

    monkeypatch.setattr(runner_mod, "open_what_to_serve", open_what_to_serve)
    return double


def _options(tmp_path, env=None, **more):
    settings = {"model": "m", "draft_model": "d", "tp": 1, "gpus": 0, "timeout": 60, "concurrency": 1,
                "num_prompts": 1, "max_new_tokens": 4, "kinds": "baseline", "no_history": True, **more}
    return smoke_options(None, env={**ENV, **(env or {})}, build_dir=str(tmp_path / "build"),
                         report=str(tmp_path / "out" / "report.json"), **settings)


def _run(tmp_path, env=None, **more):
    lines: list[str] = []
    return run_smoke(None, "sglstack/cpu:test", _options(tmp_path, env, **more), log=lines.append), lines


def test_deep_gemm_compiles_in_a_one_off_container_of_the_image_into_the_bound_cache(monkeypatch, tmp_path):
    engine = _engine(monkeypatch, tmp_path)
    report, lines = _run(tmp_path, kernel_cache=True, precompile_deep_gemm=True)
    assert report.data["verdict"] == "pass", report.data["failures"]
    compile_run, cold = engine.runs
    assert compile_run["command"][1:3] == ["-m", "sglang.compile_deep_gemm"]
    assert (compile_run["engine"], compile_run["image"]) == ("the engine", IMAGE_ID)
    folder = tmp_path / "build" / "_no-stack" / "kernel-cache" / "baseline"
    assert f"{folder}:{CONTAINER_CACHE_ROOT}" in compile_run["volumes"]
    assert "smoke: baseline: DeepGEMM precompile done: 2 files in the cache's deep_gemm folder" in lines
    assert cold["command"][1:3] == ["-m", "sglang.launch_server"]
    assert cold["environment"]["TRITON_CACHE_DIR"].startswith(CONTAINER_CACHE_ROOT)
    # 2 DeepGEMM files, 2 Triton kernels, 2 FlashInfer ones and their 2 ninja deps logs
    assert report.data["kernel_cache"]["packed"]["baseline"]["files"] == 8
    assert report.data.get("warm") is None


def test_the_warm_start_is_a_second_container_restoring_what_the_cold_one_compiled(monkeypatch, tmp_path):
    engine = _engine(monkeypatch, tmp_path)
    report, lines = _run(tmp_path, warm_start=True, no_warm_compile=True, max_warm_start_s=600)
    data = report.data
    assert (data["verdict"], data["failures"]) == ("pass", [])
    assert [(r["engine"], r["image"]) for r in engine.runs] == [("the engine", IMAGE_ID)] * 2
    assert engine.runs[0]["volumes"] == engine.runs[1]["volumes"]
    warm = data["warm"]["baseline"]
    assert warm["started"] is True and warm["kernel_cache"]["restore"]["matched"] is True
    assert (warm["kernel_cache"]["files_before"], warm["kernel_cache"]["new_files"]) == (6, 0)
    assert "smoke: baseline: warm start: 0 new kernel cache files, 0 rewritten" in lines


def test_a_failing_start_gate_fails_the_smoke_after_its_caches_are_packed(monkeypatch, tmp_path):
    _engine(monkeypatch, tmp_path)
    report, _ = _run(tmp_path, warm_start=True, max_warm_start_s=1e-9)
    data = report.data
    assert data["verdict"] == "fail"
    assert len(data["failures"]) == 1
    assert data["failures"][0].startswith("max_warm_start_s: the baseline warm start took ")
    assert data["kernel_cache"]["packed"]["baseline"]["files"] == 6  # packed before the warm start was judged
    assert data["warm"]["baseline"]["started"] is True


@pytest.fixture
def remote(monkeypatch):
    """REMOTE resolves to REMOTE_ADDRESS (the test's resolver; every other name as the system resolves it)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return real(REMOTE_ADDRESS if host == REMOTE else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return f"ssh://user@{REMOTE}"


def _models(root):
    """A target and an EAGLE-3 draft whose hidden sizes differ: the draft check refuses them where it reads them."""
    model_folder(root / "target", TARGET)
    model_folder(root / "draft", {**DRAFT, "hidden_size": 2048, "target_hidden_size": 2048})
    return {"model": "/models/target", "draft_model": "/models/draft", "kinds": "baseline,eagle3",
            "min_speedup": 0.01, "max_regression": 1.0}


def test_a_remote_hosts_servers_are_reached_by_its_name_and_its_files_not_looked_for_here(monkeypatch, tmp_path,
                                                                                           remote):
    engine = _engine(monkeypatch, tmp_path, listen=REMOTE_ADDRESS)
    # Here the models do not fit and a bind source is missing: the node's own files are what it serves.
    models, missing = tmp_path / "models", tmp_path / "node-only"
    report, lines = _run(tmp_path, docker_host=remote, mounts=[f"{models}:/models:ro", f"{missing}:/data"],
                         **_models(models))
    data = report.data
    assert data["verdict"] == "pass", data["failures"]
    assert [r["ports"] for r in engine.runs] == [{"30000/tcp": ("0.0.0.0", None)}] * 2
    assert data["baseline"]["started"] and data["eagle3"]["started"]
    assert f"smoke: mount sources ({models}, {missing}) are on the remote Docker host: they cannot be checked " \
           "from here" in lines
    assert not missing.exists()


def test_a_local_host_refuses_a_draft_that_does_not_fit_its_target(monkeypatch, tmp_path):
    engine = _engine(monkeypatch, tmp_path)
    models = tmp_path / "models"
    with pytest.raises(DraftMismatch, match="hidden"):
        _run(tmp_path, mounts=[f"{models}:/models:ro"], **_models(models))
    assert engine.runs == []


def test_a_regression_against_another_image_says_how_to_see_what_changed(monkeypatch, tmp_path):
    """The second image's EAGLE-3 server is 200 times slower (no machine load makes such a difference) and its
    greedy outputs all differ: two failures, one of them the regression gate's. (Not the speed-up gate: at load
    the baseline's own overheads can hold its ratio above any line near 0.01.)"""
    _engine(monkeypatch, tmp_path, ids=(IMAGE_ID, "sha256:" + "7" * 64))
    monkeypatch.setattr(fields_mod, "local_snapshot", lambda spec, docker_host=None: None)
    history = {"no_history": False, "max_regression": 0.5, "kinds": "baseline,eagle3", "min_speedup": 1e-6,
               "min_accept_length": 0, "max_new_tokens": 8}  # the double's drift starts at the fifth token
    first, _ = _run(tmp_path, **history)
    slow, lines = _run(tmp_path, env={"SGLANG_DOUBLE_SPEC_SPEEDUP": "0.01", "SGLANG_DOUBLE_DIVERGE": "1"}, **history)
    assert first.data["verdict"] == "pass", first.data["failures"]
    failures = slow.data["failures"]
    assert any(f.startswith("max_regression") for f in failures)
    assert any(f.startswith("min_agreement") for f in failures), failures
    command = slow.data["since_last_pass"]["command"]
    assert IMAGE_ID in command
    assert f"smoke: what changed since the last passing image: {command}" in lines


def test_a_regression_against_the_same_image_names_no_diff(monkeypatch, tmp_path):
    _engine(monkeypatch, tmp_path, ids=(IMAGE_ID, IMAGE_ID))
    history = {"no_history": False, "max_regression": 0.5, "kinds": "baseline,eagle3", "min_speedup": 0.01,
               "min_accept_length": 0}
    first, _ = _run(tmp_path, **history)
    slow, lines = _run(tmp_path, env={"SGLANG_DOUBLE_TOKENS_PER_S": "20"}, **history)
    assert first.data["verdict"] == "pass"
    assert any(f.startswith("max_regression") for f in slow.data["failures"])
    assert slow.data["since_last_pass"] is None
    assert not any("since the last passing" in line for line in lines)
