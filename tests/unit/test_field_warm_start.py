"""The warm-start field run (issue 40): `benchmarks/field_run.py --warm-start` on the H200, kept by
`benchmarks/field_record.py` as tests/data/field/h200-warm*.json. Its verdicts are re-derived here from the
recorded figures: the warm start saved at least half of the cold start to healthy, added no kernel cache file,
and restored exactly the artifact the cold start packed (key matched). The same driver and recorder run
end to end against the CPU double."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from smoke_fixtures import DOUBLE_ENV, make_double_env

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = sorted((REPO / "tests" / "data" / "field").glob("h200-warm*.json"))


def _recorder():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import field_record  # benchmarks/ is not a package
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return field_record


def rederive(recording: dict[str, Any]) -> dict[str, Any]:
    """The verdicts from the figures, by hand (not by the recorder's own function, which is checked against it)."""
    report = recording["report"]
    cold, warm = report["baseline"], report["warm"]["baseline"]
    saving = 1 - warm["startup_s"] / cold["startup_s"]
    restore = warm["kernel_cache"]["restore"]
    packed = report["kernel_cache"]["packed"]["baseline"]
    return {"saving_verdict": "pass" if saving >= 0.5 else "fail",
            "no_new_kernel_files": "pass" if warm["kernel_cache"]["new_files"] == 0 else "fail",
            "no_rewritten_kernel_files": "not recorded" if warm["kernel_cache"].get("rewritten_files") is None
            else "pass" if warm["kernel_cache"]["rewritten_files"] == 0 else "fail",
            "key_matched": "pass" if restore["matched"] and restore["artifact"] == packed["artifact"]
            and restore["key_differences"] == [] else "fail"}


# What each recording showed. h200-warm-start (2026-12-05): the cache made by the cold start was restored (key
# matched) and nothing compiled, but the start saved 36% (99.3 s -> 63.2 s), not the 50% the issue asks: SGLang
# 0.5.17 captures 58 prefill CUDA graphs on every start (60.8 s cold, 33.2 s warm), capture that no cache holds.
EXPECTED = {"h200-warm-start": {"saving_verdict": "fail", "no_new_kernel_files": "pass",
                                "no_rewritten_kernel_files": "not recorded", "key_matched": "pass"}}


def _capture_seconds(milestones: list[str], graph: str) -> float:
    line = next(m for m in milestones if f"Capture target {graph} CUDA graph end" in m)
    return float(line.split("elapsed=")[1].split(" s")[0])


def test_what_the_warm_start_still_spends_is_prefill_graph_capture_not_compiling():
    recording = json.loads((REPO / "tests" / "data" / "field" / "h200-warm-start.json").read_text())
    report, milestones = recording["report"], recording["server_milestones"]
    warm_s = report["warm"]["baseline"]["startup_s"]
    assert recording["warm_verdicts"]["new_kernel_files"] == 0
    # More than half of the warm start is the prefill graphs' capture; the decode graphs' capture, where the
    # cold start compiled, fell from 3.1 s to 1.0 s.
    assert _capture_seconds(milestones["baseline.warm"], "prefill") > 0.5 * warm_s
    assert _capture_seconds(milestones["baseline.warm"], "decode") < _capture_seconds(milestones["baseline"], "decode")


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_the_h200_recording_re_derives_its_verdicts(path):
    recording = json.loads(path.read_text())
    verdicts = rederive(recording)
    assert verdicts == {k: recording["warm_verdicts"][k] for k in verdicts}
    assert verdicts == EXPECTED[path.stem]
    assert _recorder().warm_verdicts(recording["report"]) == recording["warm_verdicts"]
    assert "H200" in recording["device"] and recording["report"]["runner"]["kind"] == "process"
    key = recording["report"]["baseline"]["kernel_cache"]["key"]
    assert key["gpu_name"].endswith("H200") and key["compute_capability"] == "9.0"


def test_the_driver_and_recorder_make_a_warm_start_recording_these_tests_accept(tmp_path, repo_root):
    env_dir = make_double_env(tmp_path / "venv", repo_root)
    model = tmp_path / "model"
    for kind in ("target", "draft"):
        (model / kind).mkdir(parents=True)
    out = tmp_path / "out"
    # Compiling is slow and a restored cache skips it: 10 kernels of 0.3 s against a start of about 0.5 s.
    env = {**DOUBLE_ENV, "SGLANG_DOUBLE_KERNELS": "10", "SGLANG_DOUBLE_COMPILE_S": "0.3"}
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "field_run.py"), "--python-env", str(env_dir),
         "--model", str(model / "target"), "--draft", str(model / "draft"), "--out", str(out), "--gpus", "0",
         "--timeout", "60", "--extra-args", "", "--max-new-tokens", "8", "--num-prompts", "2",
         "--concurrency", "2", "--warm-start", "--no-probes", *(f"--env={k}={v}" for k, v in env.items())],
        capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (out / "kernel-cache-store" / "oci-layout").is_file()
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "field_record.py"), str(out), str(tmp_path / "r.json")],
                   check=True, capture_output=True)
    made = json.loads((tmp_path / "r.json").read_text())
    verdicts = rederive(made)
    assert {k: made["warm_verdicts"][k] for k in verdicts} == verdicts
    # What does not depend on the machine's speed: the cache came back whole and nothing was compiled.
    assert (verdicts["no_new_kernel_files"], verdicts["key_matched"]) == ("pass", "pass")
    # 10 Triton + 10 FlashInfer files and FlashInfer's 10 ninja deps logs; none rebuilt by the warm start.
    assert made["warm_verdicts"]["cold_kernel_files"] == 30 and made["report"]["verdict"] == "pass"
    assert made["warm_verdicts"]["no_rewritten_kernel_files"] == "pass"
    assert set(made["server_milestones"]) == {"baseline", "baseline.warm"}
    assert set(made["steps"]) == {"baseline_model_load", "baseline_first_token"}
