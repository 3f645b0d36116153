"""`run_smoke`'s kernel caches in process (the SGLang double on a thread, tests/lib/inthread_sglang): a passing
smoke packs what its cold starts compiled and starts again warm from it; a failed one packs nothing; DeepGEMM is
precompiled into the cache before the cold start. The double's kernels are files; no timing is judged."""

from __future__ import annotations

import pytest
from inthread_sglang import python_env, serve_in_threads

from sglstack.core.console import printable_lines
from sglstack.smoke import run_smoke, smoke_options
from sglstack.smoke import runner as runner_mod

ENV = {"SGLANG_DOUBLE_TOKENS_PER_S": "4000", "SGLANG_DOUBLE_TTFT_S": "0", "SGLANG_DOUBLE_KERNELS": "3",
       "SGLANG_DOUBLE_COMPILE_S": "0", "SGLANG_LOG_MS": "1"}


@pytest.fixture
def servers(monkeypatch):
    return serve_in_threads(monkeypatch)


def _run(tmp_path, env=None, **more):
    env_dir = tmp_path / "env"
    env_dir = env_dir if env_dir.exists() else python_env(env_dir)
    options = smoke_options(None, runner="process", python_env=str(env_dir), model="m", draft_model="d", tp=1, gpus=0,
                            timeout=60, concurrency=1, num_prompts=1, max_new_tokens=4, env={**ENV, **(env or {})},
                            build_dir=str(tmp_path / "build"), report=str(tmp_path / "out" / "report.json"),
                            **{"no_history": True, "kinds": "baseline", **more})
    lines: list[str] = []
    return run_smoke(None, None, options, log=lines.append), lines


def test_a_passing_smoke_packs_its_caches_and_starts_again_warm_from_them(servers, tmp_path):
    report, lines = _run(tmp_path, warm_start=True, no_warm_compile=True)
    data = report.data
    assert (data["verdict"], data["failures"]) == ("pass", [])
    assert [s["kind"] for s in servers.started] == ["baseline", "baseline"]  # the cold start, then the warm one
    packed = data["kernel_cache"]["packed"]["baseline"]
    assert packed["files"] == 9  # 3 Triton kernels, 3 FlashInfer ones and their 3 ninja deps logs
    assert data["baseline"]["kernel_cache"]["files_after"] == 9
    warm = data["warm"]["baseline"]
    assert warm["kernel_cache"]["restore"]["matched"] is True
    assert (warm["kernel_cache"]["files_before"], warm["kernel_cache"]["new_files"]) == (9, 0)
    assert "smoke: baseline: warm start: 0 new kernel cache files, 0 rewritten" in lines
    assert "smoke: kernel caches not packed: the smoke failed" not in lines


def test_a_failed_smoke_packs_nothing_and_starts_nothing_warm(servers, tmp_path):
    report, lines = _run(tmp_path, env={"SGLANG_DOUBLE_CRASH_AT_START": "1"}, warm_start=True)
    assert report.data["verdict"] == "fail"
    assert "smoke: kernel caches not packed: the smoke failed" in lines
    assert [s["kind"] for s in servers.started] == ["baseline"]
    assert not report.data["kernel_cache"]["packed"]
    assert report.data.get("warm") is None


def test_a_smoke_without_caches_says_nothing_of_them(servers, tmp_path):
    report, lines = _run(tmp_path)
    assert report.data["verdict"] == "pass"
    assert report.data.get("kernel_cache") is None and report.data.get("warm") is None
    assert not any("kernel cache" in line for line in lines)
    assert "TRITON_CACHE_DIR" not in servers.started[0]["env"]


def test_deep_gemm_is_precompiled_into_the_cache_before_the_cold_start(servers, tmp_path):
    report, lines = _run(tmp_path, kernel_cache=True, precompile_deep_gemm=True)
    assert report.data["verdict"] == "pass"
    assert [s["kind"] for s in servers.started] == ["compile_deep_gemm", "baseline"]
    assert "smoke: baseline: DeepGEMM precompile done: 3 files in the cache's deep_gemm folder" in lines
    assert report.data["kernel_cache"]["packed"]["baseline"]["files"] == 12  # + 3 DeepGEMM files
    cold_env = servers.started[1]["env"]
    assert cold_env["TRITON_CACHE_DIR"].startswith(str(tmp_path / "build"))


def test_without_a_log_the_lines_go_to_stderr_made_printable(servers, tmp_path, capsys):
    options = smoke_options(None, runner="process", python_env=str(python_env(tmp_path / "env")), model="m",
                            gpus=0, concurrency=1, num_prompts=1, max_new_tokens=4, kinds="baseline", env=ENV,
                            build_dir=str(tmp_path / "build"), report=str(tmp_path / "report.json"), no_history=True)
    assert run_smoke(None, None, options).data["verdict"] == "pass"
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("smoke: process runner, Python environment ")
    assert err[-1].startswith("smoke: report ")
    runner_mod._stderr("a server line \x1b[31mred\x1b[0m")
    assert capsys.readouterr().err == printable_lines("a server line \x1b[31mred\x1b[0m") + "\n"
    assert "\x1b" not in printable_lines("\x1b[31m")


def test_a_run_far_slower_than_the_last_pass_fails_the_regression_gate(servers, tmp_path):
    """The second server is 200 times slower than the first (a difference no machine load makes)."""
    history = {"no_history": False, "max_regression": 0.5, "kinds": "baseline,eagle3", "min_speedup": 0.01,
               "min_accept_length": 0}
    first, _ = _run(tmp_path, **history)
    slow, _ = _run(tmp_path, env={"SGLANG_DOUBLE_TOKENS_PER_S": "20"}, **history)
    assert first.data["verdict"] == "pass"
    assert slow.data["verdict"] == "fail"
    assert any(f.startswith("max_regression") for f in slow.data["failures"])
