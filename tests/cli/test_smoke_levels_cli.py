"""`invoke smoke --concurrency-levels ... --sweep ...` (issue 42) on the CPU double served by the process runner.

The double's speed per level is set here (SGLANG_DOUBLE_SPEC_SPEEDUP_BY_RUNNING: EAGLE-3 at 3 steps pays 2x alone
and 0.25x once two requests share a batch; at 7 steps 3x and 2x), with margins no machine's speed moves across
1.0x. The real server's interface is the double's: SGLang's HTTP routes and fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_invoke
from smoke_fixtures import DOUBLE_ENV, FAST, make_double_env

SPEEDS = {**DOUBLE_ENV, "SGLANG_DOUBLE_SPEC_SPEEDUP_BY_RUNNING": "3@1=2.0,3@2=0.25,7@1=3.0,7@2=2.0"}


@pytest.fixture(scope="module")
def double_env(tmp_path_factory, repo_root) -> Path:
    return make_double_env(tmp_path_factory.mktemp("double-env") / "venv", repo_root)


def _args(env_dir: Path, report: Path, *more: str) -> list[str]:
    return ["smoke", "--runner", "process", "--python-env", str(env_dir), "--model", FAST["model"],
            "--draft-model", FAST["draft_model"], "--gpus", "0", "--timeout", "60", "--num-prompts", "4",
            "--max-new-tokens", "64", "--concurrency", "2", "--report", str(report),
            *[arg for key, value in SPEEDS.items() for arg in ("--env", f"{key}={value}")], *more]


def test_the_crossover_fails_the_smoke_and_the_sweep_names_the_best_per_level(double_env, tmp_path):
    report = tmp_path / "report.json"
    proc = run_invoke(*_args(double_env, report, "--concurrency-levels", "1,2,4", "--sweep", "3:1:4,7:1:8"),
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert [(row["concurrency"], row["pays"]) for row in data["levels"]] == [(1, True), (2, False), (4, False)]
    assert data["crossover"] == 2
    assert [f.split(" EAGLE-3")[0] for f in data["failures"]] == ["min_speedup: at concurrency 2",
                                                                   "min_speedup: at concurrency 4"]
    out = proc.stdout.splitlines()
    assert out[0].startswith("smoke FAIL: python-env:")
    assert [line.split(": speedup")[0] for line in out if line.startswith("  concurrency ")] == [
        "  concurrency 1", "  concurrency 2", "  concurrency 4"]
    assert next(line for line in out if "stops paying" in line).startswith(
        "  EAGLE-3 stops paying at concurrency 2 (0.")
    assert [line.split(" (")[0] for line in out if line.startswith("  best at ")] == [
        "  best at concurrency 1: 7:1:8", "  best at concurrency 2: 7:1:8", "  best at concurrency 4: 7:1:8"]
    sweep = data["sweep"]
    assert [(e["setting"], e["configured"], e["verdict"], e["crossover"]) for e in sweep["settings"]] == [
        ("3:1:4", True, "fail", 2), ("7:1:8", False, "pass", None)]
    assert sweep["recommended"]["setting"] == "7:1:8"
    # Each setting served once: its own log beside the report, the stack's own under the plain name.
    assert sorted(p.name for p in tmp_path.glob("report.*.log")) == [
        "report.baseline.log", "report.eagle3.log", "report.eagle3.s7-k1-d8.log"]
    md = (tmp_path / "report.md").read_text().splitlines()
    assert "## Speedup per concurrency level" in md and "## Sweep of speculative settings" in md
    # The history line keeps each level's figures for the regression gate at each level.
    history = tmp_path / "build" / "_no-stack" / "smoke-history.jsonl"
    (line,) = [json.loads(x) for x in history.read_text().splitlines()]
    assert set(line["levels"]["eagle3"]) == {"1", "2", "4"} and line["crossover"] == 2
    assert line["fingerprint"]["concurrency_levels"] == [1, 2, 4]


@pytest.mark.parametrize(("args", "message"), [
    (("--sweep", "3:1"), "error: smoke option sweep: '3:1' is not STEPS:TOPK:DRAFT_TOKENS (e.g. 3:1:4)"),
    (("--sweep", "3:1:4,3:1:4"), "error: smoke option sweep: '3:1:4' is named twice"),
    (("--sweep", "0:1:4"), "error: smoke option sweep: '0:1:4': each number must be >= 1 and <= 65536"),
    (("--concurrency-levels", "1,two"), "error: smoke option concurrency_levels 'two' is not a whole number"),
    (("--sweep", "7:1:8", "--bisect-exit", "5"),
     "error: smoke: --sweep is not for --bisect-exit (a bisect step compares one setting)"),
])
def test_a_bad_sweep_or_level_is_one_line_before_any_server_starts(double_env, tmp_path, args, message):
    report = tmp_path / "report.json"
    proc = run_invoke(*_args(double_env, report, *args), cwd=tmp_path,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [message]
    assert not report.exists() and not list(tmp_path.glob("report.*.log"))


def test_a_sweep_after_a_failed_baseline_serves_nothing_more_and_says_why(double_env, tmp_path):
    report = tmp_path / "report.json"
    proc = run_invoke(*_args(double_env, report, "--sweep", "7:1:8", "--env", "SGLANG_DOUBLE_CRASH_AT_START=baseline"),
                      cwd=tmp_path, env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build")}, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    entries = {e["setting"]: e for e in data["sweep"]["settings"]}
    assert entries["7:1:8"]["eagle3"]["failure"] == "not served: the baseline failed"
    assert entries["7:1:8"]["verdict"] == "fail" and data["sweep"]["recommended"] is None
    assert "smoke: sweep 7:1:8 skipped: the baseline server failed" in proc.stderr
    assert sorted(p.name for p in tmp_path.glob("report.*.log")) == ["report.baseline.log"]
