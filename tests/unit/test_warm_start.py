"""A warm start with the CPU double (process runner): a server that reports its phases and fills its kernel
caches gets them back from the artifact its cold start made, and compiles nothing; a start whose key differs
(another GPU) starts cold, saying which key field differs, and compiles everything again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from smoke_fixtures import DOUBLE_ENV, make_double_env

from sglstack.config.settings import SmokeSettings, StartGates
from sglstack.core.errors import SmokeInputError
from sglstack.kernelcache import NodeGpu
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke.startgates import start_failures
from sglstack.smoke.subject import environment_info
from sglstack.smoke.warm import KernelCaches, warm_starts

KERNELS = "4"  # each a file in Triton's cache and one in FlashInfer's with its ninja deps log: 12 files


def options(tmp_path: Path, env_dir: Path, **more):
    return smoke_options(None, runner="process", python_env=str(env_dir), model="m", draft_model="d", tp=1,
                         gpus=0, timeout=60, concurrency=2, num_prompts=2, max_new_tokens=8, kinds="baseline",
                         env={**DOUBLE_ENV, "SGLANG_DOUBLE_KERNELS": KERNELS, "SGLANG_LOG_MS": "1"},
                         build_dir=str(tmp_path / "build"), report=str(tmp_path / "out" / "report.json"),
                         no_history=True, **more)


@pytest.fixture
def env_dir(tmp_path, repo_root):
    return make_double_env(tmp_path / "venv", repo_root)


def test_the_warm_start_restores_what_the_cold_start_packed_and_compiles_nothing(tmp_path, env_dir):
    lines: list[str] = []
    report = run_smoke(None, None, options(tmp_path, env_dir, warm_start=True, no_warm_compile=True), log=lines.append)
    data = report.data
    assert (data["verdict"], data["failures"]) == ("pass", [])
    cold, warm = data["baseline"], data["warm"]["baseline"]
    packed = data["kernel_cache"]["packed"]["baseline"]
    assert cold["kernel_cache"]["files_after"] == packed["files"] == 12
    assert warm["kernel_cache"]["restore"]["matched"] is True
    assert warm["kernel_cache"]["restore"]["artifact"] == packed["artifact"]
    # Restored with their build times: the double's ninja finds FlashInfer's kernels fresh and rebuilds none.
    assert (warm["kernel_cache"]["files_before"], warm["kernel_cache"]["new_files"]) == (12, 0)
    assert warm["kernel_cache"]["rewritten_files"] == 0
    assert f"smoke: baseline: warm start: kernel cache: restored 12 files from {packed['artifact'][:19]} " \
           f"(key {packed['key_digest'][:19]} matched)" in lines
    assert "smoke: baseline: warm start: 0 new kernel cache files, 0 rewritten" in lines
    # Both starts by phase, every milestone read from the double's SGLang-worded lines.
    for run in (cold, warm):
        assert run["phases"]["unknown"] == []
        assert list(run["phases"]["phases_s"]) == ["imports", "weights", "cuda_graphs", "to_healthy", "first_token"]
    assert Path(tmp_path / "out" / "report.baseline.warm.log").read_text().count("fired up") == 1


def test_a_start_whose_key_differs_starts_cold_with_its_line(tmp_path, env_dir):
    opts = options(tmp_path, env_dir, kernel_cache=True)
    first = run_smoke(None, None, opts, log=lambda _line: None)
    assert first.data["kernel_cache"]["packed"]["baseline"]["files"] == 12
    report_path = tmp_path / "out" / "report.json"
    image_info = environment_info(opts, str(env_dir / "bin" / "python3"))
    caches = KernelCaches.plan(opts, None, report_path)
    assert caches is not None
    # The same artifact, read on a node with another GPU.
    other = replace(caches.bound(image_info), gpu=NodeGpu("NVIDIA H100 80GB HBM3", "9.0", "580"))
    lines: list[str] = []
    warm = warm_starts(other, None, image_info, report_path, lines.append)
    assert ("smoke: baseline: warm start: kernel cache: key differs in gpu_name: this start has 'NVIDIA H100 80GB "
            "HBM3', the artifact 'none' (and 2 more: compute_capability, driver_major); starting cold") in lines
    cache = warm["baseline"].kernel_cache
    assert cache is not None and cache["restore"]["matched"] is False
    assert (cache["files_before"], cache["new_files"]) == (0, 12)  # nothing stale: an empty folder, all compiled
    failures = start_failures(StartGates(no_warm_compile=True), {}, warm, None)
    assert len(failures) == 1 and failures[0].startswith(
        "no_warm_compile: the baseline warm start compiled: 12 new and 0 rewritten kernel cache files "
        "(flashinfer/.cache/")


def test_warm_start_options_are_refused_in_one_line_before_anything_starts(tmp_path, env_dir):
    with pytest.raises(SmokeInputError) as info:
        options(tmp_path, env_dir, max_warm_start_s="60")
    assert str(info.value) == "smoke gate max_warm_start_s gates a warm start: pass --warm-start"
    with pytest.raises(SmokeInputError) as info:
        options(tmp_path, env_dir, cache_store=str(tmp_path / "s"))
    assert str(info.value) == ("--cache-store is where kernel caches are packed: pass --kernel-cache or "
                               "--warm-start")
    with pytest.raises(SmokeInputError) as info:
        options(tmp_path, env_dir, warm_start=True, max_warm_start_s="soon")
    assert str(info.value) == "invalid gate override: max_warm_start_s 'soon' is not a number"
    with pytest.raises(ValueError, match=r"gates a warm start: set smoke\.warm_start: true"):
        SmokeSettings(start_gates={"no_warm_compile": True})


def test_the_start_gates_word_each_failure():
    from sglstack.smoke.measure import ServerRun

    warm = {"baseline": ServerRun("baseline", True, startup_s=70.0, kernel_cache={"new_files": 0})}
    cold = {"baseline": ServerRun("baseline", True, startup_s=200.0)}
    last = {"time": "2026-12-05T03:00:00Z", "baseline": {"startup_s": 150.0}}
    assert start_failures(StartGates(max_warm_start_s=60, max_start_regression=0.25), cold, warm, last) == [
        "max_warm_start_s: the baseline warm start took 70.0s to healthy, over 60s",
        "max_start_regression: the baseline start took 200.0s to healthy, 33% over the last passing run's 150.0s "
        "(2026-12-05T03:00:00Z), more than 25%",
    ]
    assert start_failures(StartGates(max_warm_start_s=80, max_start_regression=0.5), cold, warm, last) == []


def test_deep_gemm_is_precompiled_into_the_cache_before_the_cold_start(tmp_path, env_dir):
    lines: list[str] = []
    report = run_smoke(None, None, options(tmp_path, env_dir, kernel_cache=True, precompile_deep_gemm=True),
                       log=lines.append)
    assert report.data["verdict"] == "pass"
    ran = [line for line in lines if "precompiling DeepGEMM" in line]
    assert len(ran) == 1 and " -m sglang.compile_deep_gemm --model-path m --tp-size 1 " in ran[0]
    assert ran[0].endswith(" --timeout 60")
    assert "smoke: baseline: DeepGEMM precompile done: 4 files in the cache's deep_gemm folder" in lines
    # 4 Triton + 4 FlashInfer files (+ their 4 ninja deps logs) from the start, 4 DeepGEMM files from the
    # precompile: all in the artifact.
    assert report.data["kernel_cache"]["packed"]["baseline"]["files"] == 16
    with pytest.raises(SmokeInputError, match=r"^--precompile-deep-gemm compiles into the kernel cache"):
        options(tmp_path, env_dir, precompile_deep_gemm=True)


@pytest.mark.parametrize("smoke_lines, message", [
    ("    start_gates:\n      no_warm_compile: true\n",
     "stack 'cpu-test': key 'smoke.start_gates': gates a warm start: set smoke.warm_start: true"),
    ("    warm_start: true\n    start_gates:\n      max_warm_start_s: -5\n",
     "stack 'cpu-test': key 'smoke.start_gates.max_warm_start_s': Input should be greater than 0"),
])
def test_the_start_gates_in_stacks_yaml_are_checked_in_one_line(tmp_path, repo_root, smoke_lines, message):
    from sglstack.config.matrix import load_matrix
    from sglstack.core.errors import ConfigError

    text = (repo_root / "tests" / "fixtures" / "stacks-cpu.yaml").read_text()
    path = tmp_path / "stacks.yaml"
    path.write_text(text.replace("    num_prompts: 4\n", "    num_prompts: 4\n" + smoke_lines, 1))
    with pytest.raises(ConfigError) as info:
        load_matrix(path).get("cpu-test")
    assert str(info.value).split(": ", 1)[1] == message and "\n" not in str(info.value)


def test_a_cache_store_that_cannot_be_written_is_refused_before_any_server_starts(tmp_path, env_dir):
    (tmp_path / "store").write_text("a file, not a folder")
    opts = options(tmp_path, env_dir, warm_start=True, cache_store=str(tmp_path / "store"))
    with pytest.raises(SmokeInputError) as info:
        run_smoke(None, None, opts, log=lambda _line: None)
    assert str(info.value).startswith(f"--cache-store: kernel cache store {tmp_path / 'store' / 'index.json'}: "
                                      "cannot be written (")
    assert not (tmp_path / "out").exists()  # no server ran, no report


@pytest.mark.parametrize(("contents", "why"), [
    ({"oci-layout": '{"imageLayoutVersion":"1.0.0"}', "index.json": "{not json"},
     "index.json: not an OCI image index ("),
    ({"oci-layout": '{"imageLayoutVersion":"1.0.0"}', "index.json": '{"manifests": {}}'},
     "index.json: not an OCI image index ("),
    ({"notes.txt": "the user's own files"},
     ": a folder that is neither empty nor an OCI image layout (no oci-layout file); name a new or empty folder, or "
     "a kernel cache store"),
], ids=["index-not-json", "index-not-an-index", "a-folder-of-other-things"])
def test_a_cache_store_that_is_no_store_is_refused_in_one_line_before_any_server_starts(tmp_path, env_dir, contents,
                                                                                        why):
    store = tmp_path / "store"
    store.mkdir()
    for name, text in contents.items():
        (store / name).write_text(text)
    opts = options(tmp_path, env_dir, kernel_cache=True, cache_store=str(store))
    with pytest.raises(SmokeInputError) as info:
        run_smoke(None, None, opts, log=lambda _line: None)
    said = str(info.value)
    assert said.startswith(f"--cache-store: kernel cache store {store}") and why in said and "\n" not in said
    assert not (tmp_path / "out").exists()  # no server ran, no report
    assert sorted(p.name for p in store.iterdir()) == sorted(contents)  # nothing written into it


def test_an_empty_or_new_cache_store_is_taken(tmp_path, env_dir):
    from sglstack.kernelcache import LayoutStore

    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "new"):
        LayoutStore(path).check()  # no error: the first pack makes it a store


def test_a_restored_kernel_rebuilt_in_place_fails_the_no_compile_gate(tmp_path, env_dir, monkeypatch):
    """The H100/H200 warm starts recompiled FlashInfer's norm module in place (ninja judged the restored output
    stale) while adding no file: the gate counts a rewritten kernel as compiled."""
    import sglstack.kernelcache.files as files

    opts = options(tmp_path, env_dir, kernel_cache=True)
    run_smoke(None, None, opts, log=lambda _line: None)
    report_path = tmp_path / "out" / "report.json"
    image_info = environment_info(opts, str(env_dir / "bin" / "python3"))
    caches = KernelCaches.plan(opts, None, report_path)
    assert caches is not None
    # A restore that stamps each file with the time of the restore (what sglstack did before), as ninja sees it.
    monkeypatch.setattr(files, "_packed_mtime_ns", lambda _member: None)
    lines: list[str] = []
    warm = warm_starts(caches.bound(image_info), None, image_info, report_path, lines.append)
    cache = warm["baseline"].kernel_cache
    assert cache is not None and cache["restore"]["matched"] is True
    assert (cache["new_files"], cache["rewritten_files"]) == (0, 4)
    assert all(name.endswith(".so") for name in cache["rewritten_files_first"])
    assert "smoke: baseline: warm start: 0 new kernel cache files, 4 rewritten" in lines
    failures = start_failures(StartGates(no_warm_compile=True), {}, warm, None)
    assert len(failures) == 1 and failures[0].startswith(
        "no_warm_compile: the baseline warm start compiled: 0 new and 4 rewritten kernel cache files (flashinfer/")
